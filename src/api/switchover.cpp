// SQL surface: moving with logical replication (docs/operations.md, "Moving
// with logical replication").
//   claim._follow_copy(): the trigger (ENABLE REPLICA) that moves pg_claim's
//   sequences past the ids and tokens of rows a subscription applies; its
//   arguments are (column, sequence of schema claim) pairs.
#include "pg/switchover.hpp"

PGCLAIM_FUNCTION(pgclaim_follow_copy) { return pgclaim::pg::switchover::follow_row(fcinfo); }
