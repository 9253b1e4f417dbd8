// The background workers: one launcher (no database) and one worker per
// database in which the extension is installed. See docs/worker.md.
//
// Launcher: reads pg_database (a shared catalog) every 10 s or when poked,
// keeps a registry of connectable, non-template databases in shared memory
// and starts a worker for each (RegisterDynamicBackgroundWorker). A worker
// connects, checks pg_extension and exits at once with "absent" when the
// extension is not there; the launcher probes such databases again after a
// minute, or at once when CREATE EXTENSION pg_claim commits anywhere.
//
// Worker: a loop of short transactions (never idle inside one): promote due
// scheduled items, kill items whose last allowed lease expired, wake waiters
// of queues whose claims expired, send one coalesced NOTIFY per queue that
// producers made ready, then sleep until the earliest lease end or run_at
// (at most pg_claim.worker_naptime) or until its latch is set.
//
// DROP DATABASE (and ALTER DATABASE RENAME / SET TABLESPACE, CREATE DATABASE
// from it as template) need the database to themselves. A ProcessUtility hook
// (every backend, since the library is preloaded) pauses the database's
// worker first and waits until it is gone; the launcher starts it again when
// the statement failed or finished without removing the database.
#include "worker/shared.hpp"
#include "worker/wakeup.hpp"

extern "C" {
#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/twophase.h"
#include "catalog/pg_database.h"
#include "catalog/namespace.h"
#include "catalog/pg_extension.h"
#include "common/hashfn.h"
#include "commands/dbcommands.h"
#include "commands/extension.h"
#include "nodes/parsenodes.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/lmgr.h"
#include "storage/proc.h"
#include "storage/shmem.h"
#include "tcop/utility.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/wait_event.h"

PGDLLEXPORT void pgclaim_launcher_main(Datum arg);
PG_FUNCTION_INFO_V1(pgclaim_worker_status);
PGDLLEXPORT void pgclaim_worker_main(Datum arg);
}

namespace pgclaim::worker {

bool guc_worker_enabled = true;
int guc_worker_naptime_ms = 1000;
int guc_max_databases = 16;
bool guc_notify = true;
int guc_lease_purge_after_s = 3600;

namespace {

constexpr int64 kRescanUs = 10 * USECS_PER_SEC;       // launcher: re-read pg_database
constexpr int64 kAbsentRecheckUs = 60 * USECS_PER_SEC;  // probe databases without the extension
constexpr int64 kRestartDelayUs = 1 * USECS_PER_SEC;  // after a worker ended by error/termination
constexpr int64 kStartTimeoutUs = 10 * USECS_PER_SEC;
constexpr int64 kPauseUs = 60 * USECS_PER_SEC;

shmem_request_hook_type prev_shmem_request = nullptr;
shmem_startup_hook_type prev_shmem_startup = nullptr;
ProcessUtility_hook_type prev_utility = nullptr;

int waiter_slots() { return MaxBackends + NUM_AUXILIARY_PROCS + max_prepared_xacts; }

Size shmem_size() {
    return add_size(offsetof(Shared, waiters), mul_size(sizeof(Waiter), waiter_slots()));
}

void shmem_request() {
    if (prev_shmem_request) prev_shmem_request();
    RequestAddinShmemSpace(shmem_size());
    RequestNamedLWLockTranche("pg_claim", 1);
}

void shmem_startup() {
    if (prev_shmem_startup) prev_shmem_startup();
    LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
    bool found;
    shared = (Shared *)ShmemInitStruct("pg_claim", shmem_size(), &found);
    if (!found) {
        memset((void *)shared, 0, shmem_size());
        shared->lock = &(GetNamedLWLockTranche("pg_claim"))->lock;
        pg_atomic_init_u32(&shared->rescan, 0);
        pg_atomic_init_u64(&shared->queue_drops, 1);
        pg_atomic_init_u32(&shared->nwaiters, 0);
        for (int i = 0; i < kBuckets; ++i) pg_atomic_init_u64(&shared->stamps[i], 0);
        for (int i = 0; i < kMaxDbSlots; ++i) {
            SpinLockInit(&shared->dbs[i].mutex);
            pg_atomic_init_u32(&shared->dbs[i].notify_pending, 0);
        }
        for (int i = 0; i < kFrontierSlots; ++i) SpinLockInit(&shared->frontiers[i].mutex);
        shared->nwaiter_slots = waiter_slots();
    }
    LWLockRelease(AddinShmemInitLock);
}

// --- the registry ----------------------------------------------------------

// Caller holds the lock.
int find_slot_locked(Oid db) {
    for (int i = 0; i < kMaxDbSlots; ++i)
        if (shared->dbs[i].db == db) return i;
    return -1;
}

int add_slot_locked(Oid db, TimestampTz now) {
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
        s->nnotify = 0;
        s->notify_all = false;
        pg_atomic_write_u32(&s->notify_pending, 0);
        s->cycles = s->promoted = s->expired = s->killed = s->notifies = s->purged = 0;
        return i;
    }
    return -1;
}

// --- DROP DATABASE and friends ----------------------------------------------

// Keep the worker away from `db` for a while and wait (at most 5 s) until it
// has left. Returns whether anything was paused.
bool pause_database(Oid db) {
    if (!OidIsValid(db)) return false;
    TimestampTz now = GetCurrentTimestamp();
    LWLockAcquire(shared->lock, LW_EXCLUSIVE);
    int i = find_slot_locked(db);
    if (i < 0) i = add_slot_locked(db, now);
    Latch *l = nullptr;
    if (i >= 0) {
        shared->dbs[i].paused_until = now + kPauseUs;
        l = shared->dbs[i].latch;
    }
    LWLockRelease(shared->lock);
    if (i < 0) return false;
    if (l != nullptr) SetLatch(l);
    for (int n = 0; n < 500; ++n) {
        if (shared->dbs[i].pid == 0 || shared->dbs[i].db != db) break;
        (void)WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, 10,
                        PG_WAIT_EXTENSION);
        ResetLatch(MyLatch);
        CHECK_FOR_INTERRUPTS();
    }
    return true;
}

