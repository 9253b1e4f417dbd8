// Cluster-wide counters of dropped and changed queues: see epochs.hpp.
#include "shmem/epochs.hpp"

#include "shmem/shared.hpp"

namespace pgclaim::shmem {

namespace {
bool pending_changes_bump = false;  // queues_changed_at_commit() in this transaction
}  // namespace

uint64 queue_drops() { return shared == nullptr ? 0 : pg_atomic_read_u64(&shared->queue_drops); }

void queue_dropped() {
    if (shared != nullptr) (void)pg_atomic_fetch_add_u64(&shared->queue_drops, 1);
}

void queues_changed_at_commit() {
    if (shared == nullptr) return;
    pending_changes_bump = true;
}

uint64 queue_changes() {
    return shared == nullptr ? 0 : pg_atomic_read_u64(&shared->queue_changes);
}

void epochs_at_xact_end(bool commit) {
    if (commit && pending_changes_bump && shared != nullptr)
        (void)pg_atomic_fetch_add_u64(&shared->queue_changes, 1);
    pending_changes_bump = false;
}

}  // namespace pgclaim::shmem
