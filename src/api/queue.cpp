// SQL surface: queue administration and producers.
//   claim.create_queue, claim.drop_queue, claim.enqueue, claim.enqueue_batch,
//   claim.redrive
#include "api/arrays.hpp"
#include "api/dependencies.hpp"
#include "api/fair.hpp"
#include "api/caches.hpp"
#include "api/keys.hpp"
#include "api/queue_admin.hpp"
#include "api/queue_lookup.hpp"
#include "core/rules.hpp"
#include "pg/direct.hpp"
#include "pg/lineage.hpp"
#include "shmem/drops.hpp"
#include "shmem/epochs.hpp"
#include "shmem/wakeup.hpp"
#include "shmem/metrics.hpp"

using namespace pgclaim;
using pgclaim::pg::Stmt;

namespace {

Stmt s_create = {
    "INSERT INTO claim.queues (name, lease, max_attempts, backoff, retain) "
    "VALUES ($1, $2, $3, $4, $5) ON CONFLICT (name) DO NOTHING RETURNING queue_id",
    5, {TEXTOID, INTERVALOID, INT4OID, INTERVALOID, INTERVALOID}, nullptr};
// A 0.1.0 catalog not yet updated has no retain column.
Stmt s_create_v1 = {
    "INSERT INTO claim.queues (name, lease, max_attempts, backoff) "
    "VALUES ($1, $2, $3, $4) ON CONFLICT (name) DO NOTHING RETURNING queue_id",
    4, {TEXTOID, INTERVALOID, INT4OID, INTERVALOID}, nullptr};

Stmt s_drop = {"DELETE FROM claim.queues WHERE name = $1 RETURNING queue_id", 1, {TEXTOID}, nullptr};
Stmt s_drop_parents = {
    "SELECT DISTINCT p.parent_id FROM claim.item_parents p JOIN claim.items i ON i.id = p.parent_id "
    "WHERE i.queue_id = $1 ORDER BY 1",
    1, {INT4OID}, nullptr};
Stmt s_drop_edges = {
    "DELETE FROM claim.item_parents p USING claim.items i WHERE i.id = p.child_id AND i.queue_id = $1",
    1, {INT4OID}, nullptr};
Stmt s_drop_items = {"DELETE FROM claim.items WHERE queue_id = $1", 1, {INT4OID}, nullptr};
Stmt s_drop_claims = {"DELETE FROM claim.claims WHERE queue_id = $1", 1, {INT4OID}, nullptr};

Stmt s_enqueue_dedup = {
    "INSERT INTO claim.items (queue_id, priority, run_at, group_key, dedup_key, payload) "
    "SELECT q.queue_id, $2, $3, $4, $5, $6 FROM claim.queues q WHERE q.name = $1 "
    "ON CONFLICT (queue_id, dedup_key) WHERE dedup_key IS NOT NULL AND state = 'r' DO NOTHING "
    "RETURNING id, queue_id",
    6, {TEXTOID, INT4OID, TIMESTAMPTZOID, TEXTOID, TEXTOID, JSONBOID}, nullptr};

Stmt s_find_dedup = {
    "SELECT i.id FROM claim.items i JOIN claim.queues q ON q.queue_id = i.queue_id "
    "WHERE q.name = $1 AND i.dedup_key = $2 AND i.state = 'r'",
    2, {TEXTOID, TEXTOID}, nullptr};

Stmt s_enqueue_batch = {
    "INSERT INTO claim.items (queue_id, priority, run_at, group_key, payload) "
    "SELECT q.queue_id, $2, $3, u.k, u.v "
    "FROM claim.queues q, unnest($4::jsonb[], $5::text[]) WITH ORDINALITY AS u(v, k, n) "
    "WHERE q.name = $1 ORDER BY u.n RETURNING id, queue_id",
    5, {TEXTOID, INT4OID, TIMESTAMPTZOID, JSONBARRAYOID, TEXTARRAYOID}, nullptr};

// The same with the items' fair key (docs/fairness.md).
Stmt s_enqueue_batch_fair = {
    "INSERT INTO claim.items (queue_id, priority, run_at, group_key, payload, fair_key_id) "
    "SELECT q.queue_id, $2, $3, u.k, u.v, $6 "
    "FROM claim.queues q, unnest($4::jsonb[], $5::text[]) WITH ORDINALITY AS u(v, k, n) "
    "WHERE q.name = $1 ORDER BY u.n RETURNING id, queue_id",
    6, {TEXTOID, INT4OID, TIMESTAMPTZOID, JSONBARRAYOID, TEXTARRAYOID, INT4OID}, nullptr};

Stmt s_redrive = {
    "WITH r AS ("
    "  UPDATE claim.items i SET state = 'r', run_at = NULL, failures = 0, died_at = NULL,"
    "    dedup_key = CASE WHEN i.dedup_key IS NOT NULL AND EXISTS ("
    "        SELECT 1 FROM claim.items l WHERE l.queue_id = i.queue_id"
    "          AND l.dedup_key = i.dedup_key AND l.state = 'r') THEN NULL ELSE i.dedup_key END"
    "  FROM claim.queues q"
    "  WHERE q.queue_id = i.queue_id AND q.name = $1 AND i.state = 'd'"
    "    AND ($2::bigint[] IS NULL OR i.id = ANY ($2))"
    "  RETURNING i.id, i.queue_id), "
    "d AS (DELETE FROM claim.claims c USING r WHERE c.item_id = r.id) "
    "SELECT count(*)::int4, min(queue_id) FROM r",
    2, {TEXTOID, INT8ARRAYOID}, nullptr};

// A dedup enqueue whose existing item keeps finishing under it gives up
// (40001) after this many rounds.
constexpr int kMaxDedupRounds = 100;

// 42704 unless the queue exists.
void require_queue_exists(const char *name) { (void)api::lookup_queue(name); }

void check_key(FunctionCallInfo fcinfo, int argno, const char *what) {
    if (!PG_ARGISNULL(argno)) api::check_key_length(PG_GETARG_TEXT_PP(argno), what);
}

// An item's order is -priority: the smallest int4 has no negation.
void check_priority(int32 priority) {
    if (priority == PG_INT32_MIN)
        pg::error({ERRCODE_INVALID_PARAMETER_VALUE},
                  "priority must be between %d and %d", -PG_INT32_MAX, PG_INT32_MAX);
}

// NULL or a time already reached means "ready now" (stored as NULL).
Datum effective_run_at(FunctionCallInfo fcinfo, int argno, char *null_flag) {
    if (PG_ARGISNULL(argno)) {
        *null_flag = 'n';
        return (Datum)0;
    }
    TimestampTz at = PG_GETARG_TIMESTAMPTZ(argno);
    if (TIMESTAMP_NOT_FINITE(at))
        pg::error({ERRCODE_INVALID_PARAMETER_VALUE}, "run_at must be a finite timestamp");
    if (at <= pg::clock_now()) {
        *null_flag = 'n';
        return (Datum)0;
    }
    *null_flag = ' ';
    return TimestampTzGetDatum(at);
}

}  // namespace