void unpause_database(Oid db) {  // no raise
    LWLockAcquire(shared->lock, LW_EXCLUSIVE);
    int i = find_slot_locked(db);
    if (i >= 0) {
        shared->dbs[i].paused_until = 0;
        shared->dbs[i].next_start = 0;
    }
    LWLockRelease(shared->lock);
    poke_launcher();
}

const char *option_string(List *options, const char *name) {
    ListCell *lc;
    foreach (lc, options) {
        DefElem *d = (DefElem *)lfirst(lc);
        if (strcmp(d->defname, name) == 0 && d->arg != nullptr && IsA(d->arg, String))
            return strVal(d->arg);
    }
    return nullptr;
}

bool has_option(List *options, const char *name) {
    ListCell *lc;
    foreach (lc, options) {
        if (strcmp(((DefElem *)lfirst(lc))->defname, name) == 0) return true;
    }
    return false;
}

void utility_hook(PlannedStmt *pstmt, const char *queryString, bool readOnlyTree,
                  ProcessUtilityContext context, ParamListInfo params,
                  QueryEnvironment *queryEnv, DestReceiver *dest, QueryCompletion *qc) {
    Node *stmt = pstmt->utilityStmt;
    const char *dbname = nullptr;
    bool is_drop = false;
    switch (nodeTag(stmt)) {
        case T_DropdbStmt:
            dbname = ((DropdbStmt *)stmt)->dbname;
            is_drop = true;
            break;
        case T_RenameStmt:
            if (((RenameStmt *)stmt)->renameType == OBJECT_DATABASE)
                dbname = ((RenameStmt *)stmt)->subname;
            break;
        case T_AlterDatabaseStmt:
            if (has_option(((AlterDatabaseStmt *)stmt)->options, "tablespace"))
                dbname = ((AlterDatabaseStmt *)stmt)->dbname;
            break;
        case T_CreatedbStmt:
            dbname = option_string(((CreatedbStmt *)stmt)->options, "template");
            break;
        case T_CreateExtensionStmt:
            if (strcmp(((CreateExtensionStmt *)stmt)->extname, "pg_claim") == 0)
                at_commit_poke(true, false);
            break;
        case T_DropStmt:
            if (((DropStmt *)stmt)->removeType == OBJECT_EXTENSION) at_commit_poke(false, true);
            break;
        default:
            break;
    }
    Oid db = InvalidOid;
    if (dbname != nullptr && shared != nullptr) {
        db = get_database_oid(dbname, true);
        if (!pause_database(db)) db = InvalidOid;
    }
    if (!OidIsValid(db)) {
        if (prev_utility)
            prev_utility(pstmt, queryString, readOnlyTree, context, params, queryEnv, dest, qc);
        else
            standard_ProcessUtility(pstmt, queryString, readOnlyTree, context, params, queryEnv,
                                    dest, qc);
        return;
    }
    PG_TRY();
    {
        if (prev_utility)
            prev_utility(pstmt, queryString, readOnlyTree, context, params, queryEnv, dest, qc);
        else
            standard_ProcessUtility(pstmt, queryString, readOnlyTree, context, params, queryEnv,
                                    dest, qc);
    }
    PG_CATCH();
    {
        unpause_database(db);
        PG_RE_THROW();
    }
    PG_END_TRY();
    // A dropped database stays paused until the launcher forgets it.
    if (!is_drop) unpause_database(db);
}

