// Rate limits in shared memory; see rates.hpp.
#include "shmem/rates.hpp"

#include "shmem/txn_table.hpp"

namespace pgclaim::shmem {

int guc_max_rate_keys = 4096;

namespace {

struct RateKey {
    Oid db;
    Oid install;  // claim.items of the installation (queue ids restart with it)
    int32 queue_id;
    uint32 pad;  // 0: keys are compared as bytes
    uint64 group;
};

struct RateEntry {
    RateKey key;
    int64 tat;  // the GCRA's theoretical arrival time; idle once it passed
};

TxnTable table = {"pg_claim rates", "rate-limited keys", "pg_claim.max_rate_keys",
                  sizeof(RateKey), sizeof(RateEntry), &guc_max_rate_keys, 1, 0,
                  nullptr, nullptr, nullptr};

RateKey key_of(Oid install, int32 queue_id, uint64 group) {
    RateKey k;
    memset(&k, 0, sizeof(k));
    k.db = MyDatabaseId;
    k.install = install;
    k.queue_id = queue_id;
    k.group = group;
    return k;
}

// Caller holds the lock. Keys whose timestamp has passed carry no state
// (a new entry behaves the same): they go, to make room.
void drop_idle(int64 now) {
    HASH_SEQ_STATUS st;
    hash_seq_init(&st, table.htab);
    RateEntry *e;
    while ((e = (RateEntry *)hash_seq_search(&st)) != nullptr)
        if (e->tat <= now) hash_search(table.htab, &e->key, HASH_REMOVE, nullptr);
}

}  // namespace

Size rates_shmem_size() { return pg::shared_hash_size(table); }
void rates_shmem_request() { pg::shared_hash_request(table); }
void rates_shmem_init() { pg::shared_hash_init(table); }

int rate_take(Oid install, int32 queue_id, uint64 group, const RateRule &rule, int want,
              TimestampTz now, TimestampTz *next_at) {
    if (table.htab == nullptr)
        pg::error({ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
                   "Add pg_claim to shared_preload_libraries and restart the server."},
                  "rate limits of queues need the preloaded pg_claim library");
    RateKey k = key_of(install, queue_id, group);
    LWLockAcquire(table.lock, LW_EXCLUSIVE);
    auto *e = (RateEntry *)pg::shared_hash_find(table, &k, false);
    if (e == nullptr) {
        if (hash_get_num_entries(table.htab) >= guc_max_rate_keys) drop_idle(now);
        e = (RateEntry *)pg::shared_hash_find(table, &k, true);  // 53400 when still full
    }
    int granted = pgclaim::rate_take(&e->tat, now, rule, want);
    if (e->tat == 0) e->tat = 1;  // a key of its own even when nothing was granted
    int64 tat = e->tat;
    LWLockRelease(table.lock);
    if (granted < want) *next_at = pgclaim::rate_next_at(tat, now, rule);
    return granted;
}

void rate_give_back(Oid install, int32 queue_id, uint64 group, const RateRule &rule, int n) {
    if (table.htab == nullptr || n <= 0) return;
    RateKey k = key_of(install, queue_id, group);
    LWLockAcquire(table.lock, LW_EXCLUSIVE);
    auto *e = (RateEntry *)pg::shared_hash_find(table, &k, false);
    if (e != nullptr) pgclaim::rate_give_back(&e->tat, rule, n);
    LWLockRelease(table.lock);
}

}  // namespace pgclaim::shmem
