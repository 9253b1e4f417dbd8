// pg_claim's shared-memory hash tables: PostgreSQL's shared hash
// (dynahash, ShmemInitHash) under named LWLocks, sized by a GUC. A small
// table has one lock; a hot one (the lock table, pg/xact_locks.cpp) is
// split into `partitions` partitions (HASH_PARTITION), each under its own
// lock, chosen by the key's hash. The users: pg/xact_locks.cpp (partitioned),
// shmem/claim_slots.cpp, shmem/lease_grants.cpp and shmem/rates.cpp (one
// lock each, through shmem/txn_table.hpp).
#pragma once

#include "pg/pg.hpp"

extern "C" {
#include "storage/lwlock.h"
#include "utils/hsearch.h"
}

namespace pgclaim::pg {

struct SharedHash {
    const char *name;      // shared-memory name, also the LWLock tranche
    const char *what;      // what it holds, for the error when it is full
    const char *guc;       // the GUC that sizes it (for the error's hint)
    Size keysize;          // entries start with their key
    Size entrysize;
    int *capacity;         // the GUC's variable
    int partitions;        // 1, or a power of two (HASH_PARTITION)
    int extra_locks;       // LWLocks of the owner's own, after the partitions'
    HTAB *htab;            // set by shared_hash_init; NULL without the preload
    LWLockPadded *locks;   // partitions + extra_locks of them
    LWLock *lock;          // the first: the lock of an unpartitioned table
};

// From the preload's shared-memory hooks (shmem/services.cpp).
Size shared_hash_size(const SharedHash &t);
void shared_hash_request(const SharedHash &t);
void shared_hash_init(SharedHash &t);

// The lock of the partition that holds keys of hash value `hash`.
inline LWLock *shared_hash_lock(const SharedHash &t, uint32 hash) {
    return &t.locks[hash % (uint32)t.partitions].lock;
}

// Unpartitioned tables, under t.lock: the entry of `key`, created zeroed
// (beyond the key) when `create`; 53400 when the table is full.
void *shared_hash_find(SharedHash &t, const void *key, bool create);
void shared_hash_remove(SharedHash &t, const void *key);

}  // namespace pgclaim::pg