// --- the per-database worker -----------------------------------------------

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

using pg::Stmt;

Stmt s_promote = {
    "WITH due AS ("
    "  SELECT x.id FROM claim.queues q CROSS JOIN LATERAL ("
    "    SELECT i.id FROM claim.items i WHERE i.queue_id = q.queue_id AND i.state = 'r'"
    "      AND i.run_at IS NOT NULL AND i.run_at <= $1"
    "    ORDER BY i.run_at LIMIT 1000 FOR UPDATE SKIP LOCKED) x"
    "), u AS ("
    "  UPDATE claim.items i SET run_at = NULL FROM due WHERE i.id = due.id RETURNING i.queue_id"
    ") SELECT queue_id, count(*)::int8 FROM u GROUP BY queue_id",
    1, {TIMESTAMPTZOID}, nullptr};

Stmt s_dead_candidates = {
    "SELECT c.item_id FROM claim.claims c JOIN claim.queues q ON q.queue_id = c.queue_id "
    "WHERE c.lease_until <= $1 AND c.attempt >= q.max_attempts LIMIT 1000",
    1, {TIMESTAMPTZOID}, nullptr};

// As claims.cpp's s_kill_expired, for items of any queue.
Stmt s_kill = {
    "WITH c AS (DELETE FROM claim.claims c USING claim.queues q"
    "           WHERE c.item_id = ANY ($1) AND q.queue_id = c.queue_id"
    "             AND c.lease_until <= $2 AND c.attempt >= q.max_attempts"
    "           RETURNING c.item_id, c.attempt) "
    "UPDATE claim.items i SET state = 'd', died_at = $2, failures = c.attempt,"
    "  last_error = 'lease expired on attempt ' || c.attempt || ', the last allowed' "
    "FROM c WHERE i.id = c.item_id AND i.state = 'r'",
    2, {INT8ARRAYOID, TIMESTAMPTZOID}, nullptr};

// Claims that expired since the last look: their items are claimable again.
Stmt s_expired = {
    "SELECT queue_id, count(*)::int8 FROM claim.claims "
    "WHERE lease_until <= $1 AND lease_until > $2 GROUP BY queue_id",
    2, {TIMESTAMPTZOID, TIMESTAMPTZOID}, nullptr};

Stmt s_next = {
    "SELECT (SELECT min(lease_until) FROM claim.claims WHERE lease_until > $1),"
    "       (SELECT min(x.run_at) FROM claim.queues q CROSS JOIN LATERAL ("
    "          SELECT i.run_at FROM claim.items i WHERE i.queue_id = q.queue_id"
    "            AND i.state = 'r' AND i.run_at IS NOT NULL ORDER BY i.run_at LIMIT 1) x)",
    1, {TIMESTAMPTZOID}, nullptr};

