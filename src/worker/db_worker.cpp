// The worker of one database: registers in its registry slot, then runs a
// loop of short transactions (never idle inside one; see round.cpp) and
// sleeps until the earliest lease end or run_at (at most
// pg_claim.worker_naptime) or until its latch is set. An error in a round
// (a cancel, a full NOTIFY queue, a failing trigger) rolls the round back,
// is logged in one line, and the next round comes after a back-off (1 s,
// doubling up to 30 s, back to none after a round that succeeds).
#include "worker/round.hpp"

#include "shmem/registry.hpp"

extern "C" {
#include "pgstat.h"
#include "tcop/tcopprot.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/condition_variable.h"
#include "storage/ipc.h"
#include "storage/proc.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/wait_event.h"

PGDLLEXPORT void pgclaim_worker_main(Datum arg);
}

namespace pgclaim::worker {

using namespace pgclaim::shmem;

namespace {

constexpr int64 kAbsentRecheckUs = 60 * USECS_PER_SEC;  // probe databases without the extension
constexpr int64 kRestartDelayUs = 1 * USECS_PER_SEC;  // after a worker ended by error/termination
// Shortest time between two rounds that commits asked for (wake-ups of due
// work are not held back by it).
constexpr int64 kMinRoundGapUs = 25 * 1000;
constexpr int64 kFirstBackoffUs = 1 * USECS_PER_SEC;  // after a failed round...
constexpr int64 kMaxBackoffUs = 30 * USECS_PER_SEC;   // ...doubling up to this

int my_slot = -1;

void worker_exit(int, Datum) {  // on_shmem_exit: no raise
    if (shared == nullptr || my_slot < 0) return;
    TimestampTz now = GetCurrentTimestamp();
    LWLockAcquire(shared->lock, LW_EXCLUSIVE);
    DbSlot *s = &shared->dbs[my_slot];
    if (s->pid == MyProcPid) {
        s->pid = 0;
        s->latch = nullptr;
        switch (s->exit_reason) {
            case ExitReason::Absent:
                s->state = DbState::Absent;
                s->next_start = now + kAbsentRecheckUs;
                break;
            case ExitReason::Disabled:
            case ExitReason::Paused:
                s->state = DbState::Idle;
                s->next_start = now;
                break;
            case ExitReason::Yielded:  // its turn is over: due again, behind those waiting
                s->state = DbState::Idle;
                s->next_start = now;
                s->waiting_since = now;
                break;
            default:
                s->state = DbState::Idle;
                s->next_start = now + kRestartDelayUs;
                break;
        }
    }
    Latch *l = shared->launcher_latch;
    LWLockRelease(shared->lock);
    if (l != nullptr) SetLatch(l);
}

[[noreturn]] void worker_leave(ExitReason why) {
    LWLockAcquire(shared->lock, LW_EXCLUSIVE);
    shared->dbs[my_slot].exit_reason = why;
    LWLockRelease(shared->lock);
    proc_exit(0);
    pg_unreachable();
}
// Claim the registry slot of `db`; false when another worker has it or the
// database is paused.
bool take_slot(Oid db) {
    TimestampTz now = GetCurrentTimestamp();
    LWLockAcquire(shared->lock, LW_EXCLUSIVE);
    int i = find_db_slot_locked(db);
    bool ok = i >= 0 && shared->dbs[i].pid == 0 && shared->dbs[i].paused_until <= now;
    if (ok) {
        my_slot = i;
        DbSlot *s = &shared->dbs[i];
        s->pid = MyProcPid;
        s->latch = MyLatch;
        s->state = DbState::Running;
        s->exit_reason = ExitReason::Error;
        s->waiting_since = 0;
        s->yield_requested = false;
    } else if (i >= 0 && shared->dbs[i].pid == 0) {
        shared->dbs[i].state = DbState::Idle;  // paused: the launcher tries later
    }
    LWLockRelease(shared->lock);
    return ok;
}

// The loop's state lives in statics: a longjmp out of a round keeps it.
MemoryContext loop_cxt = nullptr;
MemoryContext error_cxt = nullptr;
DbSlot *slot = nullptr;
TimestampTz last_expiry = DT_NOBEGIN;
TimestampTz next_due = 0;
TimestampTz last_round = 0;
TimestampTz retry_at = 0;      // after a failed round: no round before this
int64 backoff_us = 0;          // the last back-off (0 after a round that succeeded)
int64 duty_rounds = 0;         // rounds with duties in this process
TimestampTz round_expiry = 0;  // last_expiry when the current round began

// One pass of the loop: checks, at most one round, then the sleep.
void loop_once() {
    CHECK_FOR_INTERRUPTS();
    if (ConfigReloadPending) {
        ConfigReloadPending = false;
        ProcessConfigFile(PGC_SIGHUP);
    }
    if (!guc_worker_enabled) worker_leave(ExitReason::Disabled);
    TimestampTz now = GetCurrentTimestamp();
    if (slot->paused_until > now) worker_leave(ExitReason::Paused);
    // Other databases wait for a worker slot: hand this one on, once this
    // worker has done its duties at least once.
    if (slot->yield_requested && duty_rounds > 0) worker_leave(ExitReason::Yielded);

    if (retry_at > now) {  // back-off after a failed round
        long ms = (long)((retry_at - now + 999) / 1000);
        (void)WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, ms,
                        PG_WAIT_EXTENSION);
        ResetLatch(MyLatch);
        return;
    }

