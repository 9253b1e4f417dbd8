// SQL surface: the life of an item after it was enqueued.
//   claim.item_state, claim.cancel
#include <algorithm>

#include "api/arrays.hpp"
#include "api/caches.hpp"
#include "api/queue_lookup.hpp"
#include "core/rules.hpp"
#include "pg/item_locks.hpp"
#include "pg/direct.hpp"
#include "pg/lineage.hpp"
#include "pg/steps_store.hpp"
#include "shmem/wakeup.hpp"
#include "shmem/metrics.hpp"

extern "C" {
#include "access/htup_details.h"
#include "access/xlog.h"
}

using namespace pgclaim;
using pgclaim::pg::Stmt;

namespace {

// One row: (state, attempt, result, error, finished_at), or none when the
// item is unknown in this queue or no longer retained.
#define PGCLAIM_ITEM_STATE_SQL(STEPS)                                                           \
    "SELECT s.state, s.attempt, s.result, s.error, s.finished_at" STEPS " FROM ("                \
    "  SELECT CASE WHEN i.state = 'w' THEN 'waiting' WHEN i.state = 'd' THEN 'dead'"           \
    "              WHEN i.run_at IS NOT NULL THEN 'scheduled'"                                  \
    "              WHEN c.lease_until > $3 THEN 'claimed' ELSE 'ready' END AS state,"          \
    "         COALESCE(c.attempt, i.failures) AS attempt, NULL::jsonb AS result,"               \
    "         i.last_error AS error, i.died_at AS finished_at, 1 AS o"                          \
    "  FROM claim.items i LEFT JOIN claim.claims c ON c.item_id = i.id"                         \
    "  WHERE i.id = $1 AND i.queue_id = $2"                                                     \
    "  UNION ALL"                                                                               \
    "  SELECT CASE f.state WHEN 'c' THEN 'completed' ELSE 'cancelled' END, f.attempts,"        \
    "         f.result, f.error, f.finished_at, 2"                                              \
    "  FROM claim.finished f JOIN claim.queues q ON q.queue_id = f.queue_id"                    \
    "  WHERE f.id = $1 AND f.queue_id = $2 AND f.finished_at + q.retain > $3) s "              \
    "ORDER BY s.o LIMIT 1"

Stmt s_item_state = {PGCLAIM_ITEM_STATE_SQL(""), 3, {INT8OID, INT4OID, TIMESTAMPTZOID}, nullptr};

// With durable steps (0.4.0, docs/steps.md): the sixth column of
// claim.item_status, the run's checkpoints as {step: output}.
Stmt s_item_state_steps = {
    PGCLAIM_ITEM_STATE_SQL(", (SELECT pg_catalog.jsonb_object_agg(st.step, st.output)"
                           " FROM claim.steps st WHERE st.item_id = $1)"),
    3, {INT8OID, INT4OID, TIMESTAMPTZOID}, nullptr};

// Cancel the unfinished items among $1 of queue $2 (their item locks are
// held): their claims go, so the holders' tokens are stale; queues that
// retain keep them as cancelled. Returns the ids cancelled.
Stmt s_cancel = {
    "WITH d AS (DELETE FROM claim.items i"
    "           WHERE i.id = ANY ($1) AND i.queue_id = $2 AND i.state IN ('r', 'w')"
    "           RETURNING i.queue_id, i.id, i.group_key, i.payload, i.failures, i.enqueued_at), "
    "c AS (DELETE FROM claim.claims c USING d WHERE c.item_id = d.id"
    "      RETURNING c.item_id, c.attempt), "
    "e AS (DELETE FROM claim.item_parents p USING d WHERE p.child_id = d.id), "
    "h AS (INSERT INTO claim.finished (slot, queue_id, id, group_key, payload, state, attempts,"
    "                                  enqueued_at, finished_at)"
    "      SELECT r.slot, d.queue_id, d.id, d.group_key, d.payload, 'x',"
    "             COALESCE(c.attempt, d.failures), d.enqueued_at, $3"
    "      FROM d LEFT JOIN c ON c.item_id = d.id JOIN claim.queues q ON q.queue_id = d.queue_id,"
    "           claim.finished_ring r"
    "      WHERE r.current AND q.retain > interval '0') "
    "SELECT d.id FROM d ORDER BY d.id",
    3, {INT8ARRAYOID, INT4OID, TIMESTAMPTZOID}, nullptr};

bool is_final(const char *state) {
    return strcmp(state, "completed") == 0 || strcmp(state, "dead") == 0 ||
           strcmp(state, "cancelled") == 0;
}

}  // namespace

