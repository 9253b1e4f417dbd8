// SQL surface: the calls that take a claim's token, besides complete
// (completion.cpp).
//   claim.fail, claim.extend, claim.release, claim.assert_token
//
// Each starts the same way: the caller's right to write claim.claims is
// checked, then the token's items are locked in id order
// (lock_token_items), so that two callers holding several items never
// deadlock, and every check after that reads the latest committed state
// (claims.cpp says how the locks order the state changes of an item).
#include "api/caches.hpp"
#include "api/completion.hpp"
#include "api/tokens.hpp"
#include "core/rules.hpp"
#include "pg/direct.hpp"
#include "pg/item_locks.hpp"
#include "pg/lineage.hpp"
#include "shmem/metrics.hpp"
#include "shmem/wakeup.hpp"

using namespace pgclaim;
using pgclaim::pg::Stmt;
namespace direct = pgclaim::pg::direct;

namespace {

Stmt s_token_items = {"SELECT item_id FROM claim.claims WHERE token = $1 ORDER BY item_id", 1,
                      {INT8OID}, nullptr};

Stmt s_fail_info = {
    "SELECT c.item_id, c.attempt, c.lease_until, q.backoff, q.max_attempts "
    "FROM claim.claims c JOIN claim.queues q ON q.queue_id = c.queue_id "
    "WHERE c.token = $1 ORDER BY c.item_id",
    1, {INT8OID}, nullptr};

Stmt s_fail = {
    "WITH c AS (DELETE FROM claim.claims WHERE token = $1 RETURNING item_id, attempt), "
    "u AS (SELECT * FROM unnest($2::bigint[], $3::bigint[], $4::bool[]) AS u(id, delay, dead)) "
    "UPDATE claim.items i SET failures = c.attempt, last_error = $5,"
    "  state = CASE WHEN u.dead THEN 'd' ELSE 'r' END,"
    "  run_at = CASE WHEN u.dead OR u.delay = 0 THEN NULL"
    "                ELSE $6 + u.delay * interval '1 microsecond' END,"
    "  died_at = CASE WHEN u.dead THEN $6 END "
    "FROM c JOIN u ON u.id = c.item_id WHERE i.id = c.item_id RETURNING i.queue_id, i.run_at IS NULL AND i.state = 'r'",
    6, {INT8OID, INT8ARRAYOID, INT8ARRAYOID, BOOLARRAYOID, TEXTOID, TIMESTAMPTZOID}, nullptr};

Stmt s_extend = {
    "UPDATE claim.claims c SET lease_until = $2 + COALESCE($3, q.lease) "
    "FROM claim.queues q WHERE q.queue_id = c.queue_id AND c.token = $1 AND c.lease_until > $2 "
    "RETURNING c.lease_until",
    3, {INT8OID, TIMESTAMPTZOID, INTERVALOID}, nullptr};

Stmt s_release = {
    "UPDATE claim.claims SET lease_until = '-infinity', attempt = attempt - 1 "
    "WHERE token = $1 AND lease_until > $2 RETURNING queue_id",
    2, {INT8OID, TIMESTAMPTZOID}, nullptr};

Stmt s_live_count_at = {
    "SELECT count(*)::int4 FROM claim.claims WHERE token = $1 AND lease_until > $2", 2,
    {INT8OID, TIMESTAMPTZOID}, nullptr};

Datum bool_array(const bool *v, int n) {
    Datum *d = (Datum *)palloc(sizeof(Datum) * (n > 0 ? n : 1));
    for (int i = 0; i < n; ++i) d[i] = BoolGetDatum(v[i]);
    return PointerGetDatum(construct_array(d, n, BOOLOID, 1, true, TYPALIGN_CHAR));
}

// Lock every item held under `token` (in id order, so lockers never
// deadlock). Returns how many rows carried the token.
int lock_token_items(int64 token) {
    // Every call that takes a token (fail, extend, release, assert_token)
    // writes claim.claims: a role that may not is refused before it locks.
    direct::require_rights(0, ACL_UPDATE);
    Datum v[1] = {Int64GetDatum(token)};
    uint64 n = pg::run(s_token_items, v, nullptr);
    int64 *ids = (int64 *)palloc(sizeof(int64) * (n > 0 ? n : 1));
    for (uint64 i = 0; i < n; ++i) ids[i] = pg::col_int64(i, 1);
    for (uint64 i = 0; i < n; ++i) pg::lock_item(ids[i], true);
    return (int)n;
}

}  // namespace

