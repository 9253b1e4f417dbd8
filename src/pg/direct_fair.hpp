// Server layer: the direct reads and writes of fair queues (docs/fairness.md)
// on claim.items: one fair key's ready items in delivery order through the
// index items_fair (queue_id, fair_key_id, ord, id), the keys that have
// ready items, and the fair key of a new item.
#pragma once

#include "pg/direct.hpp"

namespace pgclaim::pg::direct {

// Is claim.items of this installation one with fair keys (the 0.3.0
// catalog)? Resolved once per installation.
bool fair_catalog();

// One key's ready items in delivery order (priority, then oldest), read
// with `snap`. The tables must be open in Claim mode.
struct FairScan;
FairScan *fair_scan_begin(Tables *t, int32 queue_id, int32 key_id, Snapshot snap);
// As ready_next (direct.hpp).
bool fair_scan_next(FairScan *s, int64 *id, int32 *ord, Datum *group_key, bool *group_null,
                    ItemPointerData *tid);
void fair_scan_end(FairScan *s);

// Up to `max` keys of the queue that have entries in items_fair visible to
// `snap` (one index descent per key); returns the count.
int fair_keys_ready(Tables *t, int32 queue_id, Snapshot snap, int32 *out, int max);

// The column fair_key_id of claim.items, InvalidAttrNumber before 0.3.0.
AttrNumber fair_key_att();

// The new item in `slot` (direct.cpp's insert slot) carries this fair key.
void set_fair_key(TupleTableSlot *slot, int32 key_id);

}  // namespace pgclaim::pg::direct
