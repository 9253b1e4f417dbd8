// Lease grants in flight; see lease_grants.hpp.
#include "shmem/lease_grants.hpp"

extern "C" {
#include "access/xact.h"
#include "storage/shmem.h"
#include "storage/spin.h"
#include "utils/memutils.h"
}

namespace pgclaim::shmem {

namespace {

struct GrantEntry {
    Oid db;
    uint64 name;
    int32 permits;
    int32 refs;  // 0: unused
};

struct GrantTable {
    slock_t mutex;
    GrantEntry entries[kLeaseGrantEntries];
};

GrantTable *table = nullptr;

// This backend's announcements in the current transaction (plain data).
uint64 *mine = nullptr;  // in TopMemoryContext
int nmine = 0;
int mine_cap = 0;
bool callback_registered = false;

GrantEntry *find(Oid db, uint64 name) {
    uint32 home = (uint32)(name % kLeaseGrantEntries);
    for (int i = 0; i < kLeaseGrantEntries; ++i) {
        GrantEntry *e = &table->entries[(home + i) % kLeaseGrantEntries];
        if (e->refs > 0 && e->db == db && e->name == name) return e;
    }
    return nullptr;
}

GrantEntry *free_slot(uint64 name) {
    uint32 home = (uint32)(name % kLeaseGrantEntries);
    for (int i = 0; i < kLeaseGrantEntries; ++i) {
        GrantEntry *e = &table->entries[(home + i) % kLeaseGrantEntries];
        if (e->refs == 0) return e;
    }
    return nullptr;
}

void drop_one(uint64 name) {
    GrantEntry *e = find(MyDatabaseId, name);
    if (e != nullptr) --e->refs;
}

void at_xact_end(XactEvent event, void *) {
    if (event != XACT_EVENT_COMMIT && event != XACT_EVENT_ABORT &&
        event != XACT_EVENT_PREPARE)
        return;
    if (nmine == 0 || table == nullptr) return;
    SpinLockAcquire(&table->mutex);
    for (int i = 0; i < nmine; ++i) drop_one(mine[i]);
    SpinLockRelease(&table->mutex);
    nmine = 0;
}

}  // namespace

Size lease_grants_shmem_size() { return sizeof(GrantTable); }

void lease_grants_shmem_init() {
    bool found;
    table = (GrantTable *)ShmemInitStruct("pg_claim lease grants", lease_grants_shmem_size(),
                                          &found);
    if (!found) {
        memset((void *)table, 0, sizeof(GrantTable));
        SpinLockInit(&table->mutex);
    }
}

bool lease_grant_begin(uint64 name_hash, int32 permits) {
    if (table == nullptr) return true;
    if (!callback_registered) {
        RegisterXactCallback(at_xact_end, nullptr);
        callback_registered = true;
    }
    if (nmine == mine_cap) {
        int cap = mine_cap == 0 ? 8 : mine_cap * 2;
        mine = mine == nullptr ? (uint64 *)MemoryContextAlloc(TopMemoryContext, sizeof(uint64) * cap)
                               : (uint64 *)repalloc(mine, sizeof(uint64) * cap);
        mine_cap = cap;
    }
    bool ok = true;
    SpinLockAcquire(&table->mutex);
    GrantEntry *e = find(MyDatabaseId, name_hash);
    if (e != nullptr && e->permits != permits) {
        // Ours alone (an earlier grant of this transaction) may change count.
        int own = 0;
        for (int i = 0; i < nmine; ++i)
            if (mine[i] == name_hash) ++own;
        if (own < e->refs) ok = false;
        else e->permits = permits;
    } else if (e == nullptr) {
        e = free_slot(name_hash);
        if (e == nullptr) {
            ok = false;
        } else {
            e->db = MyDatabaseId;
            e->name = name_hash;
            e->permits = permits;
            e->refs = 0;
        }
    }
    if (ok) ++e->refs;
    SpinLockRelease(&table->mutex);
    if (ok) mine[nmine++] = name_hash;
    return ok;
}

void lease_grant_cancel(uint64 name_hash) {
    if (table == nullptr) return;
    for (int i = nmine - 1; i >= 0; --i) {
        if (mine[i] != name_hash) continue;
        mine[i] = mine[--nmine];
        SpinLockAcquire(&table->mutex);
        drop_one(name_hash);
        SpinLockRelease(&table->mutex);
        return;
    }
}

}  // namespace pgclaim::shmem
