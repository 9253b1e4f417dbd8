// Shared-memory tables of in-flight state: see txn_table.hpp.
#include "shmem/txn_table.hpp"

extern "C" {
#include "storage/shmem.h"
}

namespace pgclaim::shmem {

Size txn_table_shmem_size(const TxnTable &t) {
    return hash_estimate_size(*t.capacity, t.entrysize);
}

void txn_table_request(const TxnTable &t) { RequestNamedLWLockTranche(t.name, 1); }

void txn_table_init(TxnTable &t) {
    HASHCTL info;
    memset(&info, 0, sizeof(info));
    info.keysize = t.keysize;
    info.entrysize = t.entrysize;
    t.htab = ShmemInitHash(t.name, *t.capacity, *t.capacity, &info, HASH_ELEM | HASH_BLOBS);
    t.lock = &(GetNamedLWLockTranche(t.name))->lock;
}

void *txn_table_find(TxnTable &t, const void *key, bool create) {
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

void txn_table_remove(TxnTable &t, const void *key) {
    hash_search(t.htab, key, HASH_REMOVE, nullptr);
}

}  // namespace pgclaim::shmem
