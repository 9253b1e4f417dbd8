// SQL surface: durable steps (docs/steps.md).
//   claim._steps_wake, claim._steps_wait_children
//
// The functions users call (claim.step, step_done, sleep, sleep_for,
// await_event, emit_event, await_children) are written in SQL, in
// sql/pg_claim--0.3.0--0.4.0.sql: none of them is on the claim/complete
// path, and each one validates its token with claim.assert_token, which
// locks the item until the caller's transaction ends. These two helpers do
// what SQL cannot:
//  * _steps_wake: an item parked by sleep/await_event becomes ready now
//    (`at` NULL): the queue's scan hints and frontier are forgotten and a
//    claimer waiting for the queue is woken when the transaction commits, as
//    when claim.release makes an item ready again. An item parked until `at`
//    is made ready by the worker's promotion of due items: the worker is
//    asked for a round at `at` when it planned its next one later.
//  * _steps_wait_children: a run waits for its children as an item waits
//    for its `after` list (claim.item_parents), under the children's item
//    locks, so no child can finish between the check and the edges.
#include "api/caches.hpp"
#include "api/arrays.hpp"
#include "pg/lineage.hpp"
#include "shmem/registry.hpp"
#include "shmem/wakeup.hpp"

using namespace pgclaim;

namespace {
// A child of a run ended dead or cancelled.
constexpr int kChildEnded = pg::sqlstate_code(sqlstate::kChildEnded);
}  // namespace

// claim._steps_wake(queue_id integer, at timestamptz) -> void
PGCLAIM_FUNCTION(pgclaim_steps_wake) {
    pg::require_arg(fcinfo, 0, "queue_id");
    int32 queue_id = PG_GETARG_INT32(0);
    if (PG_ARGISNULL(1)) {
        api::forget_hints(queue_id);
        shmem::notify_ready(shmem::WaitKind::Queue, queue_id);
    } else {
        shmem::request_duties_at(PG_GETARG_TIMESTAMPTZ(1));
    }
    PG_RETURN_VOID();
}

// claim._steps_wait_children(item bigint, children bigint[]) -> integer:
// how many of the children are unfinished; the item then waits for them
// (edges in claim.item_parents, the caller sets its state). PC011 when one
// of them ended dead or cancelled.
PGCLAIM_FUNCTION(pgclaim_steps_wait_children) {
    pg::require_args(fcinfo, "item", "children");
    int64 item = PG_GETARG_INT64(0);
    int n;
    int64 *ids = api::int8_arg(fcinfo, 1, "children", false, &n);
    if (n == 0) PG_RETURN_INT32(0);
    SPI_connect();
    pg::AfterState st = pg::check_parents(ids, n);
    if (st.dead_parent != 0 || st.cancelled_parent != 0) {
        int64 child = st.dead_parent != 0 ? st.dead_parent : st.cancelled_parent;
        pg::error({kChildEnded,
                   "The run cannot have its results: handle the failure in the run, or redrive "
                   "the child and call again."},
                  "child item %lld ended %s", (long long)child,
                  st.dead_parent != 0 ? "dead" : "cancelled");
    }
    if (st.unfinished > 0) pg::add_parents(item, ids, n);
    SPI_finish();
    PG_RETURN_INT32(st.unfinished);
}
