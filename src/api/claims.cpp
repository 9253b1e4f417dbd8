// SQL surface: workers.
//   claim.claim_next, claim.complete, claim.fail, claim.extend,
//   claim.release, claim.assert_token
//
// Concurrency model (README, "How claiming works"):
//  * an item is claimed when claim.claims holds a row for it with a lease in
//    the future; claim.claims is UNLOGGED, so claiming writes no WAL;
//  * every state change of an item happens under a transaction-level lock on
//    the item (pg::lock_item). Claimers only *try* the lock and skip busy
//    items, so they never wait for each other; complete/fail/extend/release
//    and assert_token wait for it. assert_token keeps it until the caller's
//    transaction ends, so the claim cannot pass to anyone else meanwhile;
//  * after taking the lock every check reads the latest committed state.
#include "api/hints.hpp"
#include "api/shared.hpp"
#include "worker/wakeup.hpp"

extern "C" {
#include "common/hashfn.h"
#include "storage/latch.h"
#include "utils/hsearch.h"
#include "utils/wait_event.h"
}

using namespace pgclaim;
using pgclaim::pg::Stmt;

ScanHints &pgclaim::api::hints() {
    static ScanHints h;
    return h;
}

PromoteSchedule &pgclaim::api::promote_schedule() {
    static PromoteSchedule p;
    return p;
}

