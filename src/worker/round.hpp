// One round of a database's worker (see round.cpp), run by db_worker.cpp.
#pragma once

#include "pg/pg.hpp"
#include "shmem/shared.hpp"

namespace pgclaim::worker {

// One round, in one transaction. `duties`: promote, expire, wake and purge
// (else only the extension check and the NOTIFYs producers asked for).
// Returns false when the extension is not installed in the database
// (nothing was done); else sets *next to when the duties are due next.
bool run_round(shmem::DbSlot *slot, bool duties, TimestampTz *last_expiry, TimestampTz *next);

}  // namespace pgclaim::worker
