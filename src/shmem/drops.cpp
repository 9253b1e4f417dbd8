// Queues being dropped: see drops.hpp.
#include "shmem/drops.hpp"
#include "shmem/shared.hpp"
#include "shmem/wakeup.hpp"

extern "C" {
#include "access/xact.h"
#include "storage/shmem.h"
#include "storage/spin.h"
}

namespace pgclaim::shmem {

namespace {

constexpr int kSlots = 16;  // drops in progress at once; more wait as before

struct Slot {
    int pid;  // 0: free
    Oid db;
    Oid install;
    int32 queue_id;
};

struct Drops {
    slock_t mutex;
    Slot slots[kSlots];
};

Drops *drops = nullptr;
bool mine = false;  // this transaction announced a drop

void clear_mine(XactEvent event) {
    if (!mine || drops == nullptr) return;
    if (event != XACT_EVENT_COMMIT && event != XACT_EVENT_ABORT && event != XACT_EVENT_PREPARE)
        return;
    SpinLockAcquire(&drops->mutex);
    for (int i = 0; i < kSlots; ++i)
        if (drops->slots[i].pid == MyProcPid) drops->slots[i].pid = 0;
    SpinLockRelease(&drops->mutex);
    mine = false;
}

}  // namespace

Size drops_shmem_size() { return sizeof(Drops); }

void drops_shmem_init() { drops = shmem_struct_with_mutex<Drops>("pg_claim drops"); }

void drop_announce(Oid install, int32 queue_id) {
    if (drops == nullptr) return;
    bool placed = false;
    SpinLockAcquire(&drops->mutex);
    for (int i = 0; i < kSlots && !placed; ++i) {
        Slot &s = drops->slots[i];
        if (s.pid != 0) continue;
        s = Slot{MyProcPid, MyDatabaseId, install, queue_id};
        placed = true;
    }
    SpinLockRelease(&drops->mutex);
    if (!placed) return;
    mine = true;
    wake_all_waiters();
}

bool drop_pending(Oid install, int32 queue_id) {
    if (drops == nullptr) return false;
    bool pending = false;
    SpinLockAcquire(&drops->mutex);
    for (int i = 0; i < kSlots; ++i) {
        const Slot &s = drops->slots[i];
        if (s.pid != 0 && s.pid != MyProcPid && s.db == MyDatabaseId && s.install == install &&
            s.queue_id == queue_id)
            pending = true;
    }
    SpinLockRelease(&drops->mutex);
    return pending;
}

void drops_at_xact_end(XactEvent event) { clear_mine(event); }

}  // namespace pgclaim::shmem