namespace {

// --- statements ---------------------------------------------------------------

Stmt s_promote = {
    "WITH p AS ("
    "  UPDATE claim.items SET run_at = NULL WHERE id IN ("
    "    SELECT id FROM claim.items WHERE queue_id = $1 AND state = 'r'"
    "      AND run_at IS NOT NULL AND run_at <= $2"
    "    ORDER BY run_at LIMIT 1000 FOR UPDATE SKIP LOCKED) RETURNING 1) "
    "SELECT (SELECT count(*) FROM p)::int8,"
    "       (SELECT min(run_at) FROM claim.items WHERE queue_id = $1 AND state = 'r'"
    "          AND run_at IS NOT NULL AND run_at > $2)",
    2, {INT4OID, TIMESTAMPTZOID}, nullptr};

#define SCAN_SELECT                                                          \
    "SELECT i.id, i.ord, i.group_key, c.lease_until, c.attempt "             \
    "FROM claim.items i "                                                    \
    "LEFT JOIN LATERAL (SELECT lease_until, attempt FROM claim.claims cc "   \
    "                   WHERE cc.item_id = i.id) c ON true "                 \
    "WHERE i.queue_id = $1 AND i.state = 'r' AND i.run_at IS NULL "

Stmt s_scan_head = {SCAN_SELECT "ORDER BY i.ord, i.id LIMIT $2", 2, {INT4OID, INT8OID}, nullptr};
Stmt s_scan_from = {SCAN_SELECT "AND (i.ord, i.id) >= ($3, $4) ORDER BY i.ord, i.id LIMIT $2", 4,
                    {INT4OID, INT8OID, INT4OID, INT8OID}, nullptr};
Stmt s_scan_after = {SCAN_SELECT "AND (i.ord, i.id) > ($3, $4) ORDER BY i.ord, i.id LIMIT $2", 4,
                     {INT4OID, INT8OID, INT4OID, INT8OID}, nullptr};

// Claim the locked candidates that are still claimable: pending, ready, the
// head of their group, and either never claimed or with an expired lease and
// attempts left. One statement for the whole batch. The caller holds every
// candidate's item lock, so nobody else can add or change a claim row of
// these items before it commits: what this statement's snapshot shows of
// claim.claims stays true, and a plain INSERT (no speculative insertion) is
// safe for items without a claim row.
Stmt s_claim = {
    "WITH cand AS ("
    "  SELECT i.id, i.queue_id, i.failures, u.n, i.group_key, i.payload, i.enqueued_at,"
    "         x.item_id IS NOT NULL AS has_row"
    "  FROM unnest($1::bigint[]) WITH ORDINALITY AS u(id, n)"
    "  JOIN claim.items i ON i.id = u.id"
    /* LATERAL: always an index probe per candidate, never a scan of a
       claims table that may be full of dead rows. */
    "  LEFT JOIN LATERAL (SELECT item_id, lease_until, attempt FROM claim.claims cc"
    "                     WHERE cc.item_id = i.id) x ON true"
    "  WHERE i.state = 'r' AND i.run_at IS NULL"
    "    AND (i.group_key IS NULL OR NOT EXISTS ("
    "         SELECT 1 FROM claim.items e WHERE e.queue_id = i.queue_id"
    "           AND e.group_key = i.group_key AND e.state = 'r' AND e.id < i.id))"
    "    AND (x.item_id IS NULL OR (x.lease_until <= $3 AND x.attempt < $5))"
    "), tok AS ("
    "  SELECT cand.*, pg_catalog.nextval('claim.token_seq') AS token FROM cand ORDER BY n"
    "), ins AS ("
    "  INSERT INTO claim.claims (item_id, queue_id, token, attempt, lease_until, claimed_at, worker)"
    "  SELECT id, queue_id, token, failures + 1, $2, $3, $4 FROM tok WHERE NOT has_row"
    "  RETURNING item_id, token, attempt, lease_until"
    "), upd AS ("
    "  UPDATE claim.claims c SET token = tok.token, attempt = c.attempt + 1, lease_until = $2,"
    "         claimed_at = $3, worker = $4"
    "  FROM tok WHERE tok.has_row AND c.item_id = tok.id"
    "  RETURNING c.item_id, c.token, c.attempt, c.lease_until"
    "), got AS (SELECT * FROM ins UNION ALL SELECT * FROM upd) "
    "SELECT got.item_id, got.token, got.attempt, got.lease_until,"
    "       tok.group_key, tok.payload, tok.enqueued_at "
    "FROM got JOIN tok ON tok.id = got.item_id ORDER BY tok.n",
    5, {INT8ARRAYOID, TIMESTAMPTZOID, TIMESTAMPTZOID, TEXTOID, INT4OID}, nullptr};

Stmt s_token_items = {"SELECT item_id FROM claim.claims WHERE token = $1 ORDER BY item_id", 1,
                      {INT8OID}, nullptr};

// The item lock is taken inside the DELETE, after the claim row was found
// and before it is deleted: if a claimer changed the row meanwhile (it held
// the lock), the DELETE re-checks the new row version and skips it.
Stmt s_complete = {
    "WITH c AS (DELETE FROM claim.claims WHERE token = $1 AND lease_until > $2"
    "           AND claim._lock_item(item_id) RETURNING item_id) "
    "DELETE FROM claim.items i USING c WHERE i.id = c.item_id",
    2, {INT8OID, TIMESTAMPTZOID}, nullptr};

Stmt s_complete_many = {
    "WITH c AS (DELETE FROM claim.claims WHERE token = ANY ($1) AND lease_until > $2"
    "           AND claim._lock_item(item_id) RETURNING item_id, token), "
    "d AS (DELETE FROM claim.items i USING c WHERE i.id = c.item_id RETURNING c.token) "
    "SELECT (SELECT count(*) FROM d)::int4,"
    "       ARRAY(SELECT t FROM (SELECT unnest($1) EXCEPT SELECT token FROM d) x(t)"
    "             ORDER BY t LIMIT 20),"
    "       (SELECT count(*) FROM (SELECT unnest($1) EXCEPT SELECT token FROM d) y)::int4",
    2, {INT8ARRAYOID, TIMESTAMPTZOID}, nullptr};

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

Stmt s_live_count = {
    "SELECT count(*)::int4, max(lease_until) FROM claim.claims WHERE token = $1", 1, {INT8OID},
    nullptr};
Stmt s_live_count_at = {
    "SELECT count(*)::int4 FROM claim.claims WHERE token = $1 AND lease_until > $2", 2,
    {INT8OID, TIMESTAMPTZOID}, nullptr};

// --- helpers ------------------------------------------------------------------

Datum bool_array(const bool *v, int n) {
    Datum *d = (Datum *)palloc(sizeof(Datum) * (n > 0 ? n : 1));
    for (int i = 0; i < n; ++i) d[i] = BoolGetDatum(v[i]);
    return PointerGetDatum(construct_array(d, n, BOOLOID, 1, true, TYPALIGN_CHAR));
}

HTAB *int64_set(const char *name, long size) {
    HASHCTL ctl;
    ctl.keysize = sizeof(uint64);
    ctl.entrysize = sizeof(uint64);
    ctl.hcxt = CurrentMemoryContext;
    return hash_create(name, size, &ctl, HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
}

// Adds key; false if it was there already.
bool set_add(HTAB *set, uint64 key) {
    bool found;
    hash_search(set, &key, HASH_ENTER, &found);
    return !found;
}

bool set_has(HTAB *set, uint64 key) {
    bool found;
    hash_search(set, &key, HASH_FIND, &found);
    return found;
}

// Lock every item held under `token` (in id order, so lockers never
// deadlock). Returns how many rows carried the token.
int lock_token_items(int64 token) {
    Datum v[1] = {Int64GetDatum(token)};
    uint64 n = pg::run(s_token_items, v, nullptr);
    int64 *ids = (int64 *)palloc(sizeof(int64) * (n > 0 ? n : 1));
    for (uint64 i = 0; i < n; ++i) ids[i] = pg::col_int64(i, 1);
    for (uint64 i = 0; i < n; ++i) pg::lock_item(ids[i], true);
    return (int)n;
}

// Why a token is refused, for the error detail.
[[noreturn]] void refuse(int64 token) {
    Datum v[1] = {Int64GetDatum(token)};
    pg::run(s_live_count, v, nullptr);
    if (pg::col_int32(0, 1) == 0)
        api::stale_token(token, "No claim carries this token: it is unknown, or its item was "
                                "completed, failed, re-claimed or dropped.");
    bool isnull;
    TimestampTz until = DatumGetTimestampTz(pg::col(0, 2, &isnull));
    char detail[160];
    if (until == DT_NOBEGIN)
        snprintf(detail, sizeof detail, "The claim was released.");
    else
        snprintf(detail, sizeof detail, "The lease expired at %s.", timestamptz_to_str(until));
    api::stale_token(token, detail);
}

int64 lease_arg(FunctionCallInfo fcinfo, int argno) {
    if (PG_ARGISNULL(argno)) return -1;
    int64_t us = pg::interval_us(PG_GETARG_INTERVAL_P(argno), "lease");
    pg::pure([&] { check_positive_duration("lease", us, kMaxLeaseUs); });
    return us;
}

// One pass over the queue: claims up to n items, appends them to the result.
int claim_round(const api::QueueInfo &q, Datum qname, int n, int64 lease_us, Datum worker,
                bool worker_null, ReturnSetInfo *rsinfo) {
    TimestampTz now = pg::clock_now();

    // Scheduled items that are due become ready (in place, keeping their id).
    bool check_due = true;
    pg::pure([&] { check_due = api::promote_schedule().due(q.queue_id, now); });
    if (check_due) {
        Datum v[2] = {Int32GetDatum(q.queue_id), TimestampTzGetDatum(now)};
        pg::run(s_promote, v, nullptr);
        bool isnull;
        if (pg::col_int64(0, 1) > 0) api::forget_hints(q.queue_id);
        Datum next = pg::col(0, 2, &isnull);
        int64 next_us = isnull ? 0 : DatumGetTimestampTz(next);
        pg::pure([&] {
            api::promote_schedule().checked(q.queue_id, now,
                                       isnull ? std::nullopt : std::optional<int64_t>(next_us));
        });
    }

    bool from_head = true;
    ScanPos pos = {0, 0};
    pg::pure([&] {
        if (auto s = api::hints().start(q.queue_id, now)) {
            pos = *s;
            from_head = false;
        }
    });

    HTAB *groups = int64_set("pg_claim groups", 64);
    HTAB *taken = int64_set("pg_claim taken", 64);
    long page = n + 32;  // a few more than n: some are taken meanwhile
    int64 *cand = (int64 *)palloc(sizeof(int64) * page);
    int64 *dead = (int64 *)palloc(sizeof(int64) * page);
    int claimed = 0;
    bool first_page = true;
    TimestampTz lease_until = now + lease_us;
    bool hint_done = false, hint_have = false;
    ScanPos hint_pos = pos;
    int64 claims_end = PG_INT64_MAX;
    int64 walk = 0;
    TimestampTz t0 = GetCurrentTimestamp();

    for (;;) {
        Datum v[4] = {Int32GetDatum(q.queue_id), Int64GetDatum(page), Int32GetDatum(pos.ord),
                      Int64GetDatum(pos.id)};
        uint64 rows = pg::run(first_page ? (from_head ? s_scan_head : s_scan_from) : s_scan_after,
                              v, nullptr);

        int ncand = 0, ndead = 0;
        for (uint64 r = 0; r < rows; ++r) {
            bool lease_null, group_null;
            int64 id = pg::col_int64(r, 1);
            pos = ScanPos{pg::col_int32(r, 2), id};
            Datum gk = pg::col(r, 3, &group_null);
            TimestampTz lu = DatumGetTimestampTz(pg::col(r, 4, &lease_null));
            if (!hint_done) {
                // The next scan may start at the first item that is not under
                // a live claim; the claims passed over bound how long.
                hint_pos = pos;
                hint_have = true;
                if (!lease_null && lu > now) {
                    if (lu < claims_end) claims_end = lu;
                } else {
                    hint_done = true;
                    walk = GetCurrentTimestamp() - t0;  // what reaching it cost
                }
            }
            if (!lease_null && lu > now) continue;  // live claim
            if (!lease_null && pg::col_int32(r, 5) >= q.max_attempts) {
                if (pg::lock_item(id, false)) dead[ndead++] = id;
                continue;
            }
            uint64 gh = 0;
            if (!group_null) {
                text *t = DatumGetTextPP(gk);
                gh = hash_bytes_extended((const unsigned char *)VARDATA_ANY(t),
                                         (int)VARSIZE_ANY_EXHDR(t), 0);
                if (set_has(groups, gh)) continue;  // one item per group per call
            }
            if (!pg::lock_item(id, false)) continue;  // someone else is on it
            if (!group_null) set_add(groups, gh);
            cand[ncand++] = id;
            if (claimed + ncand >= n) break;
        }

        api::kill_expired(dead, ndead, now, q.max_attempts);
        if (ncand > 0) {
            Datum cv[5] = {api::int8_array(cand, ncand), TimestampTzGetDatum(lease_until),
                           TimestampTzGetDatum(now), worker, Int32GetDatum(q.max_attempts)};
            char cn[6] = {' ', ' ', ' ', worker_null ? 'n' : ' ', ' ', '\0'};
            uint64 got = pg::run(s_claim, cv, cn);
            for (uint64 r = 0; r < got; ++r) {
                Datum out[8];
                bool isnull[8] = {false, false, false, false, false, false, false, false};
                out[0] = qname;
                out[1] = pg::col(r, 1, &isnull[1]);
                out[2] = pg::col(r, 2, &isnull[2]);
                out[3] = pg::col(r, 5, &isnull[3]);
                out[4] = pg::col(r, 6, &isnull[4]);
                out[5] = pg::col(r, 3, &isnull[5]);
                out[6] = pg::col(r, 7, &isnull[6]);
                out[7] = pg::col(r, 4, &isnull[7]);
                tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, out, isnull);
                set_add(taken, (uint64)DatumGetInt64(out[1]));
            }
            // Candidates that turned out not claimable are not ours to hold.
            for (int i = 0; i < ncand; ++i)
                if (!set_has(taken, (uint64)cand[i])) pg::unlock_item(cand[i]);
            claimed += (int)got;
        }
        if (claimed >= n || rows < (uint64)page) break;
        first_page = false;
        if (page < 2000) {
            page = page * 2 > 2000 ? 2000 : page * 2;
            cand = (int64 *)repalloc(cand, sizeof(int64) * page);
            dead = (int64 *)repalloc(dead, sizeof(int64) * page);
        }
        CHECK_FOR_INTERRUPTS();
    }
    if (!hint_done) walk = GetCurrentTimestamp() - t0;
    pg::pure([&] {
        api::hints().record(q.queue_id, from_head,
                            hint_have ? std::optional<ScanPos>(hint_pos) : std::nullopt, walk,
                            now, claims_end);
    });
    if (claimed > 0) api::after_tokens();
    return claimed;
}

}  // namespace