PGCLAIM_FUNCTION(pgclaim_create_queue) {
    pg::require_arg(fcinfo, 0, "queue");
    pg::require_arg(fcinfo, 1, "lease");
    pg::require_arg(fcinfo, 2, "max_attempts");
    pg::require_arg(fcinfo, 3, "backoff");
    pg::require_primary("claim.create_queue");
    char *name = pg::arg_cstring(fcinfo, 0);
    int64_t lease = pg::interval_us(PG_GETARG_INTERVAL_P(1), "lease");
    int32 max_attempts = PG_GETARG_INT32(2);
    int64_t backoff = pg::interval_us(PG_GETARG_INTERVAL_P(3), "backoff");
    // retain: the catalog of 0.1.0 (not yet updated) passes four arguments.
    bool has_retain = PG_NARGS() > 4;
    if (has_retain) pg::require_arg(fcinfo, 4, "retain");
    int64_t retain = has_retain ? pg::interval_us(PG_GETARG_INTERVAL_P(4), "retain") : 0;
    pg::call_core([&] {
        check_queue_name(name);
        check_positive_duration("lease", lease, kMaxLeaseUs);
        check_range("max_attempts", max_attempts, 1, kMaxAttemptsLimit);
        check_nonnegative_duration("backoff", backoff, kMaxDelayUs);
        check_nonnegative_duration("retain", retain, kMaxRetainUs);
    });

    SPI_connect();
    Datum v[5] = {PG_GETARG_DATUM(0), PG_GETARG_DATUM(1), Int32GetDatum(max_attempts),
                  PG_GETARG_DATUM(3),
                  has_retain ? PG_GETARG_DATUM(4)
                             : DirectFunctionCall3(interval_in, CStringGetDatum("0"),
                                                   ObjectIdGetDatum(InvalidOid), Int32GetDatum(-1))};
    if (pg::run(pg::lifecycle_catalog() ? s_create : s_create_v1, v, nullptr) == 0) {
        pg::error({ERRCODE_DUPLICATE_OBJECT}, "queue \"%s\" already exists", name);
    }
    pg::free_result();
    api::store_flow_settings(fcinfo, 5, false);
    api::store_fair_flag(fcinfo, 10);
    SPI_finish();
    PG_RETURN_VOID();
}

