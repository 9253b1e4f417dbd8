// The statements of the duties that claimers (src/api) and the worker
// (src/worker) both carry out: scheduled items that are due become ready,
// and items whose lease expired on their last allowed attempt become dead.
// Written once here, below both. SPI must be connected.
#pragma once

#include "pg/pg.hpp"

namespace pgclaim::pg {

// The most items one statement promotes or kills; a caller that got a full
// batch knows more may be waiting.
#define PGCLAIM_DUTY_BATCH 1000
inline constexpr int kDutyBatch = PGCLAIM_DUTY_BATCH;

// Due scheduled items of one queue become ready (at most kDutyBatch).
// Returns how many did; *next is the earliest run_at still pending, or
// DT_NOEND when none is.
int64 promote_queue(int32 queue_id, TimestampTz now, TimestampTz *next);

// Due scheduled items of every queue become ready (at most kDutyBatch per
// queue). Leaves one row per queue (queue_id int4, count int8) in
// SPI_tuptable and returns the number of rows.
uint64 promote_all_queues(TimestampTz now);

// Items under a claim whose lease ended on the last allowed attempt (at
// most kDutyBatch). Leaves their ids (int8) in SPI_tuptable and returns
// the number of rows.
uint64 find_dead(TimestampTz now);

// The items `ids`, whose claims' leases ended by `now` on the last allowed
// attempt, become dead; then their item locks, which the caller holds, are
// released. Returns how many died; with `queues` (room for n), the queue
// of each one that died.
int64 kill_dead(const int64 *ids, int n, TimestampTz now, int32 *queues = nullptr);

}  // namespace pgclaim::pg
