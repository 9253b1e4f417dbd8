// PostgreSQL major-version differences of the executor and catalog APIs that
// the server layer uses, each behind one small named helper, so that the
// callers (src/pg, and through it src/api) read the same on every supported
// major (15, 17, 18).
// Header-only (inline functions).
#pragma once

#include "pg/pg.hpp"

extern "C" {
#include "access/genam.h"
#include "access/tableam.h"
#include "catalog/pg_database.h"
#include "utils/acl.h"
#include "executor/executor.h"
#include "nodes/execnodes.h"
#include "storage/proc.h"
}

namespace pgclaim::pg::compat {

// This backend's number in the proc array (MyProc's index). 17 replaced
// PGPROC.pgprocno with the global MyProcNumber.
inline int my_procno() {
#if PG_VERSION_NUM >= 170000
    return MyProcNumber;
#else
    return MyProc->pgprocno;
#endif
}

// Index entries for a tuple just inserted into resultRelInfo's relation (no
// update, no ON CONFLICT arbiters). 16 added the trailing "onlySummarizing"
// argument, which is false for a plain insert.
inline List *insert_index_entries(ResultRelInfo *rri, TupleTableSlot *slot, EState *estate) {
#if PG_VERSION_NUM >= 160000
    return ExecInsertIndexTuples(rri, slot, estate, false, false, nullptr, NIL, false);
#else
    return ExecInsertIndexTuples(rri, slot, estate, false, false, nullptr, NIL);
#endif
}

// Replaces the row at `otid` by the row in `slot` (the table AM's update,
// waiting for a concurrent writer of the row to end). *index_entries: the new
// version needs index entries (not a HOT update); *only_summarizing: only in
// summarizing indexes (16 and later tell that apart; 15 reports a bool).
inline TM_Result update_tuple(Relation rel, ItemPointer otid, TupleTableSlot *slot, CommandId cid,
                              Snapshot snap, TM_FailureData *tmfd, bool *index_entries,
                              bool *only_summarizing) {
    LockTupleMode lockmode;
#if PG_VERSION_NUM >= 160000
    TU_UpdateIndexes ui = TU_None;
    TM_Result r = table_tuple_update(rel, otid, slot, cid, snap, InvalidSnapshot, true, tmfd,
                                     &lockmode, &ui);
    *index_entries = ui != TU_None;
    *only_summarizing = ui == TU_Summarizing;
#else
    bool ui = false;
    TM_Result r = table_tuple_update(rel, otid, slot, cid, snap, InvalidSnapshot, true, tmfd,
                                     &lockmode, &ui);
    *index_entries = ui;
    *only_summarizing = false;
#endif
    return r;
}

// Index entries for the new version of an updated row (update_tuple said it
// needs them).
inline List *update_index_entries(ResultRelInfo *rri, TupleTableSlot *slot, EState *estate,
                                  bool only_summarizing) {
#if PG_VERSION_NUM >= 160000
    return ExecInsertIndexTuples(rri, slot, estate, true, false, nullptr, NIL, only_summarizing);
#else
    (void)only_summarizing;
    return ExecInsertIndexTuples(rri, slot, estate, true, false, nullptr, NIL);
#endif
}

// An index scan with nkeys scan keys and no ORDER BY operators. 18 added the
// IndexScanInstrumentation argument (null: no EXPLAIN ANALYZE counters).
inline IndexScanDesc begin_index_scan(Relation heap, Relation index, Snapshot snapshot,
                                      int nkeys) {
#if PG_VERSION_NUM >= 180000
    return index_beginscan(heap, index, snapshot, nullptr, nkeys, 0);
#else
    return index_beginscan(heap, index, snapshot, nkeys, 0);
#endif
}

// Does `role` own the database? 16 replaced the per-catalog owner checks
// with object_ownercheck.
inline bool owns_database(Oid db, Oid role) {
#if PG_VERSION_NUM >= 160000
    return object_ownercheck(DatabaseRelationId, db, role);
#else
    return pg_database_ownercheck(db, role);
#endif
}

}  // namespace pgclaim::pg::compat
