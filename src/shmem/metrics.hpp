// Per-queue counters since server start, in shared memory (claim.metrics()).
//
// A table of pg_claim.max_metric_queues slots, each keyed by (database, queue id)
// and holding one 64-bit atomic per counter. A slot is taken, lock-free, by
// the first count for its queue (compare-and-swap of its key, linear
// probing); counting is then one atomic add, with no lock and no table
// write. When every slot is taken, queues without a slot are not counted:
// claim.metrics() shows NULL counters for them, and metrics_untracked()
// counts the counts that were dropped. drop_queue clears its queue's slot
// (keeping it for that queue id).
//
// Counts happen at the call, not at commit: a call whose transaction rolls
// back has still counted. Without shared_preload_libraries nothing is
// counted (there is no shared memory) and every counter reads NULL.
//
// None of these functions raises, except that counting may look up the
// OID of claim.items once per backend (the catalog cache of pg/direct).
#pragma once

#include "pg/pg.hpp"

namespace pgclaim::shmem {

enum class Metric : int {
    Enqueued = 0,  // items added (enqueue, enqueue_batch, enqueue_trigger)
    Claimed,       // items handed out (claim_next, group_claim)
    Completed,     // items completed
    Failed,        // items failed by claim.fail (retried or dead)
    Dead,          // items that became dead (fail on the last attempt, last lease expired)
    Expired,       // claims whose lease ran out (seen by the worker, or killed at the last attempt)
    Cancelled,     // items cancelled by claim.cancel (waiting children included)
};
inline constexpr int kMetricCount = 7;
extern int guc_max_metric_queues;  // slots (pg_claim.max_metric_queues)

// Adds n to the queue's counter in this database.
void count(int32 queue_id, Metric m, int64 n = 1);
// Items made dead because their last allowed lease ran out: dead and expired.
inline void count_killed(int32 queue_id, int64 n) {
    count(queue_id, Metric::Dead, n);
    count(queue_id, Metric::Expired, n);
}
// Zeroes the queue's counters (drop_queue).
void metrics_forget(int32 queue_id);
// The queue's counters in this database; false when it has no slot.
bool metrics_read(int32 queue_id, int64 out[kMetricCount]);
// Backends now waiting in claim_next/group_claim for items of the queue.
int metrics_waiters(int32 queue_id);
// Counts dropped because the table was full.
int64 metrics_untracked();

// services.cpp calls these: size and initialisation (under AddinShmemInitLock).
Size metrics_shmem_size();
void metrics_shmem_init();

}  // namespace pgclaim::shmem