Stmt s_notify = {
    "SELECT pg_catalog.pg_notify('pg_claim', q.name) FROM claim.queues q "
    "WHERE $2 OR q.queue_id = ANY ($1)",
    2, {INT4ARRAYOID, BOOLOID}, nullptr};

// Leases (sql/install/20_leases.sql): holders that expired since the last
// look free their slots; the next expiry bounds the sleep.
Stmt s_lease_expired = {
    "SELECT name, count(*)::int8 FROM claim.lease_holders "
    "WHERE expires_at <= $1 AND expires_at > $2 GROUP BY name",
    2, {TIMESTAMPTZOID, TIMESTAMPTZOID}, nullptr};
Stmt s_lease_next = {"SELECT min(expires_at) FROM claim.lease_holders WHERE expires_at > $1", 1,
                     {TIMESTAMPTZOID}, nullptr};

// Holdings released or expired more than $1 ago (never a live one), at most
// kPurgeBatch per round, as claim.lease_purge(). A holder granted, renewed
// or released meanwhile is a new row version with another ctid: the DELETE
// re-checks the join on it and leaves it.
constexpr int64 kPurgeBatch = 10000;
Stmt s_lease_purge = {
    "WITH cand AS ("
    "  SELECT h.ctid FROM claim.lease_holders h"
    "  WHERE h.expires_at < $1"
    "     OR (h.acquired_at < $1 AND EXISTS ("
    "          SELECT 1 FROM claim.lease_released r"
    "          WHERE r.name = h.name AND r.slot = h.slot AND r.token = h.token))"
    "  LIMIT $2"
    "), d AS ("
    "  DELETE FROM claim.lease_holders h USING cand WHERE h.ctid = cand.ctid"
    "  RETURNING h.name, h.slot"
    "), r AS ("
    "  DELETE FROM claim.lease_released r USING d WHERE r.name = d.name AND r.slot = d.slot"
    ") SELECT count(*)::int8 FROM d",
    2, {TIMESTAMPTZOID, INT8OID}, nullptr};

// When the last purge round ran (this worker process).
TimestampTz last_purge = 0;

bool have_leases() {
    Oid nsp = get_namespace_oid("claim", true);
    return OidIsValid(nsp) && OidIsValid(get_relname_relid("lease_holders", nsp));
}

struct QueueCount {
    int32 queue_id;
    int64 count;
};

// Adds (queue, n) to a list of at most `cap` entries.
void add_count(QueueCount *list, int *n, int cap, int32 queue_id, int64 count) {
    for (int i = 0; i < *n; ++i)
        if (list[i].queue_id == queue_id) {
            list[i].count += count;
            return;
        }
    if (*n < cap) list[(*n)++] = QueueCount{queue_id, count};
}

// One transaction. `full`: do the duties (else only the extension check and
// the NOTIFYs producers asked for). Returns when the duties are due next.
// Shortest time between two rounds that commits asked for (wake-ups of due
// work are not held back by it).
constexpr int64 kMinRoundGapUs = 25 * 1000;

