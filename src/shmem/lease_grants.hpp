// Lease grants in flight: the permit count of every lease name with a grant
// not yet committed, across all backends. Grants a holder row cannot show
// yet (the transaction that inserted it is open) are known here, so two
// acquirers asking for different counts never both succeed.
#pragma once

#include "pg/pg.hpp"

namespace pgclaim::shmem {

// Entries of the table: names with a grant in flight at one moment, in all
// databases (pg_claim.max_lease_grants).
extern int guc_max_lease_grants;

Size lease_grants_shmem_size();
void lease_grants_shmem_request();
void lease_grants_shmem_init();

// Announces a grant of `permits` for the name (a 64-bit hash of it) by this
// transaction; false when a grant with another count is in flight in
// another transaction. Raises 53400 when the table is full. Kept until the
// transaction ends, or until the subtransaction that made it rolls back; a
// transaction that holds one cannot be prepared (0A000). Without the
// preload it always succeeds (and only committed holders are compared).
bool lease_grant_begin(uint64 name_hash, int32 permits);
// This transaction's grant did not happen after all.
void lease_grant_cancel(uint64 name_hash);

// The end of a transaction (COMMIT and ABORT end its grants; PRE_PREPARE
// raises 0A000 when it holds one) and of a subtransaction (an abort ends its
// grants). Called by the module's transaction callbacks (src/module.cpp).
void lease_grants_at_xact_end(XactEvent event);
void lease_grants_at_subxact_end(SubXactEvent event);

}  // namespace pgclaim::shmem
