// The backend's scan hints and promotion schedule (core/scan_hint.hpp; one
// instance per backend process), and waiting for a queue's items, which
// sends the next scan back to the head.
#pragma once

#include "core/scan_hint.hpp"
#include "pg/pg.hpp"

namespace pgclaim::api {

// Only touch them inside pg::call_core(): their methods may allocate.
ScanHints &hints();
PromoteSchedule &promote_schedule();

// Forgets the backend's scan hints of the queue, its empty-queue memo
// (ready_walk.hpp) and the queue's shared frontier.
void forget_hints(int32 queue_id);

// Wait until items of the queue may have become ready or `deadline` passes;
// false once it has passed (nothing was waited for then). When a producer's
// commit or the worker woke us, the backend's scan hints of the queue are
// forgotten: the next scan starts at the head. A `wake_at` before the
// deadline (a rate limit's next allowance; 0: none) ends the wait then.
bool wait_for_items(int32 queue_id, TimestampTz deadline, TimestampTz wake_at = 0);

}  // namespace pgclaim::api
