// SQL surface: claim.barrier(name, parties, wait) (docs/coordination.md).
//
// Arrive, and wait in the server until `parties` have arrived: returns the
// arrival's order (1 = first), or NULL when `wait` passed first (the arrival
// is then withdrawn). The last arrival opens the barrier at once (arrivals
// are not transactional, see shmem/barriers.hpp) and the barrier starts its
// next generation empty. A cancel or statement_timeout withdraws the
// arrival; so does the exit of the backend.
#include "pg/pg.hpp"
#include "shmem/barriers.hpp"
#include "shmem/wakeup.hpp"

extern "C" {
#include "common/hashfn.h"
}

using namespace pgclaim;

namespace {

constexpr int kMaxParties = 100000;
constexpr int64_t kMaxWaitUs = 86400LL * 1000 * 1000;  // 1 day

// Wait for `generation` to open until `deadline`; the arrival is withdrawn
// on a timeout and on an error (cancel). Returns whether it opened. Only
// plain data lives in this frame (PG_TRY).
bool wait_open(int64 key, int64 wake_key, int64 generation, TimestampTz deadline) {
    volatile bool opened = false;
    PG_TRY();
    {
        for (;;) {
            if (shmem::barrier_opened(key, generation)) {
                opened = true;
                break;
            }
            TimestampTz now = GetCurrentTimestamp();
            if (now >= deadline) break;
            long ms = (long)((deadline - now + 999) / 1000);
            (void)shmem::wait_for(shmem::WaitKind::Coord, wake_key, ms);
        }
    }
    PG_CATCH();
    {
        (void)shmem::barrier_leave(key, generation);
        PG_RE_THROW();
    }
    PG_END_TRY();
    if (!opened) opened = shmem::barrier_leave(key, generation);
    return opened;
}

}  // namespace

PGCLAIM_FUNCTION(pgclaim_barrier) {
    pg::require_args(fcinfo, "name", "parties", "wait");
    text *name = PG_GETARG_TEXT_PP(0);
    int parties = PG_GETARG_INT32(1);
    if (parties < 1 || parties > kMaxParties)
        pg::error({ERRCODE_INVALID_PARAMETER_VALUE, nullptr}, "parties must be between 1 and %d, not %d",
                  kMaxParties, parties);
    int64_t wait_us = pg::interval_us(PG_GETARG_INTERVAL_P(2), "wait");
    if (wait_us < 0 || wait_us > kMaxWaitUs)
        pg::error({ERRCODE_INVALID_PARAMETER_VALUE, nullptr}, "wait must be between 0 and 1 day");
    const char *d = VARDATA_ANY(name);
    int len = (int)VARSIZE_ANY_EXHDR(name);
    int64 key = (int64)hash_bytes_extended((const unsigned char *)d, len, 0);
    // The wait key: claim._coord_key('barrier', name) would do as well; any
    // 64-bit value of the name serves, waiters re-check.
    int64 wake_key = (int64)hash_bytes_extended((const unsigned char *)d, len, 0x62617272);
    TimestampTz deadline = GetCurrentTimestamp() + wait_us;
    int order = 0;
    int64 generation = 0;
    switch (shmem::barrier_arrive(key, parties, wake_key, &order, &generation)) {
        case shmem::Arrival::Opened:
            PG_RETURN_INT32(order);
        case shmem::Arrival::Waiting:
            break;
        case shmem::Arrival::Mismatch:
            pg::error({ERRCODE_INVALID_PARAMETER_VALUE,
                       "Every party of a barrier passes the same number of parties."},
                      "parties waiting at this barrier expect another number of parties than %d",
                      parties);
        case shmem::Arrival::Full:
            pg::error({ERRCODE_CONFIGURATION_LIMIT_EXCEEDED,
                       "Fewer barriers may have parties waiting at once."},
                      "%d barriers have parties waiting already", shmem::kBarrierSlots);
        case shmem::Arrival::NoShmem:
            pg::error({ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
                       "Add pg_claim to shared_preload_libraries and restart the server."},
                      "claim.barrier needs pg_claim in shared_preload_libraries");
    }
    if (!wait_open(key, wake_key, generation, deadline)) PG_RETURN_NULL();
    PG_RETURN_INT32(order);
}