TimestampTz cycle(bool full, TimestampTz *last_expiry, TimestampTz next_due) {
    DbSlot *slot = &shared->dbs[my_slot];
    SetCurrentStatementStartTimestamp();
    StartTransactionCommand();
    SPI_connect();
    PushActiveSnapshot(GetTransactionSnapshot());
    pgstat_report_activity(STATE_RUNNING, full ? "pg_claim worker: expiry, schedules, wake-ups"
                                               : "pg_claim worker: notify");

    // The extension may be dropped concurrently: hold its object lock while
    // working, and look again once we have it.
    Oid ext = get_extension_oid("pg_claim", true);
    if (OidIsValid(ext)) {
        LockDatabaseObject(ExtensionRelationId, ext, 0, AccessShareLock);
        ext = get_extension_oid("pg_claim", true);
    }
    if (!OidIsValid(ext)) {
        PopActiveSnapshot();
        SPI_finish();
        CommitTransactionCommand();
        pgstat_report_activity(STATE_IDLE, nullptr);
        ereport(DEBUG1, (errmsg("pg_claim worker: extension pg_claim is not installed in this "
                             "database, exiting")));
        worker_leave(ExitReason::Absent);
    }

    const int cap = 1024;
    QueueCount *ready = (QueueCount *)palloc(sizeof(QueueCount) * cap);
    int nready = 0;
    TimestampTz now = GetCurrentTimestamp();
    TimestampTz next = next_due;

    if (full) {
        next = now + (int64)guc_worker_naptime_ms * 1000;
        // (a) scheduled items that are due become ready.
        Datum v1[1] = {TimestampTzGetDatum(now)};
        uint64 rows = pg::run(s_promote, v1, nullptr);
        int64 promoted = 0;
        for (uint64 r = 0; r < rows; ++r) {
            int64 c = pg::col_int64(r, 2);
            add_count(ready, &nready, cap, pg::col_int32(r, 1), c);
            promoted += c;
            if (c >= 1000) next = now;  // more are due: go on at once
        }
        // (b) items whose last allowed lease expired are dead.
        rows = pg::run(s_dead_candidates, v1, nullptr);
        int64 killed = 0;
        if (rows > 0) {
            int64 *ids = (int64 *)palloc(sizeof(int64) * rows);
            int nids = 0;
            for (uint64 r = 0; r < rows; ++r) ids[nids++] = pg::col_int64(r, 1);
            Datum *d = (Datum *)palloc(sizeof(Datum) * nids);
            int nd = 0;
            for (int i = 0; i < nids; ++i) {
                if (pg::lock_item(ids[i], false))
                    d[nd++] = Int64GetDatum(ids[i]);
                else
                    next = now + 10000;  // busy: look again soon
            }
            if (nd > 0) {
                Datum v2[2] = {PointerGetDatum(construct_array(d, nd, INT8OID, 8, true,
                                                               TYPALIGN_DOUBLE)),
                               TimestampTzGetDatum(now)};
                killed = (int64)pg::run(s_kill, v2, nullptr);
                for (int i = 0; i < nd; ++i) pg::unlock_item(DatumGetInt64(d[i]));
            }
            if (rows >= 1000) next = now;
        }
        //     the other expired claims: their items are claimable again.
        Datum v3[2] = {TimestampTzGetDatum(now), TimestampTzGetDatum(*last_expiry)};
        rows = pg::run(s_expired, v3, nullptr);
        int64 expired = 0;
        for (uint64 r = 0; r < rows; ++r) {
            int64 c = pg::col_int64(r, 2);
            add_count(ready, &nready, cap, pg::col_int32(r, 1), c);
            expired += c;
        }
        // (c) lease holders that expired: wake waiters of those names (the
        //     key is the lease's wake key: a 64-bit hash of the name's bytes).
        if (have_leases()) {
            rows = pg::run(s_lease_expired, v3, nullptr);
            for (uint64 r = 0; r < rows; ++r) {
                bool isnull;
                text *t = DatumGetTextPP(pg::col(r, 1, &isnull));
                uint64 key = hash_bytes_extended((const unsigned char *)VARDATA_ANY(t),
                                                 (int)VARSIZE_ANY_EXHDR(t), 0);
                notify_ready(WaitKind::Lease, (int64)key, pg::col_int64(r, 2));
            }
            pg::run(s_lease_next, v1, nullptr);
            bool isnull;
            Datum t = pg::col(0, 1, &isnull);
            if (!isnull && DatumGetTimestampTz(t) < next) next = DatumGetTimestampTz(t);
            // (d) rows of holdings that ended more than lease_purge_after
            //     ago, looked for once a minute (or once per
            //     lease_purge_after when that is shorter, at least 1 s).
            if (guc_lease_purge_after_s >= 0) {
                int64 after_us = (int64)guc_lease_purge_after_s * USECS_PER_SEC;
                int64 every_us = after_us < 60 * USECS_PER_SEC ? after_us : 60 * USECS_PER_SEC;
                if (every_us < USECS_PER_SEC) every_us = USECS_PER_SEC;
                if (now - last_purge >= every_us) {
                    Datum pv[2] = {TimestampTzGetDatum(now - after_us),
                                   Int64GetDatum(kPurgeBatch)};
                    pg::run(s_lease_purge, pv, nullptr);
                    int64 purged = pg::col_int64(0, 1);
                    slot->purged += purged;
                    // A full batch: more are waiting, go on at the next round.
                    last_purge = purged >= kPurgeBatch ? 0 : now;
                    if (purged >= kPurgeBatch) next = now;
                }
            }
        }
        *last_expiry = now;
        // (d) when to look again.
        pg::run(s_next, v1, nullptr);
        for (int c = 1; c <= 2; ++c) {
            bool isnull;
            Datum t = pg::col(0, c, &isnull);
            if (!isnull && DatumGetTimestampTz(t) < next) next = DatumGetTimestampTz(t);
        }
        slot->cycles++;
        slot->promoted += promoted;
        slot->expired += expired;
        slot->killed += killed;
    }

    // Waiters are woken when this transaction commits (wakeup.cpp).
    for (int i = 0; i < nready; ++i)
        notify_ready(WaitKind::Queue, ready[i].queue_id, ready[i].count);

    // One NOTIFY per queue made ready, by producers or by us.
    if (guc_notify) {
        pg_atomic_write_u32(&slot->notify_pending, 0);
        int32 *qids = (int32 *)palloc(sizeof(int32) * (kNotifyQueues + cap));
        int nq = 0;
        SpinLockAcquire(&slot->mutex);
        bool all = slot->notify_all;
        for (int i = 0; i < slot->nnotify; ++i) qids[nq++] = slot->notify_queues[i];
        slot->nnotify = 0;
        slot->notify_all = false;
        SpinLockRelease(&slot->mutex);
        for (int i = 0; i < nready; ++i) qids[nq++] = ready[i].queue_id;
        if (all || nq > 0) {
            Datum *d = (Datum *)palloc(sizeof(Datum) * (nq > 0 ? nq : 1));
            for (int i = 0; i < nq; ++i) d[i] = Int32GetDatum(qids[i]);
            Datum v[2] = {PointerGetDatum(construct_array(d, nq, INT4OID, 4, true, TYPALIGN_INT)),
                          BoolGetDatum(all)};
            slot->notifies += pg::run(s_notify, v, nullptr);
        }
    }

    PopActiveSnapshot();
    SPI_finish();
    CommitTransactionCommand();
    pgstat_report_stat(false);
    pgstat_report_activity(STATE_IDLE, nullptr);
    return next;
}

