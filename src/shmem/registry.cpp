// The registry of databases in shared memory: which databases the launcher
// knows, the state of their workers, and the pauses that DROP DATABASE and
// friends ask for; see registry.hpp.
#include "shmem/registry.hpp"


extern "C" {
#include "storage/latch.h"
#include "utils/wait_event.h"
}

namespace pgclaim::shmem {

namespace {
constexpr int64 kPauseUs = 60 * USECS_PER_SEC;  // how long a pause holds at most
constexpr int kPauseWaitRounds = 500;           // waits for the worker to leave...
constexpr long kPauseWaitMs = 10;               // ...of this long each (5 s in all)
// Pokes asked for by the open transaction (at_commit_poke).
bool pending_launcher_poke = false;
bool pending_worker_poke = false;
}  // namespace

int find_db_slot_locked(Oid db) {
    for (int i = 0; i < kMaxDbSlots; ++i)
        if (shared->dbs[i].db == db) return i;
    return -1;
}

int add_db_slot_locked(Oid db, TimestampTz now) {
    for (int i = 0; i < kMaxDbSlots; ++i) {
        DbSlot *s = &shared->dbs[i];
        if (s->db != InvalidOid) continue;
        s->db = db;
        s->state = DbState::Idle;
        s->pid = 0;
        s->latch = nullptr;
        s->exit_reason = ExitReason::Error;
        s->next_start = now;
        s->started_at = 0;
        s->paused_until = 0;
        s->waiting_since = 0;
        s->yield_requested = false;
        s->errors = 0;
        s->last_expiry = 0;
        s->nnotify = 0;
        s->notify_all = false;
        pg_atomic_write_u32(&s->notify_pending, 0);
        pg_atomic_write_u64(&s->duties_at, 0);
        s->cycles = s->promoted = s->expired = s->killed = s->notifies = s->purged = 0;
        return i;
    }
    return -1;
}

DbSlot *my_db_slot() {
    static int cached = -1;
    if (shared == nullptr || !OidIsValid(MyDatabaseId)) return nullptr;
    if (cached >= 0 && shared->dbs[cached].db == MyDatabaseId) return &shared->dbs[cached];
    for (int i = 0; i < kMaxDbSlots; ++i)
        if (shared->dbs[i].db == MyDatabaseId) {
            cached = i;
            return &shared->dbs[i];
        }
    return nullptr;
}

bool pause_database(Oid db) {
    if (!OidIsValid(db)) return false;
    TimestampTz now = GetCurrentTimestamp();
    LWLockAcquire(shared->lock, LW_EXCLUSIVE);
    int i = find_db_slot_locked(db);
    if (i < 0) i = add_db_slot_locked(db, now);
    Latch *l = nullptr;
    if (i >= 0) {
        shared->dbs[i].paused_until = now + kPauseUs;
        l = shared->dbs[i].latch;
    }
    LWLockRelease(shared->lock);
    if (i < 0) return false;
    if (l != nullptr) SetLatch(l);
    for (int n = 0; n < kPauseWaitRounds; ++n) {
        if (shared->dbs[i].pid == 0 || shared->dbs[i].db != db) break;
        (void)WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, kPauseWaitMs,
                        PG_WAIT_EXTENSION);
        ResetLatch(MyLatch);
        CHECK_FOR_INTERRUPTS();
    }
    return true;
}

void unpause_database(Oid db) {
    LWLockAcquire(shared->lock, LW_EXCLUSIVE);
    int i = find_db_slot_locked(db);
    if (i >= 0) {
        shared->dbs[i].paused_until = 0;
        shared->dbs[i].next_start = 0;
    }
    LWLockRelease(shared->lock);
    poke_launcher();
}

void poke_launcher() {
    if (shared == nullptr) return;
    // The database this backend is in may have got the extension just now.
    if (OidIsValid(MyDatabaseId)) {
        LWLockAcquire(shared->lock, LW_EXCLUSIVE);
        int i = find_db_slot_locked(MyDatabaseId);
        if (i >= 0 && shared->dbs[i].state == DbState::Absent) shared->dbs[i].next_start = 0;
        LWLockRelease(shared->lock);
    }
    pg_atomic_write_u32(&shared->rescan, 1);
    Latch *l = shared->launcher_latch;
    if (l != nullptr) SetLatch(l);
}

void request_duties_at(TimestampTz at) {
    if (shared == nullptr || at <= 0) return;
    DbSlot *slot = my_db_slot();
    if (slot == nullptr) return;
    uint64 want = (uint64)at;
    uint64 cur = pg_atomic_read_u64(&slot->duties_at);
    while (cur == 0 || want < cur) {
        if (pg_atomic_compare_exchange_u64(&slot->duties_at, &cur, want)) {
            Latch *l = slot->latch;
            if (l != nullptr) SetLatch(l);
            break;
        }
    }
}

TimestampTz take_duties_at(DbSlot *slot) {
    return (TimestampTz)pg_atomic_exchange_u64(&slot->duties_at, 0);
}

void at_commit_poke(bool launcher, bool worker) {
    pending_launcher_poke |= launcher;
    pending_worker_poke |= worker;
}

void pokes_at_xact_end(bool commit) {
    if (commit && shared != nullptr) {
        if (pending_launcher_poke) poke_launcher();
        if (pending_worker_poke) {
            DbSlot *slot = my_db_slot();
            Latch *l = slot ? slot->latch : nullptr;
            if (l != nullptr) SetLatch(l);
        }
    }
    pending_launcher_poke = pending_worker_poke = false;
}

}  // namespace pgclaim::shmem
