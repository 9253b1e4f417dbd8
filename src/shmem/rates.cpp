// Rate limits in shared memory; see rates.hpp.
#include "shmem/rates.hpp"

#include "shmem/wakeup.hpp"

extern "C" {
#include "common/hashfn.h"
#include "storage/shmem.h"
#include "storage/spin.h"
}

namespace pgclaim::shmem {

namespace {

// How far from its home slot a key may be placed.
constexpr int kProbe = 32;

struct RateEntry {
    Oid db;
    Oid install;  // claim.items of the installation (queue ids restart with it)
    int32 queue_id;
    uint64 group;
    int64 tat;  // 0: unused
};

struct RateTable {
    slock_t mutex;
    RateEntry entries[kRateEntries];
};

RateTable *table = nullptr;

uint32 home_of(Oid db, Oid install, int32 queue_id, uint64 group) {
    uint64 h = hash_combine64(hash_uint32(db), (uint64)queue_id * UINT64CONST(0x9E3779B97F4A7C15));
    h = hash_combine64(h, install);
    return (uint32)(hash_combine64(h, group) % kRateEntries);
}

// The entry of the key, or a free one for it (caller holds the mutex);
// nullptr when every slot within reach is held by a busy key.
RateEntry *find(Oid db, Oid install, int32 queue_id, uint64 group, int64 now, bool create) {
    uint32 home = home_of(db, install, queue_id, group);
    RateEntry *free_slot = nullptr;
    for (int i = 0; i < kProbe; ++i) {
        RateEntry *e = &table->entries[(home + i) % kRateEntries];
        if (e->tat != 0 && e->db == db && e->install == install && e->queue_id == queue_id &&
            e->group == group)
            return e;
        if (free_slot == nullptr && (e->tat == 0 || e->tat <= now)) free_slot = e;
    }
    if (!create || free_slot == nullptr) return nullptr;
    free_slot->db = db;
    free_slot->install = install;
    free_slot->queue_id = queue_id;
    free_slot->group = group;
    free_slot->tat = 0;
    return free_slot;
}

}  // namespace

Size rates_shmem_size() { return sizeof(RateTable); }

void rates_shmem_init() {
    bool found;
    table = (RateTable *)ShmemInitStruct("pg_claim rates", rates_shmem_size(), &found);
    if (!found) {
        memset((void *)table, 0, sizeof(RateTable));
        SpinLockInit(&table->mutex);
    }
}

int rate_take(Oid install, int32 queue_id, uint64 group, const RateRule &rule, int want,
              TimestampTz now, TimestampTz *next_at) {
    if (table == nullptr)
        pg::error({ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
                   "Add pg_claim to shared_preload_libraries and restart the server."},
                  "rate limits of queues need the preloaded pg_claim library");
    int granted = 0;
    int64 tat = 0;
    SpinLockAcquire(&table->mutex);
    RateEntry *e = find(MyDatabaseId, install, queue_id, group, now, true);
    if (e != nullptr) {
        granted = pgclaim::rate_take(&e->tat, now, rule, want);
        if (e->tat == 0) e->tat = 1;  // taken by this key even when nothing was granted
        tat = e->tat;
    }
    SpinLockRelease(&table->mutex);
    if (granted < want)
        *next_at = e != nullptr ? pgclaim::rate_next_at(tat, now, rule) : now + rule.interval_us;
    return granted;
}

void rate_give_back(Oid install, int32 queue_id, uint64 group, const RateRule &rule, int n) {
    if (table == nullptr || n <= 0) return;
    SpinLockAcquire(&table->mutex);
    RateEntry *e = find(MyDatabaseId, install, queue_id, group, 0, false);
    if (e != nullptr) pgclaim::rate_give_back(&e->tat, rule, n);
    SpinLockRelease(&table->mutex);
}

}  // namespace pgclaim::shmem