// --- the launcher ----------------------------------------------------------

struct DbEntry {
    Oid db;
    NameData name;
};

BackgroundWorkerHandle *handles[kMaxDbSlots];
NameData slot_names[kMaxDbSlots];
bool warned_no_slot = false;

void launcher_exit(int, Datum) {
    if (shared == nullptr) return;
    LWLockAcquire(shared->lock, LW_EXCLUSIVE);
    if (shared->launcher_pid == MyProcPid) {
        shared->launcher_pid = 0;
        shared->launcher_latch = nullptr;
    }
    LWLockRelease(shared->lock);
}

// Connectable, valid, non-template databases, in `cxt`.
DbEntry *list_databases(MemoryContext cxt, int *n) {
    int cap = 64, count = 0;
    DbEntry *list = (DbEntry *)MemoryContextAlloc(cxt, sizeof(DbEntry) * cap);
    SetCurrentStatementStartTimestamp();
    StartTransactionCommand();
    (void)GetTransactionSnapshot();
    pgstat_report_activity(STATE_RUNNING, "pg_claim launcher: reading pg_database");
    Relation rel = table_open(DatabaseRelationId, AccessShareLock);
    TableScanDesc scan = table_beginscan_catalog(rel, 0, nullptr);
    HeapTuple tup;
    while (HeapTupleIsValid(tup = heap_getnext(scan, ForwardScanDirection))) {
        Form_pg_database f = (Form_pg_database)GETSTRUCT(tup);
        if (!f->datallowconn || f->datistemplate || database_is_invalid_form(f)) continue;
        if (count == cap) {
            cap *= 2;
            list = (DbEntry *)repalloc(list, sizeof(DbEntry) * cap);
        }
        list[count].db = f->oid;
        list[count].name = f->datname;
        ++count;
    }
    table_endscan(scan);
    table_close(rel, AccessShareLock);
    CommitTransactionCommand();
    pgstat_report_activity(STATE_IDLE, nullptr);
    *n = count;
    return list;
}

