#include "pg/worker_txn.hpp"

extern "C" {
#include "catalog/pg_extension.h"
#include "commands/extension.h"
#include "pgstat.h"
#include "storage/lmgr.h"
#include "utils/snapmgr.h"
}

namespace pgclaim::pg {

void worker_txn_begin(const char *activity) {
    SetCurrentStatementStartTimestamp();
    StartTransactionCommand();
    SPI_connect();
    PushActiveSnapshot(GetTransactionSnapshot());
    pgstat_report_activity(STATE_RUNNING, activity);
}

void worker_txn_commit() {
    PopActiveSnapshot();
    SPI_finish();
    CommitTransactionCommand();
}

bool lock_extension() {
    Oid ext = get_extension_oid("pg_claim", true);
    if (OidIsValid(ext)) {
        LockDatabaseObject(ExtensionRelationId, ext, 0, AccessShareLock);
        ext = get_extension_oid("pg_claim", true);
    }
    return OidIsValid(ext);
}

}  // namespace pgclaim::pg
