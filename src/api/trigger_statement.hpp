// Statement-level claim.enqueue_trigger over transition tables, without
// coalescing (see trigger_statement.cpp).
#pragma once

#include "api/trigger_change.hpp"

namespace pgclaim::api::trigger {

// Without coalescing: one item per changed row, in statement order, built
// straight from the transition tables and written in batches.
void statement_items(FunctionCallInfo fcinfo, TriggerData *td, const Change &ch, int group_att);
// 'batch': the statement's changed rows packed into items per group.
void statement_batches(FunctionCallInfo fcinfo, TriggerData *td, const Change &ch,
                       int group_att);

}  // namespace pgclaim::api::trigger
