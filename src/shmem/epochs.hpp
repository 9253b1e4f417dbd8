// Cluster-wide counters that tell backends when their caches of queues are
// stale. Both are 0 without the preload (nothing may be cached then, or
// only for QueueCache::kTtlUs). None of these functions raises.
#pragma once

#include "pg/pg.hpp"

namespace pgclaim::shmem {

// Producers cache queue ids (api::producer_queue) for as long as no queue
// was dropped: drop_queue calls queue_dropped() before it deletes anything,
// holding the lock that excludes producers.
uint64 queue_drops();
void queue_dropped();

// Queue settings changed (alter_queue, pause, resume): backends' cached
// queue definitions are dropped once this transaction commits.
void queues_changed_at_commit();
uint64 queue_changes();

// For the module's transaction callbacks (src/module.cpp): the end of the
// transaction (COMMIT or ABORT) moves queue_changes when the transaction asked
// for it.
void epochs_at_xact_end(bool commit);

}  // namespace pgclaim::shmem
