// The walk over a queue's ready items (claim_next, group_claim), the
// promotion of due scheduled items before it, the grant of a claim to an
// item the walk found, and the wait for items when it found none. What the
// walk remembers between calls (hints, frontiers, the memo of empty queues)
// is in caches.hpp.
#pragma once

#include "core/scan_hint.hpp"
#include "pg/pg.hpp"
#include "pg/direct_read.hpp"

namespace pgclaim::api {

// Scheduled items of the queue that are due at `now` become ready, in
// place (at most pg::kDutyBatch per call); the backend's scan hints of the queue are
// forgotten when any did, and its promotion schedule learns the earliest
// run_at still pending. SPI must be connected.
void promote_due(int32 queue_id, TimestampTz now);

// Wait until items of the queue may have become ready or `deadline` passes;
// false once it has passed (nothing was waited for then). When a producer's
// commit or the worker woke us, the backend's scan hints of the queue are
// forgotten: the next scan starts at the head. A `wake_at` before the
// deadline (a rate limit's next allowance; 0: none) ends the wait then.
bool wait_for_items(int32 queue_id, TimestampTz deadline, TimestampTz wake_at = 0);

// What a walk over a queue's ready items (claim_next, group_claim) keeps
// while it looks for claimable items: where the next walk may start (the
// scan hint, core/scan_hint.hpp) and the items found dead (lease expired on
// the last allowed attempt; locked here, killed by walk_kill_dead through pg::kill_dead).
struct ReadyWalk {
    int32 queue_id;
    int32 max_attempts;
    TimestampTz now;
    bool from_head;  // no hint: the walk starts at the head
    ScanPos start;   // where it starts otherwise
    int64 start_expires;  // until when `start` holds (shared frontier)
    bool hint_have, hint_done;
    ScanPos hint_pos;
    int64 claims_end;
    int64 walk_us;
    TimestampTz t0;
    int64 *dead;
    int ndead, dead_cap;
    struct {
        bool have, done;
        ScanPos pos;
        int64 walk_us;
    } before_step;  // the hint as it was before the last walk_step
    bool advanced;  // the walk claimed an item
    uint64 epoch;   // the queue's forget epoch when it started (shmem/frontier.hpp)
};
void walk_begin(ReadyWalk *w, int32 queue_id, int32 max_attempts, TimestampTz now);

// One visible ready item at `pos` and its claim row (has_claim, lease_until,
// attempt). True when it may be claimed: no live claim and attempts left.
bool walk_step(ReadyWalk *w, ScanPos pos, bool has_claim, TimestampTz lease_until, int32 attempt);
void walk_kill_dead(ReadyWalk *w);
// An item at `pos` whose lock another open transaction holds (a claimer on
// it, or a completion): skipped, and the hint may move past it as past a
// live claim. Only for items without a group key: a claimer may give a
// group's item back under its lock (the group rule), and such an item must
// stop the hint. Should that transaction give the item back by rolling
// back, its abort moves the queue's forget epoch (walk_claimed), and every
// position that passed the item stops holding.
void walk_pass_busy(ReadyWalk *w, ScanPos pos);
// A walk that did not start at the head meets an item at `pos` that looks
// free to its snapshot: when the queue's shared frontier has moved past it
// since (other claimers took the items in between and committed after this
// walk's snapshot was taken), true with *to set to the frontier: the walk
// continues from there as if it had started there (walk_jumped). No raise.
// *expires: until when the frontier holds (for walk_jumped).
bool walk_frontier_passed(const ReadyWalk *w, ScanPos pos, ScanPos *to, TimestampTz *expires);
void walk_jumped(ReadyWalk *w, ScanPos to, TimestampTz expires);
// walk_step said the item at `pos` may be claimed, but another transaction
// took its lock first: the hint is put back as it was before that step, and
// the item passed as walk_pass_busy does.
void walk_lost_race(ReadyWalk *w, ScanPos pos);
// The walk claimed the item at `pos` (live until `lease_until` once this
// transaction commits): when the hint stands at it, the next walk may start
// right after it. Should the transaction (or a subtransaction) abort, the
// hints and frontiers of the queue are forgotten, so the item is found
// again at once.
void walk_claimed(ReadyWalk *w, ScanPos pos, TimestampTz lease_until);
// Kills what is left and records the hint for the next walk.
void walk_end(ReadyWalk *w);

// What the claims one call grants share: where their rows go, the queue,
// the lease and the worker.
struct ClaimGrant {
    ReturnSetInfo *rsinfo;
    Datum qname;
    int32 queue_id;
    TimestampTz now;
    TimestampTz lease_until;
    Datum worker;
    bool worker_null;
};
// Claims item `id`, locked and found claimable (its expired claim row, if
// any, deleted): inserts its claim row under `token` and appends its
// claim.item row to the result. one_item: `token` is this item's alone
// (claim_next), not shared by a group's items (group_claim).
void grant_claim(pg::direct::Tables *t, const ClaimGrant &g, int64 id,
                 const pg::direct::ItemRow &it, int64 token, int32 attempt, bool one_item);

}  // namespace pgclaim::api