void reconcile(const DbEntry *list, int n, TimestampTz now) {
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
        int i = find_slot_locked(list[j].db);
        if (i < 0) i = add_slot_locked(list[j].db, now);
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

// Start what is due; returns when to look again.
TimestampTz manage(TimestampTz now) {
    TimestampTz next = now + kRescanUs;
    int to_start[kMaxDbSlots];
    int nstart = 0;

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
            shared->dbs[i].next_start = now + 5 * USECS_PER_SEC;
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
        TimestampTz due = s->next_start > s->paused_until ? s->next_start : s->paused_until;
        if (due > now) {
            if (due < next) next = due;
            continue;
        }
        if (active >= guc_max_databases || NameStr(slot_names[i])[0] == '\0') continue;
        s->state = DbState::Starting;
        s->started_at = now;
        to_start[nstart++] = i;
        ++active;
    }
    LWLockRelease(shared->lock);

    for (int k = 0; k < nstart; ++k) {
        int i = to_start[k];
        if (start_worker(i)) continue;
        ereport(WARNING,
                (errmsg("pg_claim launcher: could not start a worker for database \"%s\"",
                        NameStr(slot_names[i])),
                 errhint("Raise max_worker_processes.")));
        LWLockAcquire(shared->lock, LW_EXCLUSIVE);
        shared->dbs[i].state = DbState::Idle;
        shared->dbs[i].next_start = now + kRescanUs;
        LWLockRelease(shared->lock);
    }
    return next;
}

}  // namespace

void poke_launcher() {  // no raise
    if (shared == nullptr) return;
    // The database this backend is in may have got the extension just now.
    if (OidIsValid(MyDatabaseId)) {
        LWLockAcquire(shared->lock, LW_EXCLUSIVE);
        int i = find_slot_locked(MyDatabaseId);
        if (i >= 0 && shared->dbs[i].state == DbState::Absent) shared->dbs[i].next_start = 0;
        LWLockRelease(shared->lock);
    }
    pg_atomic_write_u32(&shared->rescan, 1);
    Latch *l = shared->launcher_latch;
    if (l != nullptr) SetLatch(l);
}

void define_gucs() {
    DefineCustomBoolVariable(
        "pg_claim.worker_enabled", "Runs the pg_claim background workers.",
        "Without them waits are still woken at commit, but expiry and scheduled items are "
        "applied lazily by claimers.",
        &guc_worker_enabled, true, PGC_SIGHUP, 0, nullptr, nullptr, nullptr);
    DefineCustomIntVariable(
        "pg_claim.worker_naptime", "Longest sleep of a pg_claim worker between its rounds.",
        "The worker also wakes at the earliest lease end or run_at it knows of.",
        &guc_worker_naptime_ms, 1000, 10, 3600 * 1000, PGC_SIGHUP, GUC_UNIT_MS, nullptr, nullptr,
        nullptr);
    DefineCustomIntVariable(
        "pg_claim.max_databases", "How many databases pg_claim workers serve at once.",
        "Each served database uses one background worker slot (max_worker_processes).",
        &guc_max_databases, 16, 0, kMaxDbSlots, PGC_SIGHUP, 0, nullptr, nullptr, nullptr);
    DefineCustomIntVariable(
        "pg_claim.lease_purge_after",
        "Rows of lease holdings that ended longer ago than this are deleted by the worker.",
        "Checked once a minute, 10000 rows at a time; -1 keeps them (claim.lease_purge() "
        "deletes them on demand).",
        &guc_lease_purge_after_s, 3600, -1, 366 * 24 * 3600, PGC_SIGHUP, GUC_UNIT_S, nullptr,
        nullptr, nullptr);
    DefineCustomBoolVariable(
        "pg_claim.notify", "The worker sends NOTIFY pg_claim, '<queue>' when items become ready.",
        "One coalesced notification per queue, from the worker's own transaction.", &guc_notify,
        true, PGC_SIGHUP, 0, nullptr, nullptr, nullptr);
}

