// PostgreSQL major-version differences of the executor and catalog APIs that
// the server layer uses, each behind one small named helper, so that the
// callers (src/pg, and through it src/api) read the same on every supported
// major (15, 17, 18).
// Header-only (inline functions).
#pragma once

#include "pg/pg.hpp"

extern "C" {
#include "access/genam.h"
#include "catalog/pg_database.h"
#include "utils/acl.h"
#include "executor/executor.h"
#include "nodes/execnodes.h"
}

namespace pgclaim::pg::compat {

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
