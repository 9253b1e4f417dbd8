// Queues by name: the lookup in claim.queues, directly or through the
// backend's caches of queue definitions (for claimers) and queue ids (for
// producers), which live in caches.hpp.
#pragma once

#include "core/queue_cache.hpp"
#include "pg/pg.hpp"

namespace pgclaim::api {

// A queue's definition (core/queue_cache.hpp).
using QueueInfo = pgclaim::QueueDef;

// Looks the queue up by name (SPI must be connected); 42704 if unknown.
QueueInfo lookup_queue(const char *name);
// The same through the backend's queue cache (core/queue_cache.hpp): for
// the hot path of workers. An entry holds until a queue is altered,
// paused or resumed anywhere (shmem::queue_changes), at most kTtlUs.
QueueInfo lookup_queue_cached(const char *name);
// 42704 for a queue that does not exist.
[[noreturn]] void unknown_queue(const char *name);

// After a claimer's wait for items (claim_next, group_claim): a queue being
// dropped (drop_queue waits for the claimer's transaction and wakes it) ends
// the call with the unknown-queue error; when a queue was dropped anywhere
// meanwhile (*drops, shmem::queue_drops), *q is looked up again, which
// raises when it is gone. SPI must be connected.
void recheck_after_wait(const char *name, QueueInfo *q, uint64 *drops);

// The id of the queue a producer adds items to (enqueue, trigger enqueue),
// 42704 when it does not exist. Call it after claim.items was locked for
// writing (pg::direct::open in Enqueue mode). Cached per backend for as long
// as no queue was dropped anywhere (shmem::queue_drops); looked up by an
// index probe otherwise, and always without the preload. `name` is the text
// datum, `cname` the same as a C string.
int32 producer_queue(void *direct_tables, Datum name, const char *cname);

}  // namespace pgclaim::api
