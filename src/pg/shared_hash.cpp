// pg_claim's shared-memory hash tables: see shared_hash.hpp.
#include "pg/shared_hash.hpp"

extern "C" {
#include "storage/shmem.h"
}

namespace pgclaim::pg {

Size shared_hash_size(const SharedHash &t) {
    return hash_estimate_size(*t.capacity, t.entrysize);
}

void shared_hash_request(const SharedHash &t) {
    RequestNamedLWLockTranche(t.name, t.partitions + t.extra_locks);
}

void shared_hash_init(SharedHash &t) {
    HASHCTL info;
    memset(&info, 0, sizeof(info));
    info.keysize = t.keysize;
    info.entrysize = t.entrysize;
    int flags = HASH_ELEM | HASH_BLOBS;
    if (t.partitions > 1) {
        info.num_partitions = t.partitions;
        flags |= HASH_PARTITION;
    }
    t.htab = ShmemInitHash(t.name, *t.capacity, *t.capacity, &info, flags);
    t.locks = GetNamedLWLockTranche(t.name);
    t.lock = &t.locks[0].lock;
}

void *shared_hash_find(SharedHash &t, const void *key, bool create) {
    bool found;
    void *e = hash_search(t.htab, key, HASH_FIND, &found);
    if (found || !create) return found ? e : nullptr;
    if (hash_get_num_entries(t.htab) >= *t.capacity ||
        (e = hash_search(t.htab, key, HASH_ENTER_NULL, &found)) == nullptr) {
        LWLockRelease(t.lock);
        pg::error({ERRCODE_CONFIGURATION_LIMIT_EXCEEDED,
                   "Raise the setting (a restart applies it), or keep fewer transactions open "
                   "with work of this kind."},
                  "pg_claim's table of %s is full (%s = %d)", t.what, t.guc, *t.capacity);
    }
    memset((char *)e + t.keysize, 0, t.entrysize - t.keysize);
    return e;
}

void shared_hash_remove(SharedHash &t, const void *key) {
    hash_search(t.htab, key, HASH_REMOVE, nullptr);
}

}  // namespace pgclaim::pg