PGCLAIM_FUNCTION(pgclaim_fail) {
    pg::require_arg(fcinfo, 0, "token");
    pg::require_primary("claim.fail");
    int64 token = PG_GETARG_INT64(0);
    int64_t retry_us = -1;
    if (!PG_ARGISNULL(2)) {
        retry_us = pg::interval_us(PG_GETARG_INTERVAL_P(2), "retry_in");
        pg::call_core([&] { check_nonnegative_duration("retry_in", retry_us, kMaxDelayUs); });
    }
    SPI_connect();
    lock_token_items(token);
    TimestampTz now = pg::clock_now();
    Datum v[1] = {Int64GetDatum(token)};
    uint64 n = pg::run(s_fail_info, v, nullptr);
    int64 *ids = (int64 *)palloc(sizeof(int64) * (n > 0 ? n : 1));
    int64 *delays = (int64 *)palloc(sizeof(int64) * (n > 0 ? n : 1));
    bool *dead = (bool *)palloc(sizeof(bool) * (n > 0 ? n : 1));
    bool live = n > 0;
    bool at_once = false;  // some item is ready again at once
    for (uint64 i = 0; i < n; ++i) {
        bool isnull;
        ids[i] = pg::col_int64(i, 1);
        int attempt = pg::col_int32(i, 2);
        if (DatumGetTimestampTz(pg::col(i, 3, &isnull)) <= now) live = false;
        int64_t backoff = pg::interval_us(DatumGetIntervalP(pg::col(i, 4, &isnull)), "backoff");
        dead[i] = attempt >= pg::col_int32(i, 5);
        delays[i] = retry_us >= 0 ? retry_us : backoff_delay_us(backoff, attempt);
        if (delays[i] == 0 && !dead[i]) at_once = true;
    }
    if (!live) api::refuse_token(token);
    Datum fv[6] = {Int64GetDatum(token),
                   pg::int8_array(ids, (int)n),
                   pg::int8_array(delays, (int)n),
                   bool_array(dead, (int)n),
                   PG_ARGISNULL(1) ? (Datum)0 : PG_GETARG_DATUM(1),
                   TimestampTzGetDatum(now)};
    char fn[7] = {' ', ' ', ' ', ' ', PG_ARGISNULL(1) ? 'n' : ' ', ' ', '\0'};
    uint64 done = pg::run(s_fail, fv, fn);
    // Ready again at once, behind where scans start.
    if (at_once && done > 0) api::forget_hints(pg::col_int32(0, 1));
    for (uint64 i = 0; i < done; ++i) {
        bool isnull;
        if (DatumGetBool(pg::col(i, 2, &isnull))) {
            shmem::notify_ready(shmem::WaitKind::Queue, pg::col_int32(i, 1));
            break;
        }
    }
    // The claims ended: a slot under a max_active or group limit is free.
    if (done > 0 && !at_once) shmem::notify_ready(shmem::WaitKind::Queue, pg::col_int32(0, 1));
    // Items that died end their waiting children, and wake item_state.
    int ndead = 0;
    for (uint64 i = 0; i < n; ++i)
        if (dead[i]) ids[ndead++] = ids[i];
    if (done > 0) shmem::count(pg::col_int32(0, 1), shmem::Metric::Failed, (int64)done);
    if (done > 0) shmem::count(pg::col_int32(0, 1), shmem::Metric::Dead, ndead);
    if (done > 0 && ndead > 0) {
        shmem::notify_finished(pg::col_int32(0, 1));
        pg::free_result();
        pg::end_descendants(ids, ndead, 'd', now);
    }
    SPI_finish();
    PG_RETURN_INT32((int32)done);
}

PGCLAIM_FUNCTION(pgclaim_extend) {
    int64 token = api::token_arg(fcinfo, 0, "claim.extend");
    (void)api::lease_arg(fcinfo, 1);
    SPI_connect();
    lock_token_items(token);
    Datum v[3] = {Int64GetDatum(token), TimestampTzGetDatum(pg::clock_now()),
                  PG_ARGISNULL(1) ? (Datum)0 : PG_GETARG_DATUM(1)};
    char nulls[4] = {' ', ' ', PG_ARGISNULL(1) ? 'n' : ' ', '\0'};
    if (pg::run(s_extend, v, nulls) == 0) api::refuse_token(token);
    bool isnull;
    TimestampTz until = DatumGetTimestampTz(pg::col(0, 1, &isnull));
    SPI_finish();
    PG_RETURN_TIMESTAMPTZ(until);
}

PGCLAIM_FUNCTION(pgclaim_release) {
    int64 token = api::token_arg(fcinfo, 0, "claim.release");
    SPI_connect();
    lock_token_items(token);
    Datum v[2] = {Int64GetDatum(token), TimestampTzGetDatum(pg::clock_now())};
    uint64 n = pg::run(s_release, v, nullptr);
    if (n == 0) api::refuse_token(token);
    shmem::notify_ready(shmem::WaitKind::Queue, pg::col_int32(0, 1), (int64)n);
    // The item is ready again behind where scans start.
    api::forget_hints(pg::col_int32(0, 1));
    SPI_finish();
    PG_RETURN_INT32((int32)n);
}

PGCLAIM_FUNCTION(pgclaim_assert_token) {
    int64 token = api::token_arg(fcinfo, 0, "claim.assert_token");
    SPI_connect();
    // The locks stay until the caller's transaction ends: no claimer can
    // take these items before then, even if the lease runs out meanwhile.
    int held = lock_token_items(token);
    Datum v[2] = {Int64GetDatum(token), TimestampTzGetDatum(pg::clock_now())};
    pg::run(s_live_count_at, v, nullptr);
    if (held == 0 || pg::col_int32(0, 1) != held) api::refuse_token(token);
    SPI_finish();
    PG_RETURN_VOID();
}

// claim._lock_item(bigint), declared by the 0.1.0 install script and
// dropped by the update to 0.2.0: kept as a symbol that says so.
PGCLAIM_FUNCTION(pgclaim_lock_item) {
    pg::error({ERRCODE_FEATURE_NOT_SUPPORTED, "Run ALTER EXTENSION pg_claim UPDATE."},
              "claim._lock_item is no longer available");
}
