// A shared-memory hash table whose entries belong to open transactions, the
// shape of the in-flight tables (claim_slots, lease_grants): PostgreSQL's
// dynahash under one LWLock, a size set by a GUC, a clear error when it is
// full, and per backend the list of what the current transaction added,
// each with the nesting level that added it, so that a subtransaction's
// rollback gives back exactly its own part.
#pragma once

#include "pg/pg.hpp"

extern "C" {
#include "storage/lwlock.h"
#include "utils/hsearch.h"
}

namespace pgclaim::shmem {

struct TxnTable {
    const char *name;      // shared-memory name, also the LWLock tranche
    const char *what;      // what it holds, for the error when it is full
    const char *guc;       // the GUC that sizes it (for the error's hint)
    Size keysize;          // entries start with their key
    Size entrysize;
    int *capacity;         // the GUC's variable
    HTAB *htab;            // set by txn_table_init
    LWLock *lock;
};

Size txn_table_shmem_size(const TxnTable &t);
void txn_table_request(const TxnTable &t);
void txn_table_init(TxnTable &t);

// Under t.lock: the entry of `key`, created zeroed (beyond the key) when
// `create`; raises 53400 naming t.guc when the table is full.
void *txn_table_find(TxnTable &t, const void *key, bool create);
void txn_table_remove(TxnTable &t, const void *key);

}  // namespace pgclaim::shmem
