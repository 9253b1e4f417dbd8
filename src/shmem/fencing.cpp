// Per-database flags of the token fence: see fencing.hpp.
#include "shmem/fencing.hpp"

#include "shmem/shared.hpp"

namespace pgclaim::shmem {

namespace {
// The slot of MyDatabaseId in fenced[], or -1. Caller holds shared->lock.
int fenced_slot() {
    for (int i = 0; i < shared->nfenced; ++i)
        if (shared->fenced[i] == MyDatabaseId) return i;
    return -1;
}
}  // namespace

bool tokens_fenced() {
    static bool fenced_here = false;  // this process saw it already
    if (fenced_here) return true;
    if (shared == nullptr) return false;
    LWLockAcquire(shared->lock, LW_SHARED);
    fenced_here = fenced_slot() >= 0;
    LWLockRelease(shared->lock);
    return fenced_here;
}

void mark_tokens_fenced() {
    if (shared == nullptr) return;
    LWLockAcquire(shared->lock, LW_EXCLUSIVE);
    // A full table (more than kMaxDbSlots databases) just keeps flushing.
    if (fenced_slot() < 0 && shared->nfenced < kMaxDbSlots)
        shared->fenced[shared->nfenced++] = MyDatabaseId;
    LWLockRelease(shared->lock);
}

int64 tokens_ceiling(Oid seq) {
    if (shared == nullptr) return 0;
    int64 c = 0;
    LWLockAcquire(shared->lock, LW_SHARED);
    int i = fenced_slot();
    if (i >= 0 && shared->ceiling_seq[i] == seq) c = shared->ceiling[i];
    LWLockRelease(shared->lock);
    return c;
}

void publish_tokens_ceiling(Oid seq, int64 ceiling) {
    if (shared == nullptr) return;
    LWLockAcquire(shared->lock, LW_EXCLUSIVE);
    int i = fenced_slot();
    if (i >= 0 && (shared->ceiling_seq[i] != seq || shared->ceiling[i] < ceiling)) {
        shared->ceiling_seq[i] = seq;
        shared->ceiling[i] = ceiling;
    }
    LWLockRelease(shared->lock);
}

}  // namespace pgclaim::shmem
