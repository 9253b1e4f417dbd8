// Waiting for work and waking waiters (src/worker owns the implementation).
//
// Callers in src/api use only these functions. Without the preload (no
// shared memory) wait_for() naps briefly and notify_ready() does nothing;
// with it, waiters sleep on their latch and are woken after a commit that
// made work ready.
#pragma once

#include "pg/pg.hpp"

namespace pgclaim::worker {

// What a waiter waits for: items of a queue, or a slot of a named lease.
enum class WaitKind : int { Queue = 1, Lease = 2 };

// Sleep until woken for (kind, key) or `timeout_ms` passes, whichever comes
// first; returns early on a latch set. Handles interrupts
// (CHECK_FOR_INTERRUPTS), so a cancel or statement_timeout ends the wait.
void wait_for(WaitKind kind, int64 key, long timeout_ms);

// Record that (kind, key) has work ready once the current transaction
// commits (nothing happens if it aborts).
void notify_ready(WaitKind kind, int64 key);

}  // namespace pgclaim::worker
