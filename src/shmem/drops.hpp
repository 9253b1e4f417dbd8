// Queues being dropped. drop_queue takes a lock on claim.items that waits
// for every open transaction that claimed, including claimers sleeping in
// claim_next(wait) or group_claim(wait). Before it waits, it announces the
// queue here and wakes the database's waiters: a waiter of that queue then
// ends at once with the unknown-queue error (its transaction ends, the drop
// goes on) instead of sleeping out its wait. The announcement goes when the
// dropping transaction ends.
//
// None of these functions raises; without the preload they do nothing.
#pragma once

#include "pg/pg.hpp"

namespace pgclaim::shmem {

Size drops_shmem_size();
void drops_shmem_init();

// Announce that this transaction drops the queue (items relation `install`,
// pg::direct::items_relid()); the waiters of the database are woken.
void drop_announce(Oid install, int32 queue_id);
// Is the queue being dropped by another transaction?
bool drop_pending(Oid install, int32 queue_id);

// The end of a transaction (COMMIT, ABORT, PREPARE): its announcements go.
// Called by the module's transaction callbacks (src/module.cpp).
void drops_at_xact_end(XactEvent event);

}  // namespace pgclaim::shmem