PGCLAIM_FUNCTION(pgclaim_drop_queue) {
    pg::require_arg(fcinfo, 0, "queue");
    pg::require_primary("claim.drop_queue");
    char *name = pg::arg_cstring(fcinfo, 0);
    // The lock below waits for every open transaction that claimed, also
    // claimers waiting on this queue: they are told first, and end.
    SPI_connect();
    int32 announced = api::lookup_queue(name).queue_id;
    SPI_finish();
    shmem::drop_announce(pg::direct::items_relid(), announced);
    pg::direct::lock_items(true);
    // Producers' cached queue ids are void from now on (they check after
    // taking the lock this one excludes).
    shmem::queue_dropped();
    SPI_connect();
    Datum v[1] = {PG_GETARG_DATUM(0)};
    if (pg::run(s_drop, v, nullptr) == 0) api::unknown_queue(name);
    Datum qid = Int32GetDatum(pg::col_int32(0, 1));
    Datum v2[1] = {qid};
    // Items of other queues waiting for this queue's items are cancelled;
    // this queue's waiting items lose their dependencies.
    if (pg::lifecycle_catalog()) {
        uint64 np = pg::run(s_drop_parents, v2, nullptr);
        if (np > 0) {
            int64 *parents = (int64 *)palloc(sizeof(int64) * np);
            for (uint64 i = 0; i < np; ++i) parents[i] = pg::col_int64(i, 1);
            pg::free_result();
            pg::end_descendants(parents, (int)np, pg::kFinishedCancelled, pg::clock_now());
        }
        pg::run(s_drop_edges, v2, nullptr);
    }
    pg::run(s_drop_items, v2, nullptr);
    pg::run(s_drop_claims, v2, nullptr);
    api::fair_queue_dropped(DatumGetInt32(qid));
    SPI_finish();
    // Claimers waiting on the queue wake at our commit and find it gone.
    shmem::notify_ready(shmem::WaitKind::Queue, DatumGetInt32(qid), PG_INT32_MAX);
    api::forget_hints(DatumGetInt32(qid));
    api::forget_queues();
    shmem::metrics_forget(DatumGetInt32(qid));
    PG_RETURN_VOID();
}

