// Per-queue counters in shared memory; see metrics.hpp.
#include "shmem/metrics.hpp"

#include "pg/direct.hpp"
#include "shmem/shared.hpp"
#include "shmem/wakeup.hpp"

extern "C" {
#include "common/hashfn.h"
#include "miscadmin.h"
#include "storage/shmem.h"
}

namespace pgclaim::shmem {

int guc_max_metric_queues = 4096;

namespace {

// A key and the counters. Key 0 is a free slot; a key is never given back
// (drop_queue zeroes the counters only). `items` is the OID of claim.items
// when the counters were started: a queue of a re-created extension (same
// database, same queue id) starts from zero.
struct MetricSlot {
    pg_atomic_uint64 key;
    pg_atomic_uint32 items;
    pg_atomic_uint64 c[kMetricCount];
};

struct MetricTable {
    pg_atomic_uint64 untracked;
    MetricSlot slots[FLEXIBLE_ARRAY_MEMBER];  // guc_max_metric_queues
};

MetricTable *table = nullptr;

// The slot found last in this backend (the same queue is counted again and
// again by a worker or producer).
uint64 last_key = 0;
MetricSlot *last_slot = nullptr;

uint64 key_of(int32 queue_id) {
    return ((uint64)MyDatabaseId << 32) | (uint64)(uint32)queue_id;
}

// The queue's slot; takes a free one when `take`. nullptr when absent (or
// the table is full).
MetricSlot *slot_of(int32 queue_id, bool take) {
    if (table == nullptr || MyDatabaseId == InvalidOid) return nullptr;
    uint64 key = key_of(queue_id);
    if (key == last_key && last_slot != nullptr) return last_slot;
    uint32 h = (uint32)(hash_bytes_uint32((uint32)queue_id) ^ hash_bytes_uint32(MyDatabaseId));
    for (int i = 0; i < guc_max_metric_queues; ++i) {
        MetricSlot *s = &table->slots[(h + (uint32)i) % (uint32)guc_max_metric_queues];
        uint64 k = pg_atomic_read_u64(&s->key);
        if (k == 0) {
            if (!take) return nullptr;
            uint64 expected = 0;
            if (pg_atomic_compare_exchange_u64(&s->key, &expected, key)) k = key;
            else k = expected;  // someone took it first: for this key or another
        }
        if (k == key) {
            last_key = key;
            last_slot = s;
            return s;
        }
    }
    return nullptr;
}

}  // namespace

void count(int32 queue_id, Metric m, int64 n) {
    if (table == nullptr || n <= 0) return;
    MetricSlot *s = slot_of(queue_id, true);
    if (s == nullptr) {
        pg_atomic_fetch_add_u64(&table->untracked, (uint64)n);
        return;
    }
    uint32 items = (uint32)pg::direct::items_relid();
    uint32 had = pg_atomic_read_u32(&s->items);
    if (had != items && pg_atomic_compare_exchange_u32(&s->items, &had, items))
        for (int i = 0; i < kMetricCount; ++i) pg_atomic_write_u64(&s->c[i], 0);
    pg_atomic_fetch_add_u64(&s->c[(int)m], (uint64)n);
}

void metrics_forget(int32 queue_id) {
    MetricSlot *s = slot_of(queue_id, false);
    if (s == nullptr) return;
    for (int i = 0; i < kMetricCount; ++i) pg_atomic_write_u64(&s->c[i], 0);
}

bool metrics_read(int32 queue_id, int64 out[kMetricCount]) {
    MetricSlot *s = slot_of(queue_id, false);
    if (s == nullptr) return false;
    bool current = pg_atomic_read_u32(&s->items) == (uint32)pg::direct::items_relid();
    for (int i = 0; i < kMetricCount; ++i)
        out[i] = current ? (int64)pg_atomic_read_u64(&s->c[i]) : 0;
    return true;
}

int metrics_waiters(int32 queue_id) {
    if (shared == nullptr) return 0;
    // A racy read of the waiter slots: a gauge, exact only at rest.
    int n = 0;
    for (int i = 0; i < shared->nwaiter_slots; ++i) {
        const Waiter *w = &shared->waiters[i];
        if (w->waiting && w->db == MyDatabaseId && w->kind == (int)WaitKind::Queue &&
            w->key == (int64)queue_id)
            ++n;
    }
    return n;
}

int64 metrics_untracked() {
    return table == nullptr ? 0 : (int64)pg_atomic_read_u64(&table->untracked);
}

Size metrics_shmem_size() {
    return add_size(offsetof(MetricTable, slots), mul_size(sizeof(MetricSlot), guc_max_metric_queues));
}

void metrics_shmem_init() {
    bool found;
    table = (MetricTable *)ShmemInitStruct("pg_claim metrics", metrics_shmem_size(), &found);
    if (!found) {
        pg_atomic_init_u64(&table->untracked, 0);
        for (int i = 0; i < guc_max_metric_queues; ++i) {
            pg_atomic_init_u64(&table->slots[i].key, 0);
            pg_atomic_init_u32(&table->slots[i].items, 0);
            for (int j = 0; j < kMetricCount; ++j) pg_atomic_init_u64(&table->slots[i].c[j], 0);
        }
    }
}

}  // namespace pgclaim::shmem
