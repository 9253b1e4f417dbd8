// claim.worker_status(): one row per database the launcher knows of.
//   (datid oid, pid int, state text, rounds bigint, promoted bigint,
//    expired bigint, killed bigint, notifies bigint, purged bigint)
// Empty without the preload. Reads the registry under the lock, copies it,
// and builds the rows after releasing it.
#include "pg/pg.hpp"
#include "shmem/shared.hpp"

using namespace pgclaim::shmem;

PGCLAIM_FUNCTION(pgclaim_worker_status) {
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
        // A database that is due and has no worker slot: "waiting".
        bool waiting = s.state == DbState::Idle && s.waiting_since != 0;
        v[2] = CStringGetTextDatum(waiting ? "waiting" : names[(int)s.state]);
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