// The launcher (connected to no database): reads pg_database (a shared
// catalog) every 10 s or when poked, keeps a registry of connectable,
// non-template databases in shared memory and starts a worker for each
// (RegisterDynamicBackgroundWorker). A worker connects, checks pg_extension
// and exits at once with "absent" when the extension is not there; the
// launcher probes such databases again after a minute, or at once when
// CREATE EXTENSION pg_claim commits anywhere. When more databases are due
// than worker slots are free (pg_claim.max_databases, max_worker_processes),
// they take turns: the one waiting longest starts first, and the worker that
// has run longest hands its slot on after its current round.
#include "worker/launcher.hpp"

#include "pg/databases.hpp"
#include "shmem/shared.hpp"
#include "shmem/registry.hpp"

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

PGDLLEXPORT void pgclaim_launcher_main(Datum arg);
}

namespace pgclaim::worker {

using namespace pgclaim::shmem;

namespace {

constexpr int64 kRescanUs = 10 * USECS_PER_SEC;        // re-read pg_database
constexpr int64 kStartTimeoutUs = 10 * USECS_PER_SEC;  // a worker that never came up
constexpr int64 kRetryStartUs = 5 * USECS_PER_SEC;     // start it again after this
constexpr int64 kSliceUs = 2 * USECS_PER_SEC;  // a worker's turn while databases wait
constexpr int64 kWaitingPollUs = 100 * 1000;   // look again this soon while some wait
constexpr int64 kSharingLogEveryUs = 3600 * USECS_PER_SEC;  // log that databases wait at most this often
constexpr int64 kSlotFreeingUs = 1 * USECS_PER_SEC;  // a yielded slot is usable within this

BackgroundWorkerHandle *handles[kMaxDbSlots];
NameData slot_names[kMaxDbSlots];
bool warned_no_slot = false;
TimestampTz sharing_logged = 0;  // when the launcher last logged that databases wait

void launcher_exit(int, Datum) {
    if (shared == nullptr) return;
    LWLockAcquire(shared->lock, LW_EXCLUSIVE);
    if (shared->launcher_pid == MyProcPid) {
        shared->launcher_pid = 0;
        shared->launcher_latch = nullptr;
    }
    LWLockRelease(shared->lock);
}

void sync_registry(const pg::DatabaseEntry *list, int n, TimestampTz now) {
    LWLockAcquire(shared->lock, LW_EXCLUSIVE);
    for (int i = 0; i < kMaxDbSlots; ++i) {
        DbSlot *s = &shared->dbs[i];
        if (s->db == InvalidOid) continue;
        bool present = false;
        for (int j = 0; j < n && !present; ++j) present = list[j].db == s->db;
        if (!present && s->pid == 0 && s->state != DbState::Starting) {
            s->db = InvalidOid;
            s->state = DbState::Free;
            handles[i] = nullptr;
        }
    }
    bool full = false;
    for (int j = 0; j < n; ++j) {
        int i = find_db_slot_locked(list[j].db);
        if (i < 0) i = add_db_slot_locked(list[j].db, now);
        if (i < 0) {
            full = true;
            continue;
        }
        slot_names[i] = list[j].name;
    }
    LWLockRelease(shared->lock);
    if (full && !warned_no_slot) {
        warned_no_slot = true;
        ereport(WARNING, (errmsg("pg_claim launcher: more than %d databases, some are not served",
                                 kMaxDbSlots)));
    }
}

bool start_worker(int i) {
    BackgroundWorker bgw;
    memset(&bgw, 0, sizeof bgw);
    bgw.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
    bgw.bgw_start_time = BgWorkerStart_RecoveryFinished;
    bgw.bgw_restart_time = BGW_NEVER_RESTART;  // the launcher restarts it
    snprintf(bgw.bgw_library_name, BGW_MAXLEN, "pg_claim");
    snprintf(bgw.bgw_function_name, BGW_MAXLEN, "pgclaim_worker_main");
    snprintf(bgw.bgw_name, BGW_MAXLEN, "pg_claim worker for database %s",
             NameStr(slot_names[i]));
    snprintf(bgw.bgw_type, BGW_MAXLEN, "pg_claim worker");
    bgw.bgw_main_arg = ObjectIdGetDatum(shared->dbs[i].db);
    bgw.bgw_notify_pid = MyProcPid;
    BackgroundWorkerHandle *h = nullptr;
    if (!RegisterDynamicBackgroundWorker(&bgw, &h)) return false;
    handles[i] = h;
    return true;
}

// Due databases beyond the free worker slots (pg_claim.max_databases or
// max_worker_processes) wait their turn, oldest waiting first; for each one
// the worker that has run longest (at least kSliceUs) is asked to hand its
// slot on after its current round.
void request_yields_locked(int waiting, TimestampTz now) {
    for (int i = 0; i < kMaxDbSlots; ++i) {
        const DbSlot *s = &shared->dbs[i];
        if (s->db == InvalidOid) continue;
        // Asked already, or handed its slot on a moment ago (the postmaster
        // may not have freed the slot yet): no other worker need yield.
        if ((s->yield_requested && s->state == DbState::Running) ||
            (s->state == DbState::Idle && s->exit_reason == ExitReason::Yielded &&
             now - s->waiting_since < kSlotFreeingUs))
            --waiting;
    }
    while (waiting-- > 0) {
        int best = -1;
        for (int i = 0; i < kMaxDbSlots; ++i) {
            DbSlot *s = &shared->dbs[i];
            if (s->db == InvalidOid || s->state != DbState::Running || s->yield_requested ||
                now - s->started_at < kSliceUs)
                continue;
            if (best < 0 || s->started_at < shared->dbs[best].started_at) best = i;
        }
        if (best < 0) return;
        shared->dbs[best].yield_requested = true;
        if (shared->dbs[best].latch != nullptr) SetLatch(shared->dbs[best].latch);
    }
}

// Start what is due; returns when to look again.
TimestampTz start_due_workers(TimestampTz now) {
    TimestampTz next = now + kRescanUs;
    int to_start[kMaxDbSlots];
    int due[kMaxDbSlots];
    int nstart = 0, ndue = 0;

    // Workers that never came up (no database any more, no slot...).
    for (int i = 0; i < kMaxDbSlots; ++i) {
        if (shared->dbs[i].state != DbState::Starting) continue;
        pid_t pid;
        bool gone = handles[i] != nullptr
                        ? GetBackgroundWorkerPid(handles[i], &pid) == BGWH_STOPPED
                        : now - shared->dbs[i].started_at > kStartTimeoutUs;
        if (!gone) continue;
        LWLockAcquire(shared->lock, LW_EXCLUSIVE);
        if (shared->dbs[i].state == DbState::Starting && shared->dbs[i].pid == 0) {
            shared->dbs[i].state = DbState::Idle;
            shared->dbs[i].next_start = now + kRetryStartUs;
        }
        LWLockRelease(shared->lock);
        handles[i] = nullptr;
    }

    LWLockAcquire(shared->lock, LW_EXCLUSIVE);
    int active = 0;
    for (int i = 0; i < kMaxDbSlots; ++i) {
        DbState st = shared->dbs[i].state;
        if (shared->dbs[i].db != InvalidOid &&
            (st == DbState::Starting || st == DbState::Running))
            ++active;
    }
    for (int i = 0; i < kMaxDbSlots && guc_worker_enabled; ++i) {
        DbSlot *s = &shared->dbs[i];
        if (s->db == InvalidOid || (s->state != DbState::Idle && s->state != DbState::Absent))
            continue;
        TimestampTz when = s->next_start > s->paused_until ? s->next_start : s->paused_until;
        if (when > now) {
            if (when < next) next = when;
            continue;
        }
        if (NameStr(slot_names[i])[0] == '\0') continue;
        if (s->waiting_since == 0) s->waiting_since = now;
        due[ndue++] = i;
    }
    // Oldest waiting first (insertion sort: ndue is small).
    for (int a = 1; a < ndue; ++a)
        for (int b = a; b > 0 && shared->dbs[due[b]].waiting_since <
                                     shared->dbs[due[b - 1]].waiting_since;
             --b) {
            int t = due[b];
            due[b] = due[b - 1];
            due[b - 1] = t;
        }
    int k = 0;
    for (; k < ndue && active < guc_max_databases; ++k) {
        DbSlot *s = &shared->dbs[due[k]];
        s->state = DbState::Starting;
        s->started_at = now;
        s->yield_requested = false;
        to_start[nstart++] = due[k];
        ++active;
    }
    LWLockRelease(shared->lock);

    int failed = 0;
    bool no_free_slot = false;  // a start found no background worker slot
    for (int j = 0; j < nstart; ++j) {
        int i = to_start[j];
        if (!no_free_slot && start_worker(i)) {
            LWLockAcquire(shared->lock, LW_EXCLUSIVE);
            shared->dbs[i].waiting_since = 0;
            LWLockRelease(shared->lock);
            continue;
        }
        // No free background worker slot: wait for a worker to end.
        no_free_slot = true;
        ++failed;
        LWLockAcquire(shared->lock, LW_EXCLUSIVE);
        shared->dbs[i].state = DbState::Idle;
        shared->dbs[i].next_start = now;
        LWLockRelease(shared->lock);
    }

    int waiting = ndue - k + failed;
    if (waiting > 0) {
        LWLockAcquire(shared->lock, LW_EXCLUSIVE);
        request_yields_locked(waiting, now);
        LWLockRelease(shared->lock);
        if (now - sharing_logged >= kSharingLogEveryUs) {
            sharing_logged = now;
            ereport(LOG,
                    (errmsg("pg_claim launcher: %d database(s) wait for a worker slot, the "
                            "databases take turns",
                            waiting),
                     errhint("Each database with pg_claim needs one of max_worker_processes "
                             "(besides the launcher's) and one of pg_claim.max_databases to be "
                             "served at all times; see claim.worker_status().")));
        }
        // A worker that hands its slot on wakes the launcher as it ends; the
        // postmaster frees the slot a moment later.
        if (now + kWaitingPollUs < next) next = now + kWaitingPollUs;
    }
    return next;
}

}  // namespace

void register_launcher() {
    BackgroundWorker bgw;
    memset(&bgw, 0, sizeof bgw);
    bgw.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
    bgw.bgw_start_time = BgWorkerStart_RecoveryFinished;
    bgw.bgw_restart_time = 1;
    snprintf(bgw.bgw_library_name, BGW_MAXLEN, "pg_claim");
    snprintf(bgw.bgw_function_name, BGW_MAXLEN, "pgclaim_launcher_main");
    snprintf(bgw.bgw_name, BGW_MAXLEN, "pg_claim launcher");
    snprintf(bgw.bgw_type, BGW_MAXLEN, "pg_claim launcher");
    RegisterBackgroundWorker(&bgw);
}

}  // namespace pgclaim::worker

