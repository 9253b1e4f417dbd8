// Claims in flight per queue; see claim_slots.hpp.
#include "shmem/claim_slots.hpp"
#include "shmem/txn_table.hpp"

namespace pgclaim::shmem {

int guc_max_claim_slots = 1024;

namespace {

struct SlotKey {
    Oid db;
    Oid install;
    int32 queue_id;
};

struct SlotEntry {
    SlotKey key;
    int64 reserved;
};

TxnTable table = {"pg_claim claim slots", "claims in flight under max_active",
                  "pg_claim.max_claim_slots", sizeof(SlotKey), sizeof(SlotEntry),
                  &guc_max_claim_slots, 1, 0, nullptr, nullptr, nullptr};

// This backend's reservations in the current transaction (plain data): one
// per queue and nesting level.
struct Mine {
    int level;
    SlotKey key;
    int64 n;
};
TxnRecords<Mine> mine;

SlotKey key_of(Oid install, int32 queue_id) {
    SlotKey k;
    memset(&k, 0, sizeof(k));
    k.db = MyDatabaseId;
    k.install = install;
    k.queue_id = queue_id;
    return k;
}

bool same(const SlotKey &a, const SlotKey &b) { return memcmp(&a, &b, sizeof(SlotKey)) == 0; }

// Caller holds the lock.
void release(const SlotKey &k, int64 n) {
    auto *e = (SlotEntry *)pg::shared_hash_find(table, &k, false);
    if (e == nullptr) return;
    e->reserved -= n;
    if (e->reserved <= 0) pg::shared_hash_remove(table, &k);
}

void give_back(const Mine &m) { release(m.key, m.n); }

void at_xact_end(XactEvent event) {
    if (event == XACT_EVENT_PRE_PREPARE) {
        for (int i = 0; i < mine.size(); ++i)
            if (mine[i].n > 0)
                pg::error({ERRCODE_FEATURE_NOT_SUPPORTED,
                           "Commit the claim first; assert_token, complete, fail, extend and "
                           "release may be prepared."},
                          "cannot PREPARE a transaction that claimed from a queue with "
                          "max_active");
        return;
    }
    if (event == XACT_EVENT_COMMIT || event == XACT_EVENT_ABORT) mine.drop_from(table, 0, give_back);
}

void at_subxact_end(SubXactEvent event) {
    mine.at_subxact_end(table, event, give_back);
}

// This transaction's entry for the queue at the current level.
Mine *mine_for(const SlotKey &k) {
    int level = GetCurrentTransactionNestLevel();
    for (int i = mine.size() - 1; i >= 0; --i)
        if (mine[i].level == level && same(mine[i].key, k)) return &mine[i];
    return mine.add(Mine{0, k, 0});
}

}  // namespace

Size claim_slots_shmem_size() { return pg::shared_hash_size(table); }
void claim_slots_shmem_request() { pg::shared_hash_request(table); }
void claim_slots_shmem_init() { pg::shared_hash_init(table); }

int64 claim_slots_reserve(Oid install, int32 queue_id, int n) {
    if (table.htab == nullptr || n <= 0) return -1;
    SlotKey k = key_of(install, queue_id);
    Mine *m = mine_for(k);
    int64 own = 0;
    for (int i = 0; i < mine.size(); ++i)
        if (same(mine[i].key, k)) own += mine[i].n;
    LWLockAcquire(table.lock, LW_EXCLUSIVE);
    auto *e = (SlotEntry *)pg::shared_hash_find(table, &k, true);
    int64 others = e->reserved - own;
    e->reserved += n;
    LWLockRelease(table.lock);
    m->n += n;
    return others;
}

void claim_slots_give_back(Oid install, int32 queue_id, int n) {
    if (table.htab == nullptr || n <= 0) return;
    SlotKey k = key_of(install, queue_id);
    int64 left = n;
    for (int i = mine.size() - 1; i >= 0 && left > 0; --i) {
        if (!same(mine[i].key, k)) continue;
        int64 take = mine[i].n < left ? mine[i].n : left;
        mine[i].n -= take;
        left -= take;
    }
    LWLockAcquire(table.lock, LW_EXCLUSIVE);
    release(k, n - left);
    LWLockRelease(table.lock);
}

void claim_slots_at_xact_end(XactEvent event) { at_xact_end(event); }
void claim_slots_at_subxact_end(SubXactEvent event) { at_subxact_end(event); }

}  // namespace pgclaim::shmem
