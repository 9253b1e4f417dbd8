// DROP DATABASE (and ALTER DATABASE RENAME / SET TABLESPACE, CREATE DATABASE
// from it as template) need the database to themselves. This ProcessUtility
// hook (in every backend, since the library is preloaded) pauses the
// database's worker first and waits until it is gone; the launcher starts it
// again when the statement failed or finished without removing the
// database. It also pokes the launcher when CREATE EXTENSION pg_claim
// commits, and the worker when an extension is dropped.
#include "worker/database_hook.hpp"

#include "pg/databases.hpp"
#include "pg/pg.hpp"

#include "shmem/shared.hpp"
#include "shmem/epochs.hpp"
#include "shmem/registry.hpp"
#include "shmem/wakeup.hpp"

extern "C" {
#include "commands/dbcommands.h"
#include "nodes/parsenodes.h"
#include "tcop/utility.h"
}

namespace pgclaim::worker {

using namespace pgclaim::shmem;

namespace {

ProcessUtility_hook_type prev_utility = nullptr;

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
    bool wake_all = false;
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
        case T_TransactionStmt:
            // What a prepared transaction made ready is not known when it
            // commits, nor what its claims held when it rolls back: every
            // waiter of the database looks again.
            wake_all = ((TransactionStmt *)stmt)->kind == TRANS_STMT_COMMIT_PREPARED ||
                       ((TransactionStmt *)stmt)->kind == TRANS_STMT_ROLLBACK_PREPARED;
            break;
        default:
            break;
    }
    Oid db = InvalidOid;
    if (dbname != nullptr && shared != nullptr) {
        db = get_database_oid(dbname, true);
        // Only a role that PostgreSQL will let through pauses the worker; the
        // statement of any other fails its permission check as usual.
        bool as_template = nodeTag(stmt) == T_CreatedbStmt;
        if (!OidIsValid(db) || !pg::may_take_over_database(db, as_template) ||
            !pause_database(db))
            db = InvalidOid;
    }
    if (!OidIsValid(db)) {
        if (prev_utility)
            prev_utility(pstmt, queryString, readOnlyTree, context, params, queryEnv, dest, qc);
        else
            standard_ProcessUtility(pstmt, queryString, readOnlyTree, context, params, queryEnv,
                                    dest, qc);
        if (wake_all) {
            // Nor is whether it changed queue settings (alter_queue, pause,
            // resume): every backend reads its queue definitions again.
            queues_changed_at_commit();
            wake_all_waiters();
        }
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
}  // namespace

void install_database_hook() {
    prev_utility = ProcessUtility_hook;
    ProcessUtility_hook = utility_hook;
}

}  // namespace pgclaim::worker
