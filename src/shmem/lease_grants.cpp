// Lease grants in flight; see lease_grants.hpp.
#include "shmem/lease_grants.hpp"
#include "shmem/txn_table.hpp"

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
                  sizeof(GrantKey), sizeof(GrantEntry), &guc_max_lease_grants, 1, 0,
                  nullptr, nullptr, nullptr};

// This backend's announcements in the current transaction (plain data),
// each with the nesting level that made it.
struct Mine {
    int level;
    uint64 name;
};
TxnRecords<Mine> mine;

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
    auto *e = (GrantEntry *)pg::shared_hash_find(table, &k, false);
    if (e != nullptr && --e->refs <= 0) pg::shared_hash_remove(table, &k);
}

void give_back(const Mine &m) { drop_one(m.name); }

void at_xact_end(XactEvent event) {
    if (event == XACT_EVENT_PRE_PREPARE && mine.size() > 0)
        pg::error({ERRCODE_FEATURE_NOT_SUPPORTED,
                   "Commit the lease_acquire first; lease_assert, lease_renew and lease_release "
                   "may be prepared."},
                  "cannot PREPARE a transaction that acquired a lease");
    if (event == XACT_EVENT_COMMIT || event == XACT_EVENT_ABORT) mine.drop_from(table, 0, give_back);
}

void at_subxact_end(SubXactEvent event) {
    mine.at_subxact_end(table, event, give_back);
}

}  // namespace

Size lease_grants_shmem_size() { return pg::shared_hash_size(table); }
void lease_grants_shmem_request() { pg::shared_hash_request(table); }
void lease_grants_shmem_init() { pg::shared_hash_init(table); }

bool lease_grant_begin(uint64 name_hash, int32 permits) {
    if (table.htab == nullptr) return true;
    mine.reserve_one();
    GrantKey k = key_of(name_hash);
    bool ok = true;
    LWLockAcquire(table.lock, LW_EXCLUSIVE);
    auto *e = (GrantEntry *)pg::shared_hash_find(table, &k, true);
    if (e->refs > 0 && e->permits != permits) {
        // Ours alone (an earlier grant of this transaction) may change count.
        int own = 0;
        for (int i = 0; i < mine.size(); ++i)
            if (mine[i].name == name_hash) ++own;
        if (own < e->refs) ok = false;
    }
    if (ok) {
        e->permits = permits;
        ++e->refs;
    }
    LWLockRelease(table.lock);
    if (ok) mine.add(Mine{0, name_hash});
    return ok;
}

void lease_grant_cancel(uint64 name_hash) {
    if (table.htab == nullptr) return;
    for (int i = mine.size() - 1; i >= 0; --i) {
        if (mine[i].name != name_hash) continue;
        mine.remove(i);
        LWLockAcquire(table.lock, LW_EXCLUSIVE);
        drop_one(name_hash);
        LWLockRelease(table.lock);
        return;
    }
}

void lease_grants_at_xact_end(XactEvent event) { at_xact_end(event); }
void lease_grants_at_subxact_end(SubXactEvent event) { at_subxact_end(event); }

}  // namespace pgclaim::shmem
