// The backend's caches, one home for all of them (one instance of each per
// backend process): the queue definitions of claimers and the queue ids of
// producers (core/queue_cache.hpp), the scan hints and promotion schedule
// (core/scan_hint.hpp), the memo of queues found empty; and what the end of
// a transaction forgets of them. Filled and read by queue_lookup.cpp (queues
// by name) and ready_walk.cpp (the walk); this file calls neither.
#pragma once

#include "core/queue_cache.hpp"
#include "core/scan_hint.hpp"
#include "pg/pg.hpp"

namespace pgclaim::api {

// Only touch them inside pg::call_core(): their methods may allocate.
ScanHints &hints();
PromoteSchedule &promote_schedule();
QueueCache &queue_cache();
// Using it arms the abort's forgetting: a queue created by a transaction
// that rolls back is gone.
ProducerQueues &producer_queues();

// The caches describe one installation of the extension: when claim.items
// is not the table they were filled from (DROP and CREATE EXTENSION reuse
// queue ids), they are cleared.
void sync_caches();
// Forgets the queue definitions and producers' queue ids (a queue altered,
// created or dropped by this session).
void forget_queues();

// Forgets the backend's scan hints of the queue, its empty-queue memo and
// the queue's shared frontier, and that frontier once more when the open
// transaction commits (forget_at_commit).
void forget_hints(int32 queue_id);
// Ready items of `priority` were enqueued: should they lie before where
// scans of the queue have reached (a higher priority than the items they
// walked), the queue's positions are forgotten when the transaction
// commits, and the next claim finds them first.
void enqueued_ready(int32 queue_id, int32 priority);

// Empty queues. A claim scan that met no ready item at all (not even a
// claimed one) remembers when it started; for a short while after it ended
// (kEmptyUs), while no transaction has made items of the queue ready since
// (every path that does calls shmem::notify_ready, which stamps the queue at
// commit) and the open transaction has made none ready itself, the next
// scans of this backend are skipped. An empty queue polled
// under a long snapshot then costs no walk over the rows that snapshot keeps
// alive. With the preload only.
bool queue_seen_empty(int32 queue_id, TimestampTz now);
void remember_empty(int32 queue_id, TimestampTz scan_start);
void forget_empty(int32 queue_id);

// The queue's shared frontier is forgotten once more when the open
// transaction commits (what it made ready becomes visible then). Past 16
// queues in a transaction, every queue's frontier; no raise.
void forget_at_commit(int32 queue_id);
// A walk of the open transaction claimed an item of the queue and moved
// hints past it: should the transaction (or a subtransaction) abort, the
// hints and frontiers of the queue are forgotten, so the item is found again
// at once.
void forget_on_abort_of(int32 queue_id);

// The end of a transaction and of a subtransaction, called by the module's
// transaction callbacks (src/module.cpp): an abort (and a PREPARE, which may
// still roll back in another session) forgets what forget_on_abort_of noted
// and the producers' queue ids; a commit (and a PREPARE) forgets the
// frontiers forget_at_commit noted. Nothing until the backend first used a
// cache that needs it. No raise.
void caches_at_xact_end(XactEvent event);
void caches_at_subxact_end(SubXactEvent event);

}  // namespace pgclaim::api
