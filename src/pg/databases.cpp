// The databases of the cluster: see databases.hpp.
#include "pg/databases.hpp"

#include "pg/compat.hpp"

extern "C" {
#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/tableam.h"
#include "catalog/pg_authid.h"
#include "catalog/pg_database.h"
#include "pgstat.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"
}

namespace pgclaim::pg {

DatabaseEntry *list_databases(MemoryContext cxt, int *n) {
    int cap = 64, count = 0;
    DatabaseEntry *list = (DatabaseEntry *)MemoryContextAlloc(cxt, sizeof(DatabaseEntry) * cap);
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
            list = (DatabaseEntry *)repalloc(list, sizeof(DatabaseEntry) * cap);
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

bool may_take_over_database(Oid db, bool as_template) {
    Oid me = GetUserId();
    if (superuser_arg(me)) return true;
    if (!as_template) return compat::owns_database(db, me);
    bool createdb = false;
    HeapTuple t = SearchSysCache1(AUTHOID, ObjectIdGetDatum(me));
    if (HeapTupleIsValid(t)) {
        createdb = ((Form_pg_authid)GETSTRUCT(t))->rolcreatedb;
        ReleaseSysCache(t);
    }
    if (!createdb) return false;
    bool is_template = false;
    t = SearchSysCache1(DATABASEOID, ObjectIdGetDatum(db));
    if (HeapTupleIsValid(t)) {
        is_template = ((Form_pg_database)GETSTRUCT(t))->datistemplate;
        ReleaseSysCache(t);
    }
    return is_template || compat::owns_database(db, me);
}
}  // namespace pgclaim::pg
