// max_active without a lock: claims not yet committed are counted in
// shared memory, per queue, from the moment a claimer reserves them until
// its transaction ends. A claimer reserves first, then counts the committed
// live claims: a transaction that commits in between is counted twice at
// worst (in the reservations read before, and among the live claims), never
// missed; and of two claimers reserving at once, the later one sees the
// earlier one's reservation. So the limit is never overshot.
#pragma once

#include "pg/pg.hpp"

namespace pgclaim::shmem {

// Entries: queues with claims in flight under max_active at one moment, in
// all databases (pg_claim.max_claim_slots).
extern int guc_max_claim_slots;

Size claim_slots_shmem_size();
void claim_slots_shmem_request();
void claim_slots_shmem_init();

// Reserves `n` claims of the queue for this transaction; returns the
// reservations of other transactions at that moment, or -1 when there is no
// shared memory (the caller then counts under the queue's lock instead).
// Raises 53400 when the table is full. A reservation is kept until the
// transaction ends or the subtransaction that made it rolls back; a
// transaction that holds one cannot be prepared (0A000).
// `install`: pg::direct::items_relid().
int64 claim_slots_reserve(Oid install, int32 queue_id, int n);
// Gives back `n` of this transaction's reservations (claims not made).
void claim_slots_give_back(Oid install, int32 queue_id, int n);

// The end of a transaction (COMMIT and ABORT give its reservations back;
// PRE_PREPARE raises 0A000 when it holds one) and of a subtransaction (an
// abort gives back its reservations). Called by the module's transaction
// callbacks (src/module.cpp).
void claim_slots_at_xact_end(XactEvent event);
void claim_slots_at_subxact_end(SubXactEvent event);

}  // namespace pgclaim::shmem
