// Items enqueued with `after`; see dependencies.hpp.
#include "api/dependencies.hpp"

#include "api/queue_lookup.hpp"
#include "pg/lineage.hpp"
#include "shmem/wakeup.hpp"
#include "shmem/metrics.hpp"

using namespace pgclaim;
using pgclaim::pg::Stmt;

namespace {

Stmt s_insert = {
    "INSERT INTO claim.items (queue_id, priority, run_at, group_key, payload, state) "
    "SELECT q.queue_id, $2, $3, u.k, u.v, $6 "
    "FROM claim.queues q, unnest($4::jsonb[], $5::text[]) WITH ORDINALITY AS u(v, k, n) "
    "WHERE q.name = $1 ORDER BY u.n RETURNING id, queue_id",
    6, {TEXTOID, INT4OID, TIMESTAMPTZOID, JSONBARRAYOID, TEXTARRAYOID, CHAROID}, nullptr};

}  // namespace

namespace pgclaim::api {

int64 *enqueue_after(const NewItems &items, const int64 *parents, int nparents, int *n) {
    pg::AfterState st = pg::check_parents(parents, nparents);
    int64 ended_by = st.dead_parent != 0 ? st.dead_parent : st.cancelled_parent;
    bool waits = st.unfinished > 0 || ended_by != 0;

    Datum v[6] = {items.qname, items.priority, items.run_at, items.payloads, items.group_keys,
                  CharGetDatum(waits ? 'w' : 'r')};
    char nulls[7] = {' ', ' ', items.run_at_null ? 'n' : ' ', ' ',
                     items.group_keys_null ? 'n' : ' ', ' ', '\0'};
    uint64 rows = pg::run(s_insert, v, nulls);
    if (rows == 0) (void)lookup_queue(items.name);  // 42704 for an unknown queue
    int32 queue_id = pg::col_int32(0, 2);
    shmem::count(queue_id, shmem::Metric::Enqueued, (int64)rows);
    int64 *ids = (int64 *)palloc(sizeof(int64) * rows);
    for (uint64 i = 0; i < rows; ++i) ids[i] = pg::col_int64(i, 1);
    pg::free_result();
    *n = (int)rows;

    TimestampTz now = pg::clock_now();
    if (ended_by != 0) {
        int64 *roots = (int64 *)palloc(sizeof(int64) * rows);
        for (uint64 i = 0; i < rows; ++i) roots[i] = ended_by;
        pg::end_waiting(ids, roots, (int)rows, st.dead_parent != 0 ? 'd' : 'x', now);
        shmem::notify_finished(queue_id);
    } else if (waits) {
        for (uint64 i = 0; i < rows; ++i) pg::add_parents(ids[i], parents, nparents);
    } else if (items.run_at_null) {
        shmem::notify_ready(shmem::WaitKind::Queue, queue_id, (int64)rows);
    }
    return ids;
}

}  // namespace pgclaim::api