using namespace pgclaim::worker;

void pgclaim_launcher_main(Datum) {
    pqsignal(SIGHUP, SignalHandlerForConfigReload);
    pqsignal(SIGTERM, die);
    BackgroundWorkerUnblockSignals();
    // No database: pg_database is a shared catalog, and a launcher connected
    // to no database never stands in the way of DROP DATABASE.
    BackgroundWorkerInitializeConnection(nullptr, nullptr, 0);

    LWLockAcquire(shared->lock, LW_EXCLUSIVE);
    shared->launcher_pid = MyProcPid;
    shared->launcher_latch = MyLatch;
    LWLockRelease(shared->lock);
    on_shmem_exit(launcher_exit, (Datum)0);
    for (int i = 0; i < kMaxDbSlots; ++i) handles[i] = nullptr;

    MemoryContext cxt = AllocSetContextCreate(TopMemoryContext, "pg_claim launcher",
                                              ALLOCSET_DEFAULT_SIZES);
    TimestampTz next_scan = 0;
    for (;;) {
        CHECK_FOR_INTERRUPTS();
        if (ConfigReloadPending) {
            ConfigReloadPending = false;
            ProcessConfigFile(PGC_SIGHUP);
        }
        TimestampTz now = GetCurrentTimestamp();
        if (now >= next_scan || pg_atomic_exchange_u32(&shared->rescan, 0) != 0) {
            int n = 0;
            pgclaim::pg::DatabaseEntry *list = pgclaim::pg::list_databases(cxt, &n);
            sync_registry(list, n, now);
            MemoryContextReset(cxt);
            next_scan = now + kRescanUs;
        }
        TimestampTz next = start_due_workers(now);
        if (next > next_scan) next = next_scan;
        long ms = (long)((next - GetCurrentTimestamp() + 999) / 1000);
        if (ms < 1) ms = 1;
        (void)WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, ms,
                        PG_WAIT_EXTENSION);
        ResetLatch(MyLatch);
    }
}

