// The shared-memory segment of pg_claim: its size and its initialisation
// (requested and set up by the hooks of services.cpp); also the storage of
// the settings that every layer reads. See shared.hpp.
#include "shmem/shared.hpp"

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

int waiter_slots() { return MaxBackends + NUM_AUXILIARY_PROCS + max_prepared_xacts; }

Size shmem_size() {
    return add_size(offsetof(Shared, waiters), mul_size(sizeof(Waiter), waiter_slots()));
}

}  // namespace

void shared_shmem_request() {
    RequestAddinShmemSpace(shmem_size());
    RequestNamedLWLockTranche("pg_claim", 1);
}

void shared_shmem_init() {
    bool found;
    shared = (Shared *)ShmemInitStruct("pg_claim", shmem_size(), &found);
    if (found) return;
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
    for (int i = 0; i < kFrontierSlots; ++i) {
        SpinLockInit(&shared->frontiers[i].mutex);
        shared->frontiers[i].max_ord = PG_INT32_MIN;
    }
    shared->nwaiter_slots = waiter_slots();
}

bool preloaded() { return shared != nullptr; }

}  // namespace pgclaim::shmem
