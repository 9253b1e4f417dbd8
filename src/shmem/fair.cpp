// Fair-share schedulers in shared memory; see fair.hpp.
#include "shmem/fair.hpp"

#include "shmem/shared.hpp"

extern "C" {
#include "miscadmin.h"
#include "port/atomics.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
}

namespace pgclaim::shmem {

namespace {

constexpr int kSteps = 6;                    // 10-second steps of a minute
constexpr int64 kStepUs = 10 * USECS_PER_SEC;

struct KeyCounts {
    int32 key_id;
    int32 pad;
    int64 step;  // the step of counts[step % kSteps]
    uint32 counts[kSteps];
    uint64 activated;  // the fair_activations number of its last activation
};

struct Slot {
    Oid db;
    Oid install;
    int32 queue_id;  // 0: free
    int32 pad;
    uint64 used;     // the directory's clock when last used
    uint64 epoch;    // queue_changes when the weights were loaded (0: not loaded)
    TimestampTz discovered_at;
    KeyCounts counts[kFairKeysPerQueue];
    FairTable table;  // kFairKeysPerQueue entries; last
};

struct Directory {
    LWLock *lock;          // the directory
    LWLockPadded *locks;   // one per slot (the tranche's first kFairQueues)
    uint64 clock;
    pg_atomic_uint64 *activations;  // in the segment (a backend's own without it)
    char *slots;
};

Directory dir;
bool local = false;  // no shared memory: this backend's own tables
pg_atomic_uint64 local_activations;

Size slot_size() {
    return MAXALIGN(offsetof(Slot, table) + fair_table_size(kFairKeysPerQueue));
}
Slot *slot_at(int i) { return (Slot *)(dir.slots + (Size)i * slot_size()); }

void ensure() {
    if (dir.slots != nullptr) return;
    // Not preloaded: tables of this backend, without locks.
    dir.slots = (char *)MemoryContextAllocZero(TopMemoryContext, slot_size() * kFairQueues);
    pg_atomic_init_u64(&local_activations, 0);
    dir.activations = &local_activations;
    local = true;
}

void lock(int i) {
    if (!local) LWLockAcquire(&dir.locks[i].lock, LW_EXCLUSIVE);
}
void unlock(int i) {
    if (!local) LWLockRelease(&dir.locks[i].lock);
}

// The slot of the queue, locked; made (taking the least recently used one)
// when `create`. -1 when there is none.
int find(Oid install, int32 queue_id, bool create, bool *fresh = nullptr) {
    ensure();
    if (fresh) *fresh = false;
    if (!local) LWLockAcquire(dir.lock, LW_EXCLUSIVE);
    int found = -1, victim = -1;
    for (int i = 0; i < kFairQueues; ++i) {
        Slot *s = slot_at(i);
        if (s->queue_id == queue_id && s->db == MyDatabaseId && s->install == install) {
            found = i;
            break;
        }
        if (victim < 0 || s->queue_id == 0 ||
            (slot_at(victim)->queue_id != 0 && s->used < slot_at(victim)->used))
            victim = i;
    }
    if (found < 0 && create) found = victim;
    if (found >= 0) {
        Slot *s = slot_at(found);
        s->used = ++dir.clock;
        if (s->queue_id != queue_id || s->db != MyDatabaseId || s->install != install) {
            // Taken over: the slot's lock is taken under the directory's, so
            // nobody is inside it now.
            lock(found);
            s->db = MyDatabaseId;
            s->install = install;
            s->queue_id = queue_id;
            s->epoch = 0;
            s->discovered_at = 0;
            memset(s->counts, 0, sizeof(s->counts));
            fair_init(&s->table, kFairKeysPerQueue);
            if (fresh) *fresh = true;
            if (!local) LWLockRelease(dir.lock);
            return found;
        }
    }
    if (!local) LWLockRelease(dir.lock);
    if (found >= 0) lock(found);
    // Taken over between the two locks: look again.
    if (found >= 0) {
        Slot *s = slot_at(found);
        if (s->queue_id != queue_id || s->db != MyDatabaseId || s->install != install) {
            unlock(found);
            return create ? find(install, queue_id, create, fresh) : -1;
        }
    }
    return found;
}

KeyCounts *counts_of(Slot *s, int32 key_id) {
    const FairKey *k = fair_find(&s->table, key_id);
    if (k == nullptr) return nullptr;
    KeyCounts *c = &s->counts[k - s->table.keys];
    if (c->key_id != key_id) {
        memset(c, 0, sizeof(*c));
        c->key_id = key_id;
    }
    return c;
}

int64 last_minute(KeyCounts *c, int64 step) {
    int64 sum = 0;
    for (int64 st = step - kSteps + 1; st <= step; ++st)
        if (st >= 0 && st <= c->step && c->step - st < kSteps) sum += c->counts[st % kSteps];
    return sum;
}

}  // namespace

Size fair_shmem_size() {
    return add_size(MAXALIGN(sizeof(pg_atomic_uint64)), mul_size(slot_size(), kFairQueues));
}

void fair_shmem_request() { RequestNamedLWLockTranche("pg_claim fair", kFairQueues + 1); }

void fair_shmem_init() {
    bool found;
    char *base = (char *)ShmemInitStruct("pg_claim fair", fair_shmem_size(), &found);
    if (!found) {
        memset(base, 0, fair_shmem_size());
        pg_atomic_init_u64((pg_atomic_uint64 *)base, 0);
    }
    LWLockPadded *locks = GetNamedLWLockTranche("pg_claim fair");
    dir.lock = &locks[kFairQueues].lock;
    dir.locks = locks;
    dir.activations = (pg_atomic_uint64 *)base;
    dir.slots = base + MAXALIGN(sizeof(pg_atomic_uint64));
    local = false;
}

void fair_prepare() { ensure(); }

FairDuties fair_begin(Oid install, int32 queue_id, uint64 epoch, TimestampTz now) {
    FairDuties d{false, false};
    int i = find(install, queue_id, true);
    Slot *s = slot_at(i);
    d.weights = s->epoch == 0 || s->epoch != epoch;
    if (s->table.nactive == 0 || now - s->discovered_at >= kFairDiscoverUs ||
        now < s->discovered_at) {
        d.discover = true;
        s->discovered_at = now;
    }
    unlock(i);
    return d;
}

void fair_load_weights(Oid install, int32 queue_id, uint64 epoch, const int32 *keys,
                       const int32 *weights, int n) {
    int i = find(install, queue_id, true);
    Slot *s = slot_at(i);
    fair_reset_weights(&s->table);
    for (int k = 0; k < n; ++k) pgclaim::fair_set_weight(&s->table, keys[k], weights[k]);
    s->epoch = epoch == 0 ? 1 : epoch;
    unlock(i);
}

void fair_activate(Oid install, int32 queue_id, const int32 *keys, int n, bool stamp) {
    if (n <= 0) return;
    int i = find(install, queue_id, true);
    Slot *s = slot_at(i);
    // A full barrier: the commit that made the items visible comes before.
    uint64 number = stamp ? pg_atomic_add_fetch_u64(dir.activations, 1) : 0;
    for (int k = 0; k < n; ++k) {
        pgclaim::fair_activate(&s->table, keys[k], 0);
        if (!stamp) continue;
        if (KeyCounts *c = counts_of(s, keys[k])) c->activated = number;
    }
    unlock(i);
}

uint64 fair_activations() {
    ensure();
    uint64 number = pg_atomic_read_u64(dir.activations);
    pg_memory_barrier();  // read before the snapshot that follows is taken
    return number;
}

int fair_pick(Oid install, int32 queue_id, int n, int32 *out) {
    int i = find(install, queue_id, true);
    int got = pgclaim::fair_pick(&slot_at(i)->table, n, out);
    unlock(i);
    return got;
}

bool fair_deactivate(Oid install, int32 queue_id, int32 key_id, uint64 seen) {
    int i = find(install, queue_id, false);
    if (i < 0) return false;
    Slot *s = slot_at(i);
    KeyCounts *c = counts_of(s, key_id);
    bool leave = c == nullptr || c->activated <= seen;
    if (leave) pgclaim::fair_deactivate(&s->table, key_id);
    unlock(i);
    return leave;
}

void fair_set_weight(Oid install, int32 queue_id, int32 key_id, int32 weight) {
    int i = find(install, queue_id, false);
    if (i < 0) return;
    pgclaim::fair_set_weight(&slot_at(i)->table, key_id, weight);
    unlock(i);
}

void fair_handed(Oid install, int32 queue_id, int32 key_id, int n, TimestampTz now) {
    if (n <= 0) return;
    int i = find(install, queue_id, false);
    if (i < 0) return;
    if (KeyCounts *c = counts_of(slot_at(i), key_id)) {
        int64 step = now / kStepUs;
        if (step > c->step) {
            for (int64 st = c->step + 1; st <= step && st <= c->step + kSteps; ++st)
                c->counts[st % kSteps] = 0;
            c->step = step;
        }
        if (step >= 0 && c->step - step < kSteps) c->counts[step % kSteps] += (uint32)n;
    }
    unlock(i);
}

void fair_forget(Oid install, int32 queue_id) {
    int i = find(install, queue_id, false);
    if (i < 0) return;
    Slot *s = slot_at(i);
    s->queue_id = 0;
    fair_init(&s->table, kFairKeysPerQueue);
    unlock(i);
}

int fair_snapshot(Oid install, TimestampTz now, FairKeyState **out) {
    ensure();
    int cap = 64, n = 0;
    *out = (FairKeyState *)palloc(sizeof(FairKeyState) * cap);
    int64 step = now / kStepUs;
    for (int i = 0; i < kFairQueues; ++i) {
        lock(i);
        Slot *s = slot_at(i);
        if (s->queue_id != 0 && s->db == MyDatabaseId && s->install == install) {
            for (int32 k = 0; k < s->table.nkeys; ++k) {
                const FairKey *e = &s->table.keys[k];
                KeyCounts *c = &s->counts[k];
                if (n == cap) {
                    // repalloc under an LWLock: a failure releases it (error cleanup).
                    cap *= 2;
                    *out = (FairKeyState *)repalloc(*out, sizeof(FairKeyState) * cap);
                }
                (*out)[n++] = FairKeyState{s->queue_id, e->key_id, e->active != 0,
                                           c->key_id == e->key_id ? last_minute(c, step) : 0};
            }
        }
        unlock(i);
    }
    return n;
}

}  // namespace pgclaim::shmem
