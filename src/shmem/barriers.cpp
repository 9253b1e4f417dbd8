// Barriers in shared memory. See barriers.hpp.
#include "shmem/barriers.hpp"

#include "shmem/shared.hpp"
#include "shmem/wakeup.hpp"

extern "C" {
#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/shmem.h"
#include "storage/spin.h"
}

namespace pgclaim::shmem {

namespace {

struct Barrier {
    Oid db;           // InvalidOid: free
    int64 key;
    int parties;
    int arrived;      // of the current generation
    int64 generation; // unique to this generation (Barriers::next_generation)
};

struct Barriers {
    slock_t mutex;
    int64 next_generation;  // a generation's number is never reused
    Barrier b[kBarrierSlots];
};

Barriers *barriers = nullptr;

// This backend's arrival that has not opened yet (left at exit).
bool pending = false;
int64 pending_key = 0;
int64 pending_generation = 0;
bool exit_registered = false;

Barrier *find(int64 key) {
    for (int i = 0; i < kBarrierSlots; ++i)
        if (barriers->b[i].db == MyDatabaseId && barriers->b[i].key == key) return &barriers->b[i];
    return nullptr;
}

bool leave_locked(int64 key, int64 generation) {
    Barrier *b = find(key);
    if (b == nullptr || b->generation != generation) return true;  // opened
    if (b->arrived > 0) b->arrived--;
    if (b->arrived == 0) b->db = InvalidOid;  // nobody waits: free the slot
    return false;
}

void leave_at_exit(int, Datum) {
    if (!pending || barriers == nullptr) return;
    SpinLockAcquire(&barriers->mutex);
    (void)leave_locked(pending_key, pending_generation);
    SpinLockRelease(&barriers->mutex);
    pending = false;
}

}  // namespace

Size barriers_shmem_size() { return sizeof(Barriers); }

void barriers_shmem_init() { barriers = shmem_struct_with_mutex<Barriers>("pg_claim barriers"); }

Arrival barrier_arrive(int64 key, int parties, int64 wake_key, int *order, int64 *generation) {
    if (barriers == nullptr) return Arrival::NoShmem;
    if (!exit_registered) {
        before_shmem_exit(leave_at_exit, (Datum)0);
        exit_registered = true;
    }
    Arrival r;
    SpinLockAcquire(&barriers->mutex);
    Barrier *b = find(key);
    if (b == nullptr) {
        for (int i = 0; i < kBarrierSlots && b == nullptr; ++i)
            if (barriers->b[i].db == InvalidOid) b = &barriers->b[i];
        if (b != nullptr) {
            b->db = MyDatabaseId;
            b->key = key;
            b->arrived = 0;
            b->generation = ++barriers->next_generation;
        }
    }
    if (b == nullptr) {
        r = Arrival::Full;
    } else if (b->arrived > 0 && b->parties != parties) {
        r = Arrival::Mismatch;
    } else {
        b->parties = parties;
        *order = ++b->arrived;
        *generation = b->generation;
        if (b->arrived >= parties) {
            // Open: free the slot; the next arrival starts a new generation
            // (under a new number) in whichever slot it finds.
            b->arrived = 0;
            b->db = InvalidOid;
            r = Arrival::Opened;
        } else {
            pending = true;
            pending_key = key;
            pending_generation = *generation;
            r = Arrival::Waiting;
        }
    }
    SpinLockRelease(&barriers->mutex);
    if (r == Arrival::Opened) wake_now(WaitKind::Coord, wake_key);
    return r;
}

bool barrier_opened(int64 key, int64 generation) {
    if (barriers == nullptr) return false;
    SpinLockAcquire(&barriers->mutex);
    Barrier *b = find(key);
    bool opened = b == nullptr || b->generation != generation;
    SpinLockRelease(&barriers->mutex);
    if (opened) pending = false;
    return opened;
}

bool barrier_leave(int64 key, int64 generation) {
    if (barriers == nullptr) return true;
    SpinLockAcquire(&barriers->mutex);
    bool opened = leave_locked(key, generation);
    SpinLockRelease(&barriers->mutex);
    pending = false;
    return opened;
}

}  // namespace pgclaim::shmem
