// The hooks that size and start every shared-memory service: see
// services.hpp.
#include "shmem/services.hpp"

#include "pg/xact_locks.hpp"
#include "shmem/barriers.hpp"
#include "shmem/claim_slots.hpp"
#include "shmem/drops.hpp"
#include "shmem/fair.hpp"
#include "shmem/lease_grants.hpp"
#include "shmem/metrics.hpp"
#include "shmem/rates.hpp"
#include "shmem/shared.hpp"

extern "C" {
#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/shmem.h"
}

namespace pgclaim::shmem {

namespace {

shmem_request_hook_type prev_shmem_request = nullptr;
shmem_startup_hook_type prev_shmem_startup = nullptr;

void shmem_request() {
    if (prev_shmem_request) prev_shmem_request();
    shared_shmem_request();
    RequestAddinShmemSpace(metrics_shmem_size());
    RequestAddinShmemSpace(rates_shmem_size());
    RequestAddinShmemSpace(lease_grants_shmem_size());
    RequestAddinShmemSpace(claim_slots_shmem_size());
    RequestAddinShmemSpace(pg::xact_locks_shmem_size());
    pg::xact_locks_shmem_request();
    lease_grants_shmem_request();
    rates_shmem_request();
    RequestAddinShmemSpace(drops_shmem_size());
    claim_slots_shmem_request();
    RequestAddinShmemSpace(fair_shmem_size());
    fair_shmem_request();
    RequestAddinShmemSpace(barriers_shmem_size());
}

void shmem_startup() {
    if (prev_shmem_startup) prev_shmem_startup();
    LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
    shared_shmem_init();
    metrics_shmem_init();
    rates_shmem_init();
    lease_grants_shmem_init();
    claim_slots_shmem_init();
    pg::xact_locks_shmem_init();
    drops_shmem_init();
    fair_shmem_init();
    barriers_shmem_init();
    LWLockRelease(AddinShmemInitLock);
}

}  // namespace

void install_shmem_hooks() {
    prev_shmem_request = shmem_request_hook;
    shmem_request_hook = shmem_request;
    prev_shmem_startup = shmem_startup_hook;
    shmem_startup_hook = shmem_startup;
}

}  // namespace pgclaim::shmem
