// SQL surface: the counters behind claim.metrics().
//   claim.queue_counters(queue_id integer) -> (enqueued, claimed, completed,
//       failed, dead, expired, cancelled bigint, waiters integer)
// The counters are NULL when the queue has no slot in the shared table (no
// preload, or the table was full when the queue was first counted); waiters
// is 0 without the preload. claim.metrics() (SQL) joins them to the gauges of
// claim.queue_stats.
#include "shmem/metrics.hpp"
#include "shmem/shared.hpp"

extern "C" {
#include "access/htup_details.h"
#include "funcapi.h"
}

using namespace pgclaim;

PGCLAIM_FUNCTION(pgclaim_queue_counters) {
    pg::require_arg(fcinfo, 0, "queue_id");
    int32 queue_id = PG_GETARG_INT32(0);
    TupleDesc desc;
    if (get_call_result_type(fcinfo, nullptr, &desc) != TYPEFUNC_COMPOSITE)
        pg::error({ERRCODE_FEATURE_NOT_SUPPORTED}, "claim.queue_counters must return a record");
    desc = BlessTupleDesc(desc);
    int64 c[shmem::kMetricCount];
    bool tracked = shmem::metrics_read(queue_id, c);
    static bool warned = false;
    if (!shmem::preloaded() && !warned) {
        warned = true;
        ereport(WARNING,
                (errcode(ERRCODE_WARNING),
                 errmsg("the counters of claim.metrics() need pg_claim in "
                        "shared_preload_libraries: they are NULL"),
                 errhint("Add pg_claim to shared_preload_libraries and restart the server.")));
    }
    Datum v[shmem::kMetricCount + 1];
    bool nulls[shmem::kMetricCount + 1];
    for (int i = 0; i < shmem::kMetricCount; ++i) {
        v[i] = Int64GetDatum(tracked ? c[i] : 0);
        nulls[i] = !tracked;
    }
    v[shmem::kMetricCount] = Int32GetDatum(shmem::metrics_waiters(queue_id));
    nulls[shmem::kMetricCount] = false;
    PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(desc, v, nulls)));
}