PGCLAIM_FUNCTION(pgclaim_item_state) {
    pg::require_args(fcinfo, "queue", "id", "wait");
    // Whether a ready item is claimed is in claim.claims, which a hot standby
    // does not have (docs/standby.md).
    if (RecoveryInProgress())
        pg::error({ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
                   "Call it on the primary; claim.items and claim.finished_items can be read here."},
                  "claims are not replicated: claim.item_state cannot tell ready from claimed on a "
                  "hot standby");
    char *name = pg::arg_cstring(fcinfo, 0);
    int64 id = PG_GETARG_INT64(1);
    int64_t wait_us = pg::interval_us(PG_GETARG_INTERVAL_P(2), "wait");
    pg::call_core([&] { check_nonnegative_duration("wait", wait_us, kMaxWaitUs); });

    TupleDesc desc;
    if (get_call_result_type(fcinfo, nullptr, &desc) != TYPEFUNC_COMPOSITE)
        pg::error({ERRCODE_FEATURE_NOT_SUPPORTED},
                  "claim.item_state called in a context that cannot accept a row");
    desc = BlessTupleDesc(desc);

    SPI_connect();
    api::QueueInfo q = api::lookup_queue(name);
    TimestampTz deadline = pg::clock_now() + wait_us;
    // claim.item_status has a sixth attribute, steps, from 0.4.0 on.
    bool with_steps = desc->natts >= 6 && pg::steps_catalog();
    int ncols = desc->natts > 6 ? desc->natts : 6;
    Datum *values = (Datum *)palloc0(sizeof(Datum) * ncols);
    bool *nulls = (bool *)palloc(sizeof(bool) * ncols);
    for (int i = 0; i < ncols; ++i) nulls[i] = true;
    if (wait_us > 0) shmem::finished_wait_begin();
    for (;;) {
        TimestampTz now = pg::clock_now();
        Datum v[3] = {Int64GetDatum(id), Int32GetDatum(q.queue_id), TimestampTzGetDatum(now)};
        bool found = pg::run(with_steps ? s_item_state_steps : s_item_state, v, nullptr) > 0;
        bool final = true;
        if (found) {
            bool isnull;
            char *state = TextDatumGetCString(pg::col(0, 1, &isnull));
            final = is_final(state);
            if (final || now >= deadline) {
                // Copy the row out of SPI's memory before SPI_finish.
                HeapTuple row = SPI_copytuple(SPI_tuptable->vals[0]);
                heap_deform_tuple(row, SPI_tuptable->tupdesc, values, nulls);
            }
        }
        pg::free_result();
        if (!found || final || now >= deadline) break;
        shmem::wait_for(shmem::WaitKind::Finished, q.queue_id,
                        (long)((deadline - now + 999) / 1000));
    }
    shmem::finished_wait_end();
    SPI_finish();
    PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(desc, values, nulls)));
}

PGCLAIM_FUNCTION(pgclaim_cancel) {
    pg::require_args(fcinfo, "queue", "ids");
    pg::require_primary("claim.cancel");
    PreventCommandIfReadOnly("claim.cancel()");
    char *name = pg::arg_cstring(fcinfo, 0);
    int nids;
    int64 *ids = api::int8_arg_sorted(fcinfo, 1, "ids", &nids);

    // The statement deletes items and claims: a role that may not is
    // refused before it locks (or waits for) anything.
    pg::direct::require_rights(ACL_DELETE, ACL_DELETE);
    SPI_connect();
    api::QueueInfo q = api::lookup_queue(name);
    if (nids == 0) {
        SPI_finish();
        PG_RETURN_INT32(0);
    }
    // Waits for a transaction that holds one of them (assert_token, a
    // completion in progress): it never breaks a check already passed.
    for (int i = 0; i < nids; ++i) pg::lock_item(ids[i], true);
    TimestampTz now = pg::clock_now();
    Datum v[3] = {pg::int8_array(ids, nids), Int32GetDatum(q.queue_id), TimestampTzGetDatum(now)};
    uint64 n = pg::run(s_cancel, v, nullptr);
    int64 *cancelled = (int64 *)palloc(sizeof(int64) * (n > 0 ? n : 1));
    for (uint64 i = 0; i < n; ++i) {
        bool isnull;
        cancelled[i] = DatumGetInt64(pg::col(i, 1, &isnull));
    }
    pg::free_result();
    shmem::count(q.queue_id, shmem::Metric::Cancelled, (int64)n);
    if (n > 0) {
        pg::end_descendants(cancelled, (int)n, 'x', now);
        shmem::notify_finished(q.queue_id);
        // A cancelled item may have held its group back.
        shmem::notify_ready(shmem::WaitKind::Queue, q.queue_id);
        api::forget_hints(q.queue_id);
    }
    SPI_finish();
    PG_RETURN_INT32((int32)n);
}