    // Commits poke the worker (NOTIFY, wake-ups): under a steady stream
    // of them, a round at most every kMinRoundGapUs, not one per commit.
    if (last_round != 0 && now - last_round < kMinRoundGapUs && next_due > now) {
        long gap_ms = (long)((kMinRoundGapUs - (now - last_round) + 999) / 1000);
        (void)WaitLatch(MyLatch, WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, gap_ms, PG_WAIT_EXTENSION);
        CHECK_FOR_INTERRUPTS();
        now = GetCurrentTimestamp();
    }
    last_round = now;

    // A backend scheduled an item before the round planned (registry.hpp).
    TimestampTz asked = take_duties_at(slot);
    if (asked > 0 && asked < next_due) next_due = asked;
    bool duties = now >= next_due;
    round_expiry = last_expiry;
    TimestampTz expiry = last_expiry;
    TimestampTz due = next_due;
    MemoryContext old = MemoryContextSwitchTo(loop_cxt);
    bool present = run_round(slot, duties, &expiry, &due);
    MemoryContextSwitchTo(old);
    MemoryContextReset(loop_cxt);
    last_expiry = expiry;
    next_due = due;
    backoff_us = 0;
    if (duties) ++duty_rounds;
    if (!present) {
        ereport(DEBUG1, (errmsg("pg_claim worker: extension pg_claim is not installed in "
                                "this database, exiting")));
        worker_leave(ExitReason::Absent);
    }

    now = GetCurrentTimestamp();
    TimestampTz cap = now + (int64)guc_worker_naptime_ms * 1000;
    if (next_due > cap) next_due = cap;
    if (next_due <= now) return;
    long ms = (long)((next_due - now + 999) / 1000);
    (void)WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, ms,
                    PG_WAIT_EXTENSION);
    ResetLatch(MyLatch);
}

// The error handler of the loop, as PostgreSQL's own auxiliary processes
// do it: roll back, clean up, log one line, back off. The round's work is
// done again by a later round (expiry looks again from where the last
// committed round left it).
void recover_from_error() {
    HOLD_INTERRUPTS();
    MemoryContextSwitchTo(error_cxt);
    ErrorData *e = CopyErrorData();
    FlushErrorState();
    // Also outside a transaction (the loop's own checks and waits).
    LWLockReleaseAll();
    ConditionVariableCancelSleep();
    pgstat_report_wait_end();
    AbortCurrentTransaction();
    MemoryContextSwitchTo(error_cxt);
    MemoryContextReset(loop_cxt);
    pgstat_report_activity(STATE_IDLE, nullptr);
    // Where the last committed round left expiry (the NOTIFYs may have
    // failed after the duties committed).
    last_expiry = slot->last_expiry != 0 ? slot->last_expiry : round_expiry;
    next_due = 0;
    backoff_us = backoff_us == 0 ? kFirstBackoffUs
                                 : (backoff_us * 2 > kMaxBackoffUs ? kMaxBackoffUs : backoff_us * 2);
    retry_at = GetCurrentTimestamp() + backoff_us;
    slot->errors++;
    ereport(LOG, (errcode(e->sqlerrcode),
                  errmsg("pg_claim worker: a round failed and was rolled back, next try in %d ms: "
                         "%s",
                         (int)(backoff_us / 1000), e->message)));
    MemoryContextSwitchTo(TopMemoryContext);
    MemoryContextReset(error_cxt);
    RESUME_INTERRUPTS();
}

}  // namespace

}  // namespace pgclaim::worker

using namespace pgclaim::worker;

void pgclaim_worker_main(Datum arg) {
    Oid db = DatumGetObjectId(arg);
    pqsignal(SIGHUP, SignalHandlerForConfigReload);
    pqsignal(SIGTERM, die);
    BackgroundWorkerUnblockSignals();
    BackgroundWorkerInitializeConnectionByOid(db, InvalidOid, 0);
    am_worker = true;

    if (!take_slot(db)) proc_exit(0);
    on_shmem_exit(worker_exit, (Datum)0);

    // Our own writes (promotions, expiry) are re-derived after a crash.
    SetConfigOption("synchronous_commit", "off", PGC_SUSET, PGC_S_OVERRIDE);
    pgstat_report_appname("pg_claim worker");

    loop_cxt = AllocSetContextCreate(TopMemoryContext, "pg_claim worker loop",
                                     ALLOCSET_DEFAULT_SIZES);
    error_cxt = AllocSetContextCreate(TopMemoryContext, "pg_claim worker error",
                                      ALLOCSET_SMALL_SIZES);
    slot = &shared->dbs[my_slot];
    if (slot->last_expiry != 0) last_expiry = slot->last_expiry;
    for (;;) {
        PG_TRY();
        {
            loop_once();
        }
        PG_CATCH();
        {
            recover_from_error();
        }
        PG_END_TRY();
    }
}