PGCLAIM_FUNCTION(pgclaim_claim_next) {
    pg::require_arg(fcinfo, 0, "queue");
    pg::require_arg(fcinfo, 1, "n");
    pg::require_arg(fcinfo, 3, "wait");
    pg::require_primary("claim.claim_next");
    char *name = pg::arg_cstring(fcinfo, 0);
    int32 n = PG_GETARG_INT32(1);
    int64 lease_us = lease_arg(fcinfo, 2);
    int64_t wait_us = pg::interval_us(PG_GETARG_INTERVAL_P(3), "wait");
    pg::pure([&] {
        check_range("n", n, 1, kMaxClaimBatch);
        check_nonnegative_duration("wait", wait_us, kMaxWaitUs);
    });
    bool worker_null = PG_ARGISNULL(4);
    Datum worker = worker_null ? (Datum)0 : PG_GETARG_DATUM(4);

    InitMaterializedSRF(fcinfo, MAT_SRF_USE_EXPECTED_DESC);
    ReturnSetInfo *rsinfo = (ReturnSetInfo *)fcinfo->resultinfo;

    SPI_connect();
    api::QueueInfo q = api::lookup_queue_cached(name);
    if (lease_us < 0) lease_us = q.lease_us;
    api::before_tokens();
    TimestampTz deadline = pg::clock_now() + wait_us;
    for (;;) {
        if (claim_round(q, PG_GETARG_DATUM(0), n, lease_us, worker, worker_null, rsinfo) > 0)
            break;
        TimestampTz now = pg::clock_now();
        if (now >= deadline) break;
        worker::wait_for(worker::WaitKind::Queue, q.queue_id,
                         (long)((deadline - now + 999) / 1000));
    }
    SPI_finish();
    return (Datum)0;
}

