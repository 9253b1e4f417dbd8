// Moving with logical replication (docs/operations.md, "Moving with logical
// replication"). Sequences are not replicated, so a subscriber's copy of
// pg_claim's tables would hand out ids and tokens that the source handed out
// already. Three pieces keep its sequences ahead of the copied data, so that
// nothing needs to be done at the switchover:
//  * follow_row(): the trigger claim._follow_copy (ENABLE REPLICA: it fires
//    only where rows are applied by replication, never for the source's own
//    writes) moves a sequence past the value of a copied row: item, queue,
//    schedule and fair-key ids past the highest copied, and claim.token_seq
//    2^32 past every copied token (the margin of a promotion);
//  * publish_token_mark(): the source's worker writes its durable token
//    ceiling (which no token it handed out exceeds, claims' tokens included,
//    though claims are not replicated) into claim.token_marks, a logged
//    table the subscription copies, when wal_level is logical;
//  * copy_in_progress(): the subscriber's worker does no duties (schedules,
//    expiry, history, dead items) while an enabled subscription of this
//    database applies claim.items: they are the source's.
#pragma once

#include "pg/pg.hpp"

namespace pgclaim::pg::switchover {

// The trigger's work for one row: for each (column, sequence) pair of
// trigger arguments, the sequence of schema claim is moved past the row's
// value of the column. Returns the row (the trigger's result). Raises 55000
// for a token of another partition, 39P01 when not called as a BEFORE row
// trigger.
Datum follow_row(FunctionCallInfo fcinfo);

// Writes this server's token ceiling into claim.token_marks when wal_level
// is logical and the ceiling moved since this process last wrote it. In the
// worker's duty transaction.
void publish_token_mark();

// An enabled subscription of this database applies claim.items.
bool copy_in_progress();

}  // namespace pgclaim::pg::switchover
