// The worker of one database: registers in its registry slot, then runs a
// loop of short transactions (never idle inside one; see round.cpp) and
// sleeps until the earliest lease end or run_at (at most
// pg_claim.worker_naptime) or until its latch is set.
#include "worker/worker.hpp"

extern "C" {
#include "pgstat.h"
#include "tcop/tcopprot.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
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
    } else if (i >= 0 && shared->dbs[i].pid == 0) {
        shared->dbs[i].state = DbState::Idle;  // paused: the launcher tries later
    }
    LWLockRelease(shared->lock);
    return ok;
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

    MemoryContext loop = AllocSetContextCreate(TopMemoryContext, "pg_claim worker loop",
                                               ALLOCSET_DEFAULT_SIZES);
    TimestampTz last_expiry = DT_NOBEGIN;
    TimestampTz next_due = 0;
    TimestampTz last_round = 0;
    DbSlot *slot = &shared->dbs[my_slot];
    for (;;) {
        CHECK_FOR_INTERRUPTS();
        if (ConfigReloadPending) {
            ConfigReloadPending = false;
            ProcessConfigFile(PGC_SIGHUP);
        }
        if (!guc_worker_enabled) worker_leave(ExitReason::Disabled);
        TimestampTz now = GetCurrentTimestamp();
        if (slot->paused_until > now) worker_leave(ExitReason::Paused);

        // Commits poke the worker (NOTIFY, wake-ups): under a steady stream
        // of them, a round at most every kMinRoundGapUs, not one per commit.
        if (last_round != 0 && now - last_round < kMinRoundGapUs && next_due > now) {
            long gap_ms = (long)((kMinRoundGapUs - (now - last_round) + 999) / 1000);
            (void)WaitLatch(MyLatch, WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, gap_ms, PG_WAIT_EXTENSION);
            CHECK_FOR_INTERRUPTS();
            now = GetCurrentTimestamp();
        }
        last_round = now;

        MemoryContext old = MemoryContextSwitchTo(loop);
        bool present = run_round(slot, now >= next_due, &last_expiry, &next_due);
        MemoryContextSwitchTo(old);
        MemoryContextReset(loop);
        if (!present) {
            ereport(DEBUG1, (errmsg("pg_claim worker: extension pg_claim is not installed in "
                                    "this database, exiting")));
            worker_leave(ExitReason::Absent);
        }

        now = GetCurrentTimestamp();
        TimestampTz cap = now + (int64)guc_worker_naptime_ms * 1000;
        if (next_due > cap) next_due = cap;
        if (next_due <= now) continue;
        long ms = (long)((next_due - now + 999) / 1000);
        (void)WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, ms,
                        PG_WAIT_EXTENSION);
        ResetLatch(MyLatch);
    }
}