void init_preloaded() {
    prev_shmem_request = shmem_request_hook;
    shmem_request_hook = shmem_request;
    prev_shmem_startup = shmem_startup_hook;
    shmem_startup_hook = shmem_startup;
    prev_utility = ProcessUtility_hook;
    ProcessUtility_hook = utility_hook;

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
            DbEntry *list = list_databases(cxt, &n);
            reconcile(list, n, now);
            MemoryContextReset(cxt);
            next_scan = now + kRescanUs;
        }
        TimestampTz next = manage(now);
        if (next > next_scan) next = next_scan;
        long ms = (long)((next - GetCurrentTimestamp() + 999) / 1000);
        if (ms < 1) ms = 1;
        (void)WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, ms,
                        PG_WAIT_EXTENSION);
        ResetLatch(MyLatch);
    }
}

void pgclaim_worker_main(Datum arg) {
    Oid db = DatumGetObjectId(arg);
    pqsignal(SIGHUP, SignalHandlerForConfigReload);
    pqsignal(SIGTERM, die);
    BackgroundWorkerUnblockSignals();
    BackgroundWorkerInitializeConnectionByOid(db, InvalidOid, 0);
    am_worker = true;

    TimestampTz now = GetCurrentTimestamp();
    LWLockAcquire(shared->lock, LW_EXCLUSIVE);
    int i = find_slot_locked(db);
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
    if (!ok) proc_exit(0);
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
        now = GetCurrentTimestamp();
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
        next_due = cycle(now >= next_due, &last_expiry, next_due);
        MemoryContextSwitchTo(old);
        MemoryContextReset(loop);

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

// claim.worker_status(): one row per database the launcher knows of.
//   (datid oid, pid int, state text, rounds bigint, promoted bigint,
//    expired bigint, killed bigint, notifies bigint, purged bigint)
// Empty without the preload. Reads the registry under the lock, copies it,
// and builds the rows after releasing it.
extern "C" Datum pgclaim_worker_status(PG_FUNCTION_ARGS) {
    InitMaterializedSRF(fcinfo, 0);
    ReturnSetInfo *rsinfo = (ReturnSetInfo *)fcinfo->resultinfo;
    if (shared == nullptr) return (Datum)0;
    DbSlot *copy = (DbSlot *)palloc(sizeof(DbSlot) * kMaxDbSlots);
    LWLockAcquire(shared->lock, LW_SHARED);
    memcpy((void *)copy, (const void *)shared->dbs, sizeof(DbSlot) * kMaxDbSlots);
    LWLockRelease(shared->lock);
    static const char *const names[] = {"free", "idle", "starting", "running", "absent"};
    for (int i = 0; i < kMaxDbSlots; ++i) {
        const DbSlot &s = copy[i];
        if (s.db == InvalidOid) continue;
        Datum v[9];
        bool nulls[9] = {false, s.pid == 0, false, false, false, false, false, false, false};
        v[0] = ObjectIdGetDatum(s.db);
        v[1] = Int32GetDatum(s.pid);
        v[2] = CStringGetTextDatum(names[(int)s.state]);
        v[3] = Int64GetDatum((int64)s.cycles);
        v[4] = Int64GetDatum((int64)s.promoted);
        v[5] = Int64GetDatum((int64)s.expired);
        v[6] = Int64GetDatum((int64)s.killed);
        v[7] = Int64GetDatum((int64)s.notifies);
        v[8] = Int64GetDatum((int64)s.purged);
        tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, v, nulls);
    }
    return (Datum)0;
}