PGCLAIM_FUNCTION(pgclaim_complete) {
    pg::require_arg(fcinfo, 0, "token");
    pg::require_primary("claim.complete");
    int64 token = PG_GETARG_INT64(0);
    SPI_connect();
    Datum v[2] = {Int64GetDatum(token), TimestampTzGetDatum(pg::clock_now())};
    uint64 n = pg::run(s_complete, v, nullptr);
    if (n == 0) refuse(token);
    SPI_finish();
    PG_RETURN_INT32((int32)n);
}

PGCLAIM_FUNCTION(pgclaim_complete_many) {
    pg::require_arg(fcinfo, 0, "tokens");
    pg::require_primary("claim.complete");
    ArrayType *tokens = PG_GETARG_ARRAYTYPE_P(0);
    bool skip_stale = PG_NARGS() > 1 && !PG_ARGISNULL(1) && PG_GETARG_BOOL(1);
    if (ARR_NDIM(tokens) > 1)
        pg::error(sqlstate::kInvalidValue, "tokens must be a one-dimensional array");
    if (array_contains_nulls(tokens))
        pg::error(sqlstate::kNullValue, "tokens must not contain NULL elements");
    if (ArrayGetNItems(ARR_NDIM(tokens), ARR_DIMS(tokens)) == 0) PG_RETURN_INT32(0);

    SPI_connect();
    Datum v[2] = {PointerGetDatum(tokens), TimestampTzGetDatum(pg::clock_now())};
    pg::run(s_complete_many, v, nullptr);
    int32 done = pg::col_int32(0, 1);
    int32 nstale = pg::col_int32(0, 3);
    if (nstale > 0 && !skip_stale) {
        bool isnull;
        ArrayType *arr = DatumGetArrayTypeP(pg::col(0, 2, &isnull));
        Datum *elems;
        int nelems;
        deconstruct_array(arr, INT8OID, 8, true, TYPALIGN_DOUBLE, &elems, NULL, &nelems);
        char list[400];
        size_t used = 0;
        list[0] = '\0';
        for (int i = 0; i < nelems && used < sizeof list - 24; ++i)
            used += (size_t)snprintf(list + used, sizeof list - used, "%s%lld", i ? ", " : "",
                                     (long long)DatumGetInt64(elems[i]));
        char msg[128], detail[512];
        snprintf(msg, sizeof msg, "%d of the tokens %s not a live claim", nstale,
                 nstale == 1 ? "is" : "are");
        snprintf(detail, sizeof detail, "Stale tokens%s: %s", nstale > 20 ? " (first 20)" : "",
                 list);
        pg::error(sqlstate::kStaleToken, msg,
                  "Nothing was completed. Pass skip_stale => true to complete the live ones and "
                  "skip the rest.",
                  detail);
    }
    SPI_finish();
    PG_RETURN_INT32(done);
}

