// Lease grants in flight; see lease_grants.hpp.
#include "shmem/lease_grants.hpp"
#include "shmem/txn_table.hpp"

extern "C" {
#include "access/xact.h"
#include "utils/memutils.h"
}

namespace pgclaim::shmem {

int guc_max_lease_grants = 1024;

namespace {

struct GrantKey {
    Oid db;
    uint32 pad;  // 0: keys are compared as bytes
    uint64 name;
};

struct GrantEntry {
    GrantKey key;
    int32 permits;
    int32 refs;  // transactions with a grant of this name in flight
};

TxnTable table = {"pg_claim lease grants", "lease grants in flight", "pg_claim.max_lease_grants",
                  sizeof(GrantKey), sizeof(GrantEntry), &guc_max_lease_grants, nullptr, nullptr};

// This backend's announcements in the current transaction (plain data),
// each with the nesting level that made it.
struct Mine {
    uint64 name;
    int level;
};
Mine *mine = nullptr;  // in TopMemoryContext
int nmine = 0;
int mine_cap = 0;
bool callbacks_registered = false;

GrantKey key_of(uint64 name) {
    GrantKey k;
    memset(&k, 0, sizeof(k));
    k.db = MyDatabaseId;
    k.name = name;
    return k;
}

// Caller holds the lock.
void drop_one(uint64 name) {
    GrantKey k = key_of(name);
    auto *e = (GrantEntry *)txn_table_find(table, &k, false);
    if (e != nullptr && --e->refs <= 0) txn_table_remove(table, &k);
}

// Gives back the announcements made at nesting level `level` or deeper.
void drop_from(int level) {
    if (nmine == 0 || table.htab == nullptr) return;
    LWLockAcquire(table.lock, LW_EXCLUSIVE);
    int keep = 0;
    for (int i = 0; i < nmine; ++i) {
        if (mine[i].level >= level) drop_one(mine[i].name);
        else mine[keep++] = mine[i];
    }
    LWLockRelease(table.lock);
    nmine = keep;
}

void at_xact_end(XactEvent event, void *) {
    if (event == XACT_EVENT_PRE_PREPARE && nmine > 0)
        pg::error({ERRCODE_FEATURE_NOT_SUPPORTED,
                   "Commit the lease_acquire first; lease_assert, lease_renew and lease_release "
                   "may be prepared."},
                  "cannot PREPARE a transaction that acquired a lease");
    if (event == XACT_EVENT_COMMIT || event == XACT_EVENT_ABORT) drop_from(0);
}

void at_subxact_end(SubXactEvent event, SubTransactionId, SubTransactionId, void *) {
    if (nmine == 0) return;
    int level = GetCurrentTransactionNestLevel();
    if (event == SUBXACT_EVENT_ABORT_SUB) drop_from(level);
    if (event == SUBXACT_EVENT_COMMIT_SUB)
        for (int i = 0; i < nmine; ++i)
            if (mine[i].level >= level) mine[i].level = level - 1;
}

}  // namespace

Size lease_grants_shmem_size() { return txn_table_shmem_size(table); }
void lease_grants_shmem_request() { txn_table_request(table); }
void lease_grants_shmem_init() { txn_table_init(table); }

bool lease_grant_begin(uint64 name_hash, int32 permits) {
    if (table.htab == nullptr) return true;
    if (!callbacks_registered) {
        RegisterXactCallback(at_xact_end, nullptr);
        RegisterSubXactCallback(at_subxact_end, nullptr);
        callbacks_registered = true;
    }
    if (nmine == mine_cap) {
        int cap = mine_cap == 0 ? 8 : mine_cap * 2;
        mine = mine == nullptr ? (Mine *)MemoryContextAlloc(TopMemoryContext, sizeof(Mine) * cap)
                               : (Mine *)repalloc(mine, sizeof(Mine) * cap);
        mine_cap = cap;
    }
    GrantKey k = key_of(name_hash);
    bool ok = true;
    LWLockAcquire(table.lock, LW_EXCLUSIVE);
    auto *e = (GrantEntry *)txn_table_find(table, &k, true);
    if (e->refs > 0 && e->permits != permits) {
        // Ours alone (an earlier grant of this transaction) may change count.
        int own = 0;
        for (int i = 0; i < nmine; ++i)
            if (mine[i].name == name_hash) ++own;
        if (own < e->refs) ok = false;
    }
    if (ok) {
        e->permits = permits;
        ++e->refs;
    }
    LWLockRelease(table.lock);
    if (ok) mine[nmine++] = Mine{name_hash, GetCurrentTransactionNestLevel()};
    return ok;
}

void lease_grant_cancel(uint64 name_hash) {
    if (table.htab == nullptr) return;
    for (int i = nmine - 1; i >= 0; --i) {
        if (mine[i].name != name_hash) continue;
        mine[i] = mine[--nmine];
        LWLockAcquire(table.lock, LW_EXCLUSIVE);
        drop_one(name_hash);
        LWLockRelease(table.lock);
        return;
    }
}

}  // namespace pgclaim::shmem
