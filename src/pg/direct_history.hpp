// Server layer: the completed item moved into the history (claim.finished)
// without SPI, for complete() on a queue that retains finished items.
//
// The row goes into the current slot of the ring (claim.finished_ring),
// into the slot's partition directly, with its index entries; then the item
// is deleted. It is the write of lineage.cpp's SQL statement (DELETE of the
// item, INSERT of its history row through claim.finished) and keeps the same
// rules, or steps aside: when claim.finished or the slot carries a rule the
// direct write does not keep (direct_rules.hpp: a trigger that fires in this
// session, row-level security, a CHECK or a filled column of its own), or
// the slots are not the extension's partitions, the caller takes the SQL
// path.
#pragma once

#include "pg/direct.hpp"

namespace pgclaim::pg::direct {

enum class Moved { Done, Gone, UseSql };

// The item whose row `t->item_slot` holds (read by item_at under its lock)
// completed with `result` at attempt `attempt`: Done when its history row
// was written and the item deleted; Gone when the item was deleted or
// changed meanwhile (nothing written); UseSql when nothing was written and
// the SQL path must do it.
Moved finish_to_history(Tables *t, Snapshot snap, Datum result, bool result_null,
                        int32 attempt, TimestampTz now);

}  // namespace pgclaim::pg::direct
