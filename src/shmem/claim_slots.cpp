// Claims in flight per queue; see claim_slots.hpp.
#include "shmem/claim_slots.hpp"

extern "C" {
#include "access/xact.h"
#include "common/hashfn.h"
#include "storage/shmem.h"
#include "storage/spin.h"
#include "utils/memutils.h"
}

namespace pgclaim::shmem {

namespace {

struct SlotEntry {
    Oid db;
    Oid install;
    int32 queue_id;
    int64 reserved;  // 0 and db 0: unused
};

struct SlotTable {
    slock_t mutex;
    SlotEntry entries[kClaimSlotEntries];
};

SlotTable *table = nullptr;

// This backend's reservations in the current transaction (plain data).
struct Mine {
    Oid install;
    int32 queue_id;
    int64 n;
};
Mine *mine = nullptr;  // in TopMemoryContext
int nmine = 0;
int mine_cap = 0;
bool callback_registered = false;

uint32 home_of(Oid db, Oid install, int32 queue_id) {
    uint64 h = hash_combine64(hash_uint32(db), hash_uint32(install));
    return (uint32)(hash_combine64(h, (uint64)queue_id) % kClaimSlotEntries);
}

// Caller holds the mutex.
SlotEntry *find(Oid db, Oid install, int32 queue_id, bool create) {
    uint32 home = home_of(db, install, queue_id);
    SlotEntry *free_entry = nullptr;
    for (int i = 0; i < kClaimSlotEntries; ++i) {
        SlotEntry *e = &table->entries[(home + i) % kClaimSlotEntries];
        if (e->reserved > 0 && e->db == db && e->install == install && e->queue_id == queue_id)
            return e;
        if (free_entry == nullptr && e->reserved == 0) free_entry = e;
    }
    if (!create || free_entry == nullptr) return nullptr;
    free_entry->db = db;
    free_entry->install = install;
    free_entry->queue_id = queue_id;
    return free_entry;
}

void release(Oid install, int32 queue_id, int64 n) {
    SlotEntry *e = find(MyDatabaseId, install, queue_id, false);
    if (e != nullptr) e->reserved = e->reserved > n ? e->reserved - n : 0;
}

void at_xact_end(XactEvent event, void *) {
    if (event != XACT_EVENT_COMMIT && event != XACT_EVENT_ABORT &&
        event != XACT_EVENT_PREPARE)
        return;
    if (nmine == 0 || table == nullptr) return;
    SpinLockAcquire(&table->mutex);
    for (int i = 0; i < nmine; ++i) release(mine[i].install, mine[i].queue_id, mine[i].n);
    SpinLockRelease(&table->mutex);
    nmine = 0;
}

}  // namespace

Size claim_slots_shmem_size() { return sizeof(SlotTable); }

void claim_slots_shmem_init() {
    bool found;
    table = (SlotTable *)ShmemInitStruct("pg_claim claim slots", claim_slots_shmem_size(), &found);
    if (!found) {
        memset((void *)table, 0, sizeof(SlotTable));
        SpinLockInit(&table->mutex);
    }
}

int64 claim_slots_reserve(Oid install, int32 queue_id, int n) {
    if (table == nullptr || n <= 0) return -1;
    if (!callback_registered) {
        RegisterXactCallback(at_xact_end, nullptr);
        callback_registered = true;
    }
    if (nmine == mine_cap) {
        int cap = mine_cap == 0 ? 8 : mine_cap * 2;
        mine = mine == nullptr ? (Mine *)MemoryContextAlloc(TopMemoryContext, sizeof(Mine) * cap)
                               : (Mine *)repalloc(mine, sizeof(Mine) * cap);
        mine_cap = cap;
    }
    int64 own = 0;
    for (int i = 0; i < nmine; ++i)
        if (mine[i].install == install && mine[i].queue_id == queue_id) own += mine[i].n;
    int64 others = -1;
    SpinLockAcquire(&table->mutex);
    SlotEntry *e = find(MyDatabaseId, install, queue_id, true);
    if (e != nullptr) {
        others = e->reserved - own;
        e->reserved += n;
    }
    SpinLockRelease(&table->mutex);
    if (e != nullptr) mine[nmine++] = Mine{install, queue_id, n};
    return others;
}

void claim_slots_give_back(Oid install, int32 queue_id, int n) {
    if (table == nullptr || n <= 0) return;
    int64 left = n;
    for (int i = nmine - 1; i >= 0 && left > 0; --i) {
        if (mine[i].install != install || mine[i].queue_id != queue_id) continue;
        int64 take = mine[i].n < left ? mine[i].n : left;
        mine[i].n -= take;
        left -= take;
    }
    SpinLockAcquire(&table->mutex);
    release(install, queue_id, n - left);
    SpinLockRelease(&table->mutex);
}

}  // namespace pgclaim::shmem
