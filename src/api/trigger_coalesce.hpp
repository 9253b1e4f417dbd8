// Coalescing claim.enqueue_trigger: a change merged into the newest item of
// its group (see trigger_coalesce.cpp).
#pragma once

#include "api/trigger_change.hpp"

namespace pgclaim::api::trigger {

// Add one item (or merge it into the newest item of its group). SPI is
// connected. nj/oj: jsonb rows, 0 when absent. group: NULL for none.
void enqueue_change(const Change &ch, Datum nj, Datum oj, const char *group);
// A statement's changes with coalescing: collapsed per group key in SQL
// over the transition tables, then coalesced or inserted one by one.
// group_col: the group column's name, or NULL.
void statement_coalesced(TriggerData *td, const Change &ch, const char *group_col);

}  // namespace pgclaim::api::trigger
