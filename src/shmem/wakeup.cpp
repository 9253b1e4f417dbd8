// Waiting for work and waking waiters. See wakeup.hpp for the contract.
//
// The race between "the claim scan found nothing" and "the waiter is
// registered" is closed with wake stamps: at commit a producer first stores
// the time into the stamp of its key's bucket, then looks for waiters; a
// waiter first registers, then reads the stamp. If the stamp is not older
// than the start of the waiter's last scan (the statement start, or the end
// of its previous wait), a commit may have been missed and the waiter
// returns at once to scan again. Both sides use full barriers (Dekker), so
// one of them always sees the other.
#include "shmem/wakeup.hpp"

#include "shmem/compat.hpp"
#include "shmem/notify.hpp"
#include "shmem/poll.hpp"
#include "shmem/registry.hpp"
#include "shmem/shared.hpp"

extern "C" {
#include "common/hashfn.h"
#include "storage/ipc.h"
#include "storage/proc.h"
#include "utils/memutils.h"
#include "utils/wait_event.h"
}

namespace pgclaim::shmem {

namespace {

// Longest single sleep of a waiter while a worker serves the database (it
// wakes waiters for expired claims and due items), and while none does.
constexpr long kMaxSleepServedMs = 60000;
constexpr long kMaxSleepUnservedMs = 250;

struct Pending {
    int kind;
    int64 key;
    int64 count;
    bool exact;  // count is exact (else "at least": the woken pass the baton on)
    bool on_abort;  // woken if the transaction aborts (else if it commits)
};

// Backend-local state. Plain data only (callbacks read it).
Pending *pending = nullptr;  // in TopMemoryContext
int npending = 0;
int pending_cap = 0;
bool finished_waiting = false;  // counted in shared->finished_waiters

// The baton: this backend was woken for (kind, key) and has not gone back
// to sleep, so it probably took something. If its transaction aborts, or if
// the wake came from a notification whose count was only a lower bound, it
// wakes the next waiter of the key when its transaction ends.
struct Baton {
    bool held;
    bool on_commit;  // pass it on at commit too (the wake's count was a lower bound)
    int kind;
    int64 key;
};
Baton baton = {false, false, 0, 0};

bool exit_registered = false;
TimestampTz last_wait_end = 0;

uint32 bucket_of(Oid db, int kind, int64 key) {
    uint64 h = hash_combine64(hash_uint32(db), (uint64)key * UINT64CONST(0x9E3779B97F4A7C15));
    h = hash_combine64(h, (uint64)kind);
    return (uint32)(h % kBuckets);
}

// Keep the maximum: a slower notifier must not move the stamp back.
void stamp_bucket(uint32 b, TimestampTz now) {
    pg_atomic_uint64 *s = &shared->stamps[b];
    uint64 old = pg_atomic_read_u64(s);
    while ((int64)old < now) {
        if (pg_atomic_compare_exchange_u64(s, &old, (uint64)now)) break;
    }
}

// Wake the longest-waiting waiters of (db, kind, key), at most `count`.
// Caller holds the lock. Plain loads and SetLatch only.
int wake_locked(Oid db, int kind, int64 key, int64 count, bool exact) {
    int woken = 0;
    while (woken < count) {
        Waiter *best = nullptr;
        for (int i = 0; i < shared->nwaiter_slots; ++i) {
            Waiter *w = &shared->waiters[i];
            if (!w->waiting || w->woken || w->db != db || w->kind != kind || w->key != key)
                continue;
            if (best == nullptr || w->seq < best->seq) best = w;
        }
        if (best == nullptr) break;
        best->woken = true;
        best->baton = !exact;
        SetLatch(best->latch);
        ++woken;
    }
    return woken;
}

// Finished notifications matter only while someone waits for them; the
// count is read after the commit became visible, and a waiter counts itself
// before it reads an item's state, so one of the two sees the other.
bool skip_pending(const Pending &p) {
    return p.kind == (int)WaitKind::Finished &&
           pg_atomic_read_u32(&shared->finished_waiters) == 0;
}

// Whether `p` wakes anyone at this end of the transaction.
bool fires(const Pending &p, bool commit) { return p.on_abort != commit && !skip_pending(p); }

void wake_at_transaction_end(bool commit) {
    if (finished_waiting && shared != nullptr) {
        pg_atomic_fetch_sub_u32(&shared->finished_waiters, 1);
        finished_waiting = false;
    }
    if (commit && !baton.on_commit) baton.held = false;
    bool have = npending > 0 || baton.held;
    if (have && shared != nullptr && OidIsValid(MyDatabaseId)) {
        TimestampTz now = GetCurrentTimestamp();
        pg_memory_barrier();
        for (int i = 0; i < npending; ++i)
            if (fires(pending[i], commit))
                stamp_bucket(bucket_of(MyDatabaseId, pending[i].kind, pending[i].key), now);
        if (baton.held) stamp_bucket(bucket_of(MyDatabaseId, baton.kind, baton.key), now);
        pg_memory_barrier();
        if (pg_atomic_read_u32(&shared->nwaiters) > 0) {
            LWLockAcquire(shared->lock, LW_EXCLUSIVE);
            for (int i = 0; i < npending; ++i)
                if (fires(pending[i], commit))
                    wake_locked(MyDatabaseId, pending[i].kind, pending[i].key,
                                pending[i].count, pending[i].exact);
            if (baton.held) wake_locked(MyDatabaseId, baton.kind, baton.key, 1, false);
            LWLockRelease(shared->lock);
        }
        // The database's worker sends one coalesced NOTIFY per queue.
        DbSlot *slot = commit ? notify_slot() : nullptr;
        if (slot != nullptr) {
            bool any = false;
            for (int i = 0; i < npending; ++i)
                if (pending[i].kind == (int)WaitKind::Queue && !pending[i].on_abort) {
                    add_notify_queue(slot, (int32)pending[i].key);
                    any = true;
                }
            if (any) request_notify(slot);
        }
    }
    npending = 0;
    baton.held = false;
}

// Leave the waiter slot; returns whether a waker picked us (and whether it
// asked us to pass the baton on at commit). No raise.
bool unregister(Waiter *w, bool *pass_on = nullptr) {
    LWLockAcquire(shared->lock, LW_EXCLUSIVE);
    bool woken = w->waiting && w->woken;
    if (pass_on) *pass_on = woken && w->baton;
    if (w->waiting) pg_atomic_fetch_sub_u32(&shared->nwaiters, 1);
    w->waiting = false;
    w->woken = false;
    LWLockRelease(shared->lock);
    return woken;
}

void on_exit_unregister(int, Datum) {
    if (shared == nullptr || MyProc == nullptr) return;
    int procno = compat::proc_number(MyProc);
    if (procno < 0 || procno >= shared->nwaiter_slots) return;
    Waiter *w = &shared->waiters[procno];
    if (w->waiting) (void)unregister(w);
}

}  // namespace

void wakeup_at_xact_end(bool commit) { wake_at_transaction_end(commit); }

void wakeup_at_prepare() { npending = 0; }

bool wait_for(WaitKind kind, int64 key, long timeout_ms) {
    if (shared == nullptr || MyProc == nullptr ||
        compat::proc_number(MyProc) >= shared->nwaiter_slots) {
        poll_wait(timeout_ms);
        return false;
    }
    if (!exit_registered) {
        on_shmem_exit(on_exit_unregister, (Datum)0);
        exit_registered = true;
    }
    // Coming back to sleep: whatever woke us was not ours to take.
    if (baton.held && baton.kind == (int)kind && baton.key == key) baton.held = false;

    // Without a worker serving this database nobody wakes us for expired
    // claims or due scheduled items: look again now and then.
    DbSlot *slot = my_db_slot();
    long cap = (slot != nullptr && slot->state == DbState::Running) ? kMaxSleepServedMs
                                                                    : kMaxSleepUnservedMs;
    long ms = timeout_ms < 1 ? 1 : (timeout_ms > cap ? cap : timeout_ms);

    TimestampTz baseline = GetCurrentStatementStartTimestamp();
    if (last_wait_end > baseline) baseline = last_wait_end;
    uint32 b = bucket_of(MyDatabaseId, (int)kind, key);

    Waiter *w = &shared->waiters[compat::proc_number(MyProc)];
    LWLockAcquire(shared->lock, LW_EXCLUSIVE);
    w->db = MyDatabaseId;
    w->kind = (int)kind;
    w->key = key;
    w->latch = MyLatch;
    w->seq = ++shared->next_seq;
    w->woken = false;
    w->waiting = true;
    LWLockRelease(shared->lock);
    pg_atomic_fetch_add_u32(&shared->nwaiters, 1);  // full barrier

    volatile bool woken = false;
    volatile bool pass_on = false;
    if ((int64)pg_atomic_read_u64(&shared->stamps[b]) < baseline &&
        (int64)pg_atomic_read_u64(&shared->wake_all_stamp) < baseline) {
        PG_TRY();
        {
            wait_latch(ms);
        }
        PG_FINALLY();
        {
            bool p = false;
            woken = unregister(w, &p);
            pass_on = p;
        }
        PG_END_TRY();
    } else {
        woken = unregister(w);  // a commit may have been missed: scan again now
    }
    ResetLatch(MyLatch);
    last_wait_end = GetCurrentTimestamp();
    if (woken) {
        baton.held = true;
        baton.on_commit = pass_on;
        baton.kind = (int)kind;
        baton.key = key;
    }
    CHECK_FOR_INTERRUPTS();
    // What the caller does next (claim, grant) is for a client that is
    // still there.
    check_client();
    return woken;
}

namespace {
void add_pending(WaitKind kind, int64 key, int64 count, bool exact, bool on_abort = false) {
    if (shared == nullptr || count <= 0) return;
    for (int i = 0; i < npending; ++i)
        if (pending[i].kind == (int)kind && pending[i].key == key &&
            pending[i].on_abort == on_abort) {
            pending[i].count += count;
            pending[i].exact &= exact;
            return;
        }
    if (npending == pending_cap) {
        int cap = pending_cap == 0 ? 16 : pending_cap * 2;
        pending = pending == nullptr
                      ? (Pending *)MemoryContextAlloc(TopMemoryContext, sizeof(Pending) * cap)
                      : (Pending *)repalloc(pending, sizeof(Pending) * cap);
        pending_cap = cap;
    }
    pending[npending++] = Pending{(int)kind, key, count, exact, on_abort};
}
}  // namespace

void notify_ready(WaitKind kind, int64 key) { add_pending(kind, key, 1, false); }

bool ready_pending(WaitKind kind, int64 key) {
    for (int i = 0; i < npending; ++i)
        if (pending[i].kind == (int)kind && pending[i].key == key && !pending[i].on_abort)
            return true;
    return false;
}

void notify_if_aborted(WaitKind kind, int64 key, int64 count) {
    add_pending(kind, key, count, true, true);
}

void notify_finished(int64 queue_id) {
    add_pending(WaitKind::Finished, queue_id, PG_INT32_MAX, true);
}

void finished_wait_begin() {
    if (shared == nullptr || finished_waiting) return;
    finished_waiting = true;
    pg_atomic_fetch_add_u32(&shared->finished_waiters, 1);  // full barrier
}

void finished_wait_end() {
    if (shared == nullptr || !finished_waiting) return;
    finished_waiting = false;
    pg_atomic_fetch_sub_u32(&shared->finished_waiters, 1);
}

void wake_all_waiters() {
    if (shared == nullptr || !OidIsValid(MyDatabaseId)) return;
    TimestampTz now = GetCurrentTimestamp();
    pg_atomic_uint64 *s = &shared->wake_all_stamp;
    uint64 old = pg_atomic_read_u64(s);
    while ((int64)old < now) {
        if (pg_atomic_compare_exchange_u64(s, &old, (uint64)now)) break;
    }
    pg_memory_barrier();
    if (pg_atomic_read_u32(&shared->nwaiters) == 0) return;
    LWLockAcquire(shared->lock, LW_EXCLUSIVE);
    for (int i = 0; i < shared->nwaiter_slots; ++i) {
        Waiter *w = &shared->waiters[i];
        if (!w->waiting || w->woken || w->db != MyDatabaseId) continue;
        w->woken = true;
        w->baton = false;
        SetLatch(w->latch);
    }
    LWLockRelease(shared->lock);
}

void wake_now(WaitKind kind, int64 key) {
    if (shared == nullptr || !OidIsValid(MyDatabaseId)) return;
    stamp_bucket(bucket_of(MyDatabaseId, (int)kind, key), GetCurrentTimestamp());
    pg_memory_barrier();
    if (pg_atomic_read_u32(&shared->nwaiters) == 0) return;
    LWLockAcquire(shared->lock, LW_EXCLUSIVE);
    (void)wake_locked(MyDatabaseId, (int)kind, key, PG_INT32_MAX, true);
    LWLockRelease(shared->lock);
}

bool queue_quiet_since(int32 queue_id, TimestampTz since) {
    if (shared == nullptr || !OidIsValid(MyDatabaseId)) return false;
    uint32 b = bucket_of(MyDatabaseId, (int)WaitKind::Queue, queue_id);
    pg_memory_barrier();
    return (int64)pg_atomic_read_u64(&shared->stamps[b]) < since &&
           (int64)pg_atomic_read_u64(&shared->wake_all_stamp) < since;
}

void notify_ready(WaitKind kind, int64 key, int64 count) { add_pending(kind, key, count, true); }

}  // namespace pgclaim::shmem
