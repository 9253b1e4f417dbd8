// The transactions of a database's worker (src/worker/round.cpp): each
// round is one short transaction with SPI and a snapshot, never left open.
#pragma once

#include "pg/pg.hpp"

namespace pgclaim::pg {

// Starts a transaction, connects SPI, pushes a snapshot and reports
// `activity` in pg_stat_activity.
void worker_txn_begin(const char *activity);
// Pops the snapshot, ends SPI and commits.
void worker_txn_commit();
// Holds the extension's object lock (AccessShare) until the transaction
// ends, so that a concurrent DROP EXTENSION waits; false when the extension
// is not installed.
bool lock_extension();

}  // namespace pgclaim::pg
