// What happens to an item when it finishes, beyond leaving claim.items:
// its place in the history of a queue that retains finished items
// (claim.finished), and its waiting children (claim.item_parents).
// Used by the SQL surfaces (complete, fail, cancel, enqueue with `after`)
// and by the worker (items whose last lease expired), so it lives below both.
// SPI must be connected; the callers hold the item locks of the items they
// finish.
#pragma once

#include "pg/pg.hpp"

namespace pgclaim::pg {

// Whether the catalog has the lifecycle objects (claim.finished_ring and
// the queue columns retain and paused): false while a 0.1.0 catalog waits
// for ALTER EXTENSION pg_claim UPDATE. Two syscache probes.
bool lifecycle_catalog();

// --- history -----------------------------------------------------------------

// How a finished item is recorded in claim.finished.state.
inline constexpr char kFinishedCompleted = 'c';
inline constexpr char kFinishedCancelled = 'x';

// Deletes the item from claim.items and records it in the current slot of
// the history ring as completed, with its result (NULL allowed) and the
// attempt that completed it. False when the item was gone.
bool finish_retained(int64 item_id, Datum result, bool result_null, int32 attempt,
                     TimestampTz now);

// The worker's part: moves the history ring on when the current slot has
// been written for a third of the longest retention and the next slot holds
// only expired rows (then truncates it: no dead tuples); returns whether it
// did. A row is therefore kept at least its queue's retention and at most a
// third longer. Skips the round when the slot is in use (its lock is busy).
bool rotate_history(TimestampTz now);
// Dead items of queues with retain > 0 whose retention ended are deleted
// (at most kDutyBatch); returns how many.
int64 purge_expired_dead(TimestampTz now);

// --- dependencies ---------------------------------------------------------------

// Whether claim.item_parents may hold rows: false while the table has
// never been written (it has no pages), which costs no SQL to find out.
// Completions skip the dependency work then.
bool dependencies_possible();

// The children of `parents` (which just completed, under their item locks)
// lose these parents; each child left without unfinished parents becomes
// ready (or scheduled, if its run_at is later). Leaves one row per queue
// with children made ready now, (queue_id int4, count int8), in
// SPI_tuptable and returns the number of rows.
uint64 release_children(const int64 *parents, int n, TimestampTz now);

// The waiting descendants of `parents` (which ended dead or cancelled) end
// the same way: dead with an error naming the parent (`how` 'd'), or
// cancelled (`how` 'x', kept in the history of queues that retain). Returns
// how many items ended.
int64 end_descendants(const int64 *parents, int n, char how, TimestampTz now);

// The waiting items `ids` (locked by the caller, ascending) end because of
// the ended item roots[i]: dead with an error naming it (`how` 'd'), or
// cancelled ('x'). Returns how many ended.
int64 end_waiting(const int64 *ids, const int64 *roots, int n, char how, TimestampTz now);

// The outcome an `after` list gives a new item, checked under the item
// locks of the parents (taken here, in id order, waiting for holders).
struct AfterState {
    int unfinished;        // parents still unfinished: the item waits
    int64 dead_parent;     // a parent that is dead (0: none)
    int64 cancelled_parent;  // a parent that was cancelled (0: none)
};
AfterState check_parents(const int64 *parents, int n);

// Records that `child` waits for the unfinished ones among `parents`.
void add_parents(int64 child, const int64 *parents, int n);

}  // namespace pgclaim::pg
