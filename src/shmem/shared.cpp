// The shared-memory segment of pg_claim: its size, its initialisation and
// the hooks that request and set it up; also the storage of the settings
// that every layer reads. See shared.hpp.
#include "shmem/shared.hpp"

#include "shmem/metrics.hpp"
#include "shmem/claim_slots.hpp"
#include "shmem/lease_grants.hpp"
#include "shmem/rates.hpp"
#include "shmem/drops.hpp"
#include "shmem/fair.hpp"
#include "pg/xact_locks.hpp"

extern "C" {
#include "access/twophase.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/proc.h"
#include "storage/shmem.h"
}

namespace pgclaim::shmem {

Shared *shared = nullptr;
bool am_worker = false;

bool guc_worker_enabled = true;
int guc_worker_naptime_ms = 1000;
int guc_max_databases = 16;
bool guc_notify = true;
int guc_lease_purge_after_s = 3600;

namespace {

shmem_request_hook_type prev_shmem_request = nullptr;
shmem_startup_hook_type prev_shmem_startup = nullptr;

int waiter_slots() { return MaxBackends + NUM_AUXILIARY_PROCS + max_prepared_xacts; }

Size shmem_size() {
    return add_size(offsetof(Shared, waiters), mul_size(sizeof(Waiter), waiter_slots()));
}

void shmem_request() {
    if (prev_shmem_request) prev_shmem_request();
    RequestAddinShmemSpace(shmem_size());
    RequestAddinShmemSpace(metrics_shmem_size());
    RequestAddinShmemSpace(rates_shmem_size());
    RequestAddinShmemSpace(lease_grants_shmem_size());
    RequestAddinShmemSpace(claim_slots_shmem_size());
    RequestNamedLWLockTranche("pg_claim", 1);
    RequestAddinShmemSpace(pg::xact_locks_shmem_size());
    pg::xact_locks_shmem_request();
    lease_grants_shmem_request();
    rates_shmem_request();
    RequestAddinShmemSpace(drops_shmem_size());
    claim_slots_shmem_request();
    RequestAddinShmemSpace(fair_shmem_size());
    fair_shmem_request();
}

void shmem_startup() {
    if (prev_shmem_startup) prev_shmem_startup();
    LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
    bool found;
    shared = (Shared *)ShmemInitStruct("pg_claim", shmem_size(), &found);
    if (!found) {
        memset((void *)shared, 0, shmem_size());
        shared->lock = &(GetNamedLWLockTranche("pg_claim"))->lock;
        pg_atomic_init_u32(&shared->rescan, 0);
        pg_atomic_init_u64(&shared->queue_drops, 1);
        pg_atomic_init_u64(&shared->queue_changes, 1);
        pg_atomic_init_u32(&shared->finished_waiters, 0);
        pg_atomic_init_u64(&shared->wake_all_stamp, 0);
        pg_atomic_init_u32(&shared->nwaiters, 0);
        for (int i = 0; i < kBuckets; ++i) pg_atomic_init_u64(&shared->stamps[i], 0);
        for (int i = 0; i < kMaxDbSlots; ++i) {
            SpinLockInit(&shared->dbs[i].mutex);
            pg_atomic_init_u32(&shared->dbs[i].notify_pending, 0);
            pg_atomic_init_u64(&shared->dbs[i].duties_at, 0);
        }
        for (int i = 0; i < kFrontierSlots; ++i) SpinLockInit(&shared->frontiers[i].mutex);
        shared->nwaiter_slots = waiter_slots();
    }
    metrics_shmem_init();
    rates_shmem_init();
    lease_grants_shmem_init();
    claim_slots_shmem_init();
    pg::xact_locks_shmem_init();
    drops_shmem_init();
    fair_shmem_init();
    LWLockRelease(AddinShmemInitLock);
}

}  // namespace

bool preloaded() { return shared != nullptr; }

void install_shmem_hooks() {
    prev_shmem_request = shmem_request_hook;
    shmem_request_hook = shmem_request;
    prev_shmem_startup = shmem_startup_hook;
    shmem_startup_hook = shmem_startup;
}

}  // namespace pgclaim::shmem
