// The duties shared by claimers and the worker; see duties.hpp.
#include "pg/duties.hpp"
#include "pg/item_locks.hpp"
#include "pg/lineage.hpp"

namespace pgclaim::pg {

namespace {

Stmt s_promote_queue = {
    "WITH p AS ("
    "  UPDATE claim.items SET run_at = NULL WHERE id IN ("
    "    SELECT id FROM claim.items WHERE queue_id = $1 AND state = 'r'"
    "      AND run_at IS NOT NULL AND run_at <= $2"
    "    ORDER BY run_at LIMIT " CppAsString2(PGCLAIM_DUTY_BATCH) " FOR UPDATE SKIP LOCKED)"
    "  RETURNING 1) "
    "SELECT (SELECT count(*) FROM p)::int8,"
    "       (SELECT min(run_at) FROM claim.items WHERE queue_id = $1 AND state = 'r'"
    "          AND run_at IS NOT NULL AND run_at > $2)",
    2, {INT4OID, TIMESTAMPTZOID}, nullptr};

Stmt s_promote_all = {
    "WITH due AS ("
    "  SELECT x.id FROM claim.queues q CROSS JOIN LATERAL ("
    "    SELECT i.id FROM claim.items i WHERE i.queue_id = q.queue_id AND i.state = 'r'"
    "      AND i.run_at IS NOT NULL AND i.run_at <= $1"
    "    ORDER BY i.run_at LIMIT " CppAsString2(PGCLAIM_DUTY_BATCH) " FOR UPDATE SKIP LOCKED) x"
    "), u AS ("
    "  UPDATE claim.items i SET run_at = NULL FROM due WHERE i.id = due.id RETURNING i.queue_id"
    ") SELECT queue_id, count(*)::int8 FROM u GROUP BY queue_id",
    1, {TIMESTAMPTZOID}, nullptr};

Stmt s_find_dead = {
    "SELECT c.item_id FROM claim.claims c JOIN claim.queues q ON q.queue_id = c.queue_id "
    "WHERE c.lease_until <= $1 AND c.attempt >= q.max_attempts "
    "LIMIT " CppAsString2(PGCLAIM_DUTY_BATCH),
    1, {TIMESTAMPTZOID}, nullptr};

Stmt s_kill_dead = {
    "WITH c AS (DELETE FROM claim.claims c USING claim.queues q"
    "           WHERE c.item_id = ANY ($1) AND q.queue_id = c.queue_id"
    "             AND c.lease_until <= $2 AND c.attempt >= q.max_attempts"
    "           RETURNING c.item_id, c.attempt) "
    "UPDATE claim.items i SET state = 'd', died_at = $2, failures = c.attempt,"
    "  last_error = 'lease expired on attempt ' || c.attempt || ', the last allowed' "
    "FROM c WHERE i.id = c.item_id AND i.state = 'r' RETURNING i.id, i.queue_id",
    2, {INT8ARRAYOID, TIMESTAMPTZOID}, nullptr};

}  // namespace

int64 promote_queue(int32 queue_id, TimestampTz now, TimestampTz *next) {
    Datum v[2] = {Int32GetDatum(queue_id), TimestampTzGetDatum(now)};
    run(s_promote_queue, v, nullptr);
    int64 promoted = col_int64(0, 1);
    bool isnull;
    Datum n = col(0, 2, &isnull);
    *next = isnull ? DT_NOEND : DatumGetTimestampTz(n);
    free_result();
    return promoted;
}

uint64 promote_all_queues(TimestampTz now) {
    Datum v[1] = {TimestampTzGetDatum(now)};
    return run(s_promote_all, v, nullptr);
}

uint64 find_dead(TimestampTz now) {
    Datum v[1] = {TimestampTzGetDatum(now)};
    return run(s_find_dead, v, nullptr);
}

int64 kill_dead(const int64 *ids, int n, TimestampTz now, int32 *queues) {
    if (n == 0) return 0;
    Datum v[2] = {int8_array(ids, n), TimestampTzGetDatum(now)};
    int64 killed = (int64)run(s_kill_dead, v, nullptr);
    if (killed > 0) {
        // Their waiting children end dead too.
        int64 *died = (int64 *)palloc(sizeof(int64) * killed);
        for (int64 i = 0; i < killed; ++i) died[i] = col_int64(i, 1);
        for (int64 i = 0; queues != nullptr && i < killed; ++i) queues[i] = col_int32(i, 2);
        free_result();
        end_descendants(died, (int)killed, 'd', now);
    }
    for (int i = 0; i < n; ++i) unlock_item(ids[i]);
    return killed;
}

}  // namespace pgclaim::pg