PGCLAIM_FUNCTION(pgclaim_enqueue) {
    pg::require_arg(fcinfo, 0, "queue");
    pg::require_arg(fcinfo, 1, "payload");
    pg::require_arg(fcinfo, 4, "priority");
    check_priority(PG_GETARG_INT32(4));
    pg::require_primary("claim.enqueue");
    check_key(fcinfo, 2, "group_key");
    check_key(fcinfo, 5, "dedup_key");
    char *name = pg::arg_cstring(fcinfo, 0);
    char run_at_null = ' ';
    Datum run_at = effective_run_at(fcinfo, 3, &run_at_null);

    int nparents = 0;
    int64 *parents = nullptr;
    if (PG_NARGS() > 6 && !PG_ARGISNULL(6))
        parents = api::int8_arg_sorted(fcinfo, 6, "after", &nparents);
    if (nparents > 0) {
        if (!PG_ARGISNULL(5))
            pg::error({ERRCODE_INVALID_PARAMETER_VALUE,
                       "Enqueue the item without dedup_key, or without after."},
                      "dedup_key and after cannot be combined");
        pg::direct::lock_items(false);
        SPI_connect();
        Datum one_payload = PG_GETARG_DATUM(1);
        Datum one_key = PG_ARGISNULL(2) ? (Datum)0 : PG_GETARG_DATUM(2);
        bool key_null = PG_ARGISNULL(2);
        int dims[1] = {1}, lbs[1] = {1};
        api::NewItems items{PG_GETARG_DATUM(0),
                            name,
                            PG_GETARG_DATUM(4),
                            run_at,
                            run_at_null == 'n',
                            PointerGetDatum(construct_array(&one_payload, 1, JSONBOID, -1, false,
                                                            TYPALIGN_INT)),
                            PointerGetDatum(construct_md_array(
                                &one_key, &key_null, 1, dims, lbs, TEXTOID, -1,
                                false, TYPALIGN_INT)),
                            false};
        int n;
        int64 *ids = api::enqueue_after(items, parents, nparents, &n);
        int64 id = ids[0];  // ids lives in SPI memory, gone after SPI_finish
        api::fair_mark_items(&id, 1,
                             api::fair_key_arg(fcinfo, 7, api::lookup_queue(name).queue_id));
        SPI_finish();
        PG_RETURN_INT64(id);
    }

    if (PG_ARGISNULL(5)) {
        // The common case has no SQL inside: the queue id from the
        // backend's cache (or one index probe), one heap insert with its
        // index entries.
        namespace direct = pgclaim::pg::direct;
        direct::Tables *t = direct::open(direct::Mode::Enqueue);
        int32 qid = api::producer_queue(t, PG_GETARG_DATUM(0), name);
        int32 fair_key = api::fair_key_arg(fcinfo, 7, qid);
        int64 id = direct::item_insert(t, qid, PG_GETARG_INT32(4), run_at, run_at_null == 'n',
                                       PG_ARGISNULL(2) ? (Datum)0 : PG_GETARG_DATUM(2),
                                       PG_ARGISNULL(2), PG_GETARG_DATUM(1), fair_key);
        direct::close(t);
        CommandCounterIncrement();
        shmem::count(qid, shmem::Metric::Enqueued);
        if (run_at_null == 'n') {
            shmem::notify_ready(shmem::WaitKind::Queue, qid, 1);
            api::enqueued_ready(qid, PG_GETARG_INT32(4));
        }
        PG_RETURN_INT64(id);
    }

    pg::direct::lock_items(false);
    Datum v[6];
    char nulls[7] = "      ";
    v[0] = PG_GETARG_DATUM(0);
    v[1] = PG_GETARG_DATUM(4);
    v[2] = run_at;
    nulls[2] = run_at_null;
    v[3] = PG_ARGISNULL(2) ? (Datum)0 : PG_GETARG_DATUM(2);
    nulls[3] = PG_ARGISNULL(2) ? 'n' : ' ';
    v[4] = PG_GETARG_DATUM(5);
    v[5] = PG_GETARG_DATUM(1);

    SPI_connect();
    int64 id = 0;
    // Insert unless an unfinished item has the key; then return that one.
    // The item found may finish in between: try again (bounded).
    bool done = false;
    for (int round = 0; round < kMaxDedupRounds && !done; ++round) {
        if (pg::run(s_enqueue_dedup, v, nulls) > 0) {
            id = pg::col_int64(0, 1);
            int32 qid = pg::col_int32(0, 2);
            shmem::count(qid, shmem::Metric::Enqueued);
            if (nulls[2] == 'n') {
                shmem::notify_ready(shmem::WaitKind::Queue, qid, 1);
                api::enqueued_ready(qid, PG_GETARG_INT32(4));
            }
            api::fair_mark_items(&id, 1, api::fair_key_arg(fcinfo, 7, qid));
            done = true;
            break;
        }
        Datum f[2] = {v[0], v[4]};
        if (pg::run(s_find_dedup, f, nullptr) > 0) {
            id = pg::col_int64(0, 1);
            done = true;
            break;
        }
        require_queue_exists(name);
        CHECK_FOR_INTERRUPTS();
    }
    if (!done)
        pg::error({ERRCODE_T_R_SERIALIZATION_FAILURE,
                   "Retry the call: the item with this dedup_key kept finishing while it ran."},
                  "could not enqueue into queue \"%s\": the item with the same dedup_key "
                  "finished %d times during the call",
                  name, kMaxDedupRounds);
    SPI_finish();
    PG_RETURN_INT64(id);
}

