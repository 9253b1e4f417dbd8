// Waiting for work and waking waiters.
//
// Callers in src/api use only these functions.
//
// With shared_preload_libraries = 'pg_claim': wait_for() registers the
// backend as a waiter of (database, kind, key) in shared memory and sleeps on
// its latch; notify_ready() remembers (kind, key) and, when the transaction
// commits, wakes the longest-waiting waiters of that key, one per item made
// ready (no thundering herd). A woken waiter that finds nothing sleeps again.
// A woken waiter whose transaction aborts passes the wake on to the next
// waiter; so does one that commits, when the count it was woken for was only
// a lower bound (see notify_ready). Nothing is woken when a producer aborts;
// a claimer that aborts wakes as many waiters as it took items
// (notify_if_aborted).
//
// Without the preload, wait_for() naps briefly (poll.hpp) and
// notify_ready() does nothing.
#pragma once

#include "pg/pg.hpp"

namespace pgclaim::shmem {

// What a waiter waits for: items of a queue, a slot of a named lease, or
// items of a queue that finish (claim.item_state with wait), or a change of
// the coordination service (api/coordination.cpp).
enum class WaitKind : int { Queue = 1, Lease = 2, Finished = 3, Coord = 4 };

// Sleep until woken for (kind, key) or `timeout_ms` passes, whichever comes
// first; may return early (callers re-check and call again). Handles
// interrupts (CHECK_FOR_INTERRUPTS), so a cancel or statement_timeout ends
// the wait with its usual error; the waiter is never left registered.
// Returns true when a waker picked this backend: work may have become ready
// anywhere (promoted, released, expired), so a queue waiter forgets its scan
// hints and looks from the head.
bool wait_for(WaitKind kind, int64 key, long timeout_ms);

// Record that (kind, key) has work ready once the current transaction
// commits (nothing happens if it aborts).
//   notify_ready(kind, key):        at least one unit became ready (count
//                                   unknown): one waiter is woken, and each
//                                   woken waiter that takes something wakes
//                                   the next one when it commits;
//   notify_ready(kind, key, count): exactly `count` units (items, lease
//                                   slots): up to `count` waiters are woken,
//                                   and nobody more.
void notify_ready(WaitKind kind, int64 key);
void notify_ready(WaitKind kind, int64 key, int64 count);
// Has the open transaction a notification pending for `key` of `kind`
// (it made something ready that other sessions see once it commits, and
// that it sees itself already)?
bool ready_pending(WaitKind kind, int64 key);

// `count` units of (kind, key) are ready again if the current transaction
// aborts (the items a claim took): up to `count` waiters are woken then.
void notify_if_aborted(WaitKind kind, int64 key, int64 count);

// Items of `queue_id` finish when the current transaction commits
// (completed, dead, cancelled): every waiter of (Finished, queue_id) is woken
// then. Costs nothing at commit while no backend waits in item_state.
void notify_finished(int64 queue_id);

// A backend about to wait for items to finish calls finished_wait_begin()
// before it first reads the item's state, and finished_wait_end() when done
// (the end of the transaction does it too, after an error).
void finished_wait_begin();
void finished_wait_end();

// Wake every waiter of (kind, key) now, not at commit (a change that is not
// transactional: a barrier opening). No raise.
void wake_now(WaitKind kind, int64 key);

// Wake every waiter of this database (the commit of a prepared transaction:
// what it made ready is unknown). Waiters between their scan and their
// sleep see it too.
void wake_all_waiters();

// Has no transaction made items of the queue ready (notify_ready) since
// `since`, and nobody woken every waiter? False without the preload. Never
// raises.
bool queue_quiet_since(int32 queue_id, TimestampTz since);

// For the module's transaction callbacks (src/module.cpp): the end of the
// transaction wakes the waiters it made work ready for (COMMIT) and passes a
// baton on (COMMIT or ABORT, see above); PREPARE drops what it would have
// woken. No raise.
void wakeup_at_xact_end(bool commit);
void wakeup_at_prepare();

}  // namespace pgclaim::shmem
