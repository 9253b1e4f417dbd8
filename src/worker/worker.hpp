// The background workers: one launcher (no database) and one worker per
// database in which the extension is installed. See docs/worker.md.
#pragma once

#include "pg/pg.hpp"
#include "shmem/shared.hpp"

namespace pgclaim::worker {

// database_hook.cpp: the ProcessUtility hook that keeps workers out of the
// way of DROP DATABASE and friends.
void install_database_hook();

// launcher.cpp: register the launcher with the postmaster (from _PG_init).
void register_launcher();

// round.cpp: one round of the database's worker, in one transaction.
// `duties`: promote, expire, wake and purge (else only the extension check
// and the NOTIFYs producers asked for). Returns false when the extension is
// not installed in the database (nothing was done); else sets *next to when
// the duties are due next.
bool run_round(shmem::DbSlot *slot, bool duties, TimestampTz *last_expiry, TimestampTz *next);

}  // namespace pgclaim::worker
