// SQL surface: pg_claim's lock table (pg/xact_locks.hpp).
//   claim.lock_table() -> (held bigint, in_use bigint, capacity bigint)
// held: items and lease slots this transaction holds locked; in_use: entries
// of the whole table (all backends and databases); capacity:
// pg_claim.max_xact_locks. in_use and capacity are NULL without the preload
// (the locks are then PostgreSQL's heavyweight advisory locks).
#include "pg/xact_locks.hpp"

extern "C" {
#include "access/htup_details.h"
#include "funcapi.h"
}

using namespace pgclaim;

PGCLAIM_FUNCTION(pgclaim_lock_table) {
    TupleDesc desc;
    if (get_call_result_type(fcinfo, nullptr, &desc) != TYPEFUNC_COMPOSITE)
        pg::error({ERRCODE_FEATURE_NOT_SUPPORTED}, "claim.lock_table must return a record");
    desc = BlessTupleDesc(desc);
    bool shared = pg::xact_locks_in_shmem();
    Datum v[3] = {Int64GetDatum(pg::xact_locks_held()), Int64GetDatum(pg::xact_locks_in_use()),
                  Int64GetDatum(pg::guc_max_xact_locks)};
    bool nulls[3] = {false, !shared, !shared};
    PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(desc, v, nulls)));
}