PGCLAIM_FUNCTION(pgclaim_enqueue_batch) {
    pg::require_arg(fcinfo, 0, "queue");
    pg::require_arg(fcinfo, 1, "payloads");
    pg::require_arg(fcinfo, 4, "priority");
    check_priority(PG_GETARG_INT32(4));
    pg::require_primary("claim.enqueue_many");
    char *name = pg::arg_cstring(fcinfo, 0);
    ArrayType *payloads = PG_GETARG_ARRAYTYPE_P(1);
    if (ARR_NDIM(payloads) > 1)
        pg::error({ERRCODE_INVALID_PARAMETER_VALUE}, "payloads must be a one-dimensional array");
    if (array_contains_nulls(payloads))
        pg::error({ERRCODE_NULL_VALUE_NOT_ALLOWED}, "payloads must not contain NULL elements");
    int npayloads = ArrayGetNItems(ARR_NDIM(payloads), ARR_DIMS(payloads));
    if (!PG_ARGISNULL(2)) {
        ArrayType *keys = PG_GETARG_ARRAYTYPE_P(2);
        if (ARR_NDIM(keys) > 1)
            pg::error({ERRCODE_INVALID_PARAMETER_VALUE},
                      "group_keys must be a one-dimensional array");
        int nkeys = ArrayGetNItems(ARR_NDIM(keys), ARR_DIMS(keys));
        if (nkeys != npayloads)
            pg::error({ERRCODE_INVALID_PARAMETER_VALUE,
                       "Pass NULL elements for items without a group."},
                      "group_keys must have as many elements as payloads");
    }
    pg::direct::lock_items(false);

    InitMaterializedSRF(fcinfo, MAT_SRF_USE_EXPECTED_DESC);
    ReturnSetInfo *rsinfo = (ReturnSetInfo *)fcinfo->resultinfo;

    Datum v[5];
    char nulls[6] = "     ";
    v[0] = PG_GETARG_DATUM(0);
    v[1] = PG_GETARG_DATUM(4);
    v[2] = effective_run_at(fcinfo, 3, &nulls[2]);
    v[3] = PointerGetDatum(payloads);
    v[4] = PG_ARGISNULL(2) ? (Datum)0 : PG_GETARG_DATUM(2);
    nulls[4] = PG_ARGISNULL(2) ? 'n' : ' ';

    SPI_connect();
    int nparents = 0;
    int64 *parents = nullptr;
    if (PG_NARGS() > 5 && !PG_ARGISNULL(5))
        parents = api::int8_arg_sorted(fcinfo, 5, "after", &nparents);
    if (nparents > 0) {
        api::NewItems items{v[0], name, v[1], v[2], nulls[2] == 'n', v[3], v[4], nulls[4] == 'n'};
        int nids;
        int64 *ids = api::enqueue_after(items, parents, nparents, &nids);
        api::fair_mark_items(ids, nids,
                             api::fair_key_arg(fcinfo, 6, api::lookup_queue(name).queue_id));
        for (int i = 0; i < nids; ++i) {
            Datum out[1] = {Int64GetDatum(ids[i])};
            bool isnull[1] = {false};
            tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, out, isnull);
        }
        SPI_finish();
        return (Datum)0;
    }
    // The fair key (or the default key of a fair queue) is written with the
    // items; a catalog without fair keys passes fewer arguments.
    int32 fair_key = PG_NARGS() > 6
                         ? api::fair_key_arg(fcinfo, 6, api::lookup_queue_cached(name).queue_id)
                         : -1;
    uint64 n;
    if (fair_key >= 0) {
        Datum fv[6] = {v[0], v[1], v[2], v[3], v[4], Int32GetDatum(fair_key)};
        char fnulls[7] = {nulls[0], nulls[1], nulls[2], nulls[3], nulls[4], ' ', '\0'};
        n = pg::run(s_enqueue_batch_fair, fv, fnulls);
    } else {
        n = pg::run(s_enqueue_batch, v, nulls);
    }
    if (n == 0) require_queue_exists(name);
    if (n > 0) shmem::count(pg::col_int32(0, 2), shmem::Metric::Enqueued, (int64)n);
    if (n > 0 && nulls[2] == 'n') {
        shmem::notify_ready(shmem::WaitKind::Queue, pg::col_int32(0, 2), (int64)n);
        api::enqueued_ready(pg::col_int32(0, 2), PG_GETARG_INT32(4));
    }
    for (uint64 i = 0; i < n; ++i) {
        Datum out[1] = {Int64GetDatum(pg::col_int64(i, 1))};
        bool isnull[1] = {false};
        tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, out, isnull);
    }
    SPI_finish();
    return (Datum)0;
}

PGCLAIM_FUNCTION(pgclaim_redrive) {
    pg::require_arg(fcinfo, 0, "queue");
    pg::require_primary("claim.redrive");
    char *name = pg::arg_cstring(fcinfo, 0);
    Datum v[2] = {PG_GETARG_DATUM(0), PG_ARGISNULL(1) ? (Datum)0 : PG_GETARG_DATUM(1)};
    char nulls[3] = {' ', PG_ARGISNULL(1) ? 'n' : ' ', '\0'};
    SPI_connect();
    require_queue_exists(name);
    pg::run(s_redrive, v, nulls);
    int32 n = pg::col_int32(0, 1);
    int32 qid = pg::col_int32_or(0, 2, 0);  // NULL when nothing was redriven
    SPI_finish();
    if (n > 0) {
        api::forget_hints(qid);
        shmem::notify_ready(shmem::WaitKind::Queue, qid, n);
    }
    PG_RETURN_INT32(n);
}