PGCLAIM_FUNCTION(pgclaim_fail) {
    pg::require_arg(fcinfo, 0, "token");
    pg::require_primary("claim.fail");
    int64 token = PG_GETARG_INT64(0);
    int64_t retry_us = -1;
    if (!PG_ARGISNULL(2)) {
        retry_us = pg::interval_us(PG_GETARG_INTERVAL_P(2), "retry_in");
        pg::pure([&] { check_nonnegative_duration("retry_in", retry_us, kMaxDelayUs); });
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
    for (uint64 i = 0; i < n; ++i) {
        bool isnull;
        ids[i] = pg::col_int64(i, 1);
        int attempt = pg::col_int32(i, 2);
        if (DatumGetTimestampTz(pg::col(i, 3, &isnull)) <= now) live = false;
        int64_t backoff = pg::interval_us(DatumGetIntervalP(pg::col(i, 4, &isnull)), "backoff");
        dead[i] = attempt >= pg::col_int32(i, 5);
        delays[i] = retry_us >= 0 ? retry_us : backoff_delay_us(backoff, attempt);
    }
    if (!live) refuse(token);
    Datum fv[6] = {Int64GetDatum(token),
                   api::int8_array(ids, (int)n),
                   api::int8_array(delays, (int)n),
                   bool_array(dead, (int)n),
                   PG_ARGISNULL(1) ? (Datum)0 : PG_GETARG_DATUM(1),
                   TimestampTzGetDatum(now)};
    char fn[7] = {' ', ' ', ' ', ' ', PG_ARGISNULL(1) ? 'n' : ' ', ' ', '\0'};
    uint64 done = pg::run(s_fail, fv, fn);
    // Ready again at once, behind where this backend's scans start.
    if (retry_us == 0) pg::pure([&] { api::hints().forget_all(); });
    for (uint64 i = 0; i < done; ++i) {
        bool isnull;
        if (DatumGetBool(pg::col(i, 2, &isnull))) {
            worker::notify_ready(worker::WaitKind::Queue, pg::col_int32(i, 1));
            break;
        }
    }
    SPI_finish();
    PG_RETURN_INT32((int32)done);
}

PGCLAIM_FUNCTION(pgclaim_extend) {
    pg::require_arg(fcinfo, 0, "token");
    pg::require_primary("claim.extend");
    int64 token = PG_GETARG_INT64(0);
    (void)lease_arg(fcinfo, 1);
    SPI_connect();
    lock_token_items(token);
    Datum v[3] = {Int64GetDatum(token), TimestampTzGetDatum(pg::clock_now()),
                  PG_ARGISNULL(1) ? (Datum)0 : PG_GETARG_DATUM(1)};
    char nulls[4] = {' ', ' ', PG_ARGISNULL(1) ? 'n' : ' ', '\0'};
    if (pg::run(s_extend, v, nulls) == 0) refuse(token);
    bool isnull;
    TimestampTz until = DatumGetTimestampTz(pg::col(0, 1, &isnull));
    SPI_finish();
    PG_RETURN_TIMESTAMPTZ(until);
}

PGCLAIM_FUNCTION(pgclaim_release) {
    pg::require_arg(fcinfo, 0, "token");
    pg::require_primary("claim.release");
    int64 token = PG_GETARG_INT64(0);
    SPI_connect();
    lock_token_items(token);
    Datum v[2] = {Int64GetDatum(token), TimestampTzGetDatum(pg::clock_now())};
    uint64 n = pg::run(s_release, v, nullptr);
    if (n == 0) refuse(token);
    worker::notify_ready(worker::WaitKind::Queue, pg::col_int32(0, 1), (int64)n);
    SPI_finish();
    // The item is ready again behind where this backend's scans start.
    pg::pure([&] { api::hints().forget_all(); });
    PG_RETURN_INT32((int32)n);
}

PGCLAIM_FUNCTION(pgclaim_assert_token) {
    pg::require_arg(fcinfo, 0, "token");
    pg::require_primary("claim.assert_token");
    int64 token = PG_GETARG_INT64(0);
    SPI_connect();
    // The locks stay until the caller's transaction ends: no claimer can
    // take these items before then, even if the lease runs out meanwhile.
    int held = lock_token_items(token);
    Datum v[2] = {Int64GetDatum(token), TimestampTzGetDatum(pg::clock_now())};
    pg::run(s_live_count_at, v, nullptr);
    if (held == 0 || pg::col_int32(0, 1) != held) refuse(token);
    SPI_finish();
    PG_RETURN_VOID();
}

PGCLAIM_FUNCTION(pgclaim_lock_item) {
    pg::lock_item(PG_GETARG_INT64(0), true);
    PG_RETURN_BOOL(true);
}
