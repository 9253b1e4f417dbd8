// NOTIFY bookkeeping in the registry slots: see notify.hpp.
#include "shmem/notify.hpp"

#include "shmem/registry.hpp"

namespace pgclaim::shmem {

DbSlot *notify_slot() {
    if (shared == nullptr || !guc_notify || am_worker) return nullptr;
    return my_db_slot();
}

void add_notify_queue(DbSlot *slot, int32 queue_id) {
    SpinLockAcquire(&slot->mutex);
    bool found = slot->notify_all;
    for (int i = 0; !found && i < slot->nnotify; ++i) found = slot->notify_queues[i] == queue_id;
    if (!found) {
        if (slot->nnotify < kNotifyQueues)
            slot->notify_queues[slot->nnotify++] = queue_id;
        else
            slot->notify_all = true;
    }
    SpinLockRelease(&slot->mutex);
}

void request_notify(DbSlot *slot) {
    if (pg_atomic_exchange_u32(&slot->notify_pending, 1) == 0) {
        Latch *l = slot->latch;
        if (l != nullptr) SetLatch(l);
    }
}

bool notify_requested(DbSlot *slot) { return pg_atomic_read_u32(&slot->notify_pending) != 0; }

int take_notify_queues(DbSlot *slot, int32 *out, bool *all) {
    pg_atomic_write_u32(&slot->notify_pending, 0);
    SpinLockAcquire(&slot->mutex);
    *all = slot->notify_all;
    int n = slot->nnotify;
    for (int i = 0; i < n; ++i) out[i] = slot->notify_queues[i];
    slot->nnotify = 0;
    slot->notify_all = false;
    SpinLockRelease(&slot->mutex);
    return n;
}

}  // namespace pgclaim::shmem
