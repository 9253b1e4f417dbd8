// Concurrency limits of queues (claim.create_queue max_active, group_limit):
// what a claimer checks, under which lock. SPI must be connected.
#pragma once

#include "pg/pg.hpp"

namespace pgclaim::pg {

// Claimers of a queue with max_active take this transaction-level lock
// (waiting for each other) before they count, and keep it until they
// commit: a claim counted by nobody cannot slip in between.
void lock_queue_claims(int32 queue_id);
// A claimer that claimed nothing under the lock gives it back at once, so a
// claimer waiting at the limit does not hold the others up.
void unlock_queue_claims(int32 queue_id);

// Live claims of the queue at `now`, in the latest committed state.
int64 live_claims(int32 queue_id, TimestampTz now);

// An upper bound of the rows claim.claims holds (of every queue, live or
// not): its pages times the most tuples a page holds. No SQL: a limit far
// from binding needs no count.
int64 claims_upper_bound();

// Unfinished items of the group enqueued before `id`, counted up to `limit`.
int64 earlier_in_group(int32 queue_id, Datum group_key, int64 id, int64 limit);

// The settings a completion needs: the queue's retention, and whether it
// has a concurrency limit (its completions then wake waiting claimers).
struct FinishSettings {
    int64 retain_us;
    bool limited;
};
FinishSettings finish_settings(int32 queue_id);

}  // namespace pgclaim::pg
