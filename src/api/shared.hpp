// Helpers shared by the SQL surfaces in src/api.
#pragma once

#include "core/queue_cache.hpp"
#include "core/rules.hpp"
#include "core/scan_hint.hpp"
#include "pg/pg.hpp"

namespace pgclaim::api {

inline constexpr int kMaxKeyBytes = 1024;  // group_key, dedup_key

// 22023 unless the key (group_key, dedup_key) is 1 to kMaxKeyBytes long.
void check_key_length(const text *key, const char *what);

// A queue's definition (core/queue_cache.hpp).
using QueueInfo = pgclaim::QueueDef;

// Looks the queue up by name (SPI must be connected); 42704 if unknown.
QueueInfo lookup_queue(const char *name);

// Checks and stores the flow-control arguments of create_queue and
// alter_queue (max_active, group_limit, rate, rate_per, rate_per_group,
// from argument `first` on) for the queue named by argument 0. SPI must be
// connected.
void store_flow_settings(FunctionCallInfo fcinfo, int first, bool altering);
// The same through the backend's queue cache (core/queue_cache.hpp): for
// the hot path of workers. An entry holds until a queue is altered,
// paused or resumed anywhere (shmem::queue_changes), at most kTtlUs.
QueueInfo lookup_queue_cached(const char *name);
void forget_queues();

// The backend's caches (queues, scan hints, promotion schedule) describe one
// installation of the extension: when claim.items is not the table they were
// filled from (DROP and CREATE EXTENSION reuse queue ids), they are cleared.
void sync_caches();
[[noreturn]] void unknown_queue(const char *name);

// The id of the queue a producer adds items to (enqueue, trigger enqueue),
// 42704 when it does not exist. Call it after claim.items was locked for
// writing (pg::direct::open in Enqueue mode). Cached per backend for as long
// as no queue was dropped anywhere (worker::queue_drops); looked up by an
// index probe otherwise, and always without the preload. `name` is the text
// datum, `cname` the same as a C string.
int32 producer_queue(void *direct_tables, Datum name, const char *cname);

// The abort callbacks of ready_walk.cpp, registered once per backend: on
// abort they forget the hints of queues whose walks moved past items the
// transaction claimed, and the producers' cached queue ids (queue.cpp's
// cache: a queue created by the aborted transaction is gone). No raise.
void register_xact_callbacks();
void forget_producer_queues() noexcept;

// Scan hints of this backend (see core/scan_hint.hpp).
void forget_hints(int32 queue_id);

// Wait until items of the queue may have become ready or `deadline` passes;
// false once it has passed (nothing was waited for then). When a producer's
// commit or the worker woke us, the backend's scan hints of the queue are
// forgotten: the next scan starts at the head. A `wake_at` before the
// deadline (a rate limit's next allowance; 0: none) ends the wait then.
bool wait_for_items(int32 queue_id, TimestampTz deadline, TimestampTz wake_at = 0);

// Fencing tokens survive a crash (README, "Tokens"). Every function that
// hands out tokens calls before_tokens() before its first nextval and
// after_tokens() once they are granted (SPI connected). With the preload,
// the first grant in a database after shared memory was set up moves the
// sequence 2^32 ahead and flushes that; later grants need no flush. Without
// it, every grant flushes the WAL covering its tokens.
void before_tokens();
void after_tokens();

// Scheduled items of the queue that are due at `now` become ready, in
// place (at most pg::kDutyBatch per call); the backend's scan hints of the queue are
// forgotten when any did, and its promotion schedule learns the earliest
// run_at still pending. SPI must be connected.
void promote_due(int32 queue_id, TimestampTz now);

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
    bool advanced;  // the hint moved past an item this walk claimed
};
void walk_begin(ReadyWalk *w, int32 queue_id, int32 max_attempts, TimestampTz now);

// Empty queues. A claim scan that met no ready item at all (not even a
// claimed one) remembers when it started; for a short while after (kEmptyUs),
// while no transaction has made items of the queue ready since (every path
// that does calls shmem::notify_ready, which stamps the queue at commit), the
// next scans of this backend are skipped. An empty queue polled under a long
// snapshot then costs no walk over the rows that snapshot keeps alive. With
// the preload only.
bool queue_seen_empty(int32 queue_id, TimestampTz now);
void remember_empty(int32 queue_id, TimestampTz scan_start);
void forget_empty(int32 queue_id);
// One visible ready item at `pos` and its claim row (has_claim, lease_until,
// attempt). True when it may be claimed: no live claim and attempts left.
bool walk_step(ReadyWalk *w, ScanPos pos, bool has_claim, TimestampTz lease_until, int32 attempt);
void walk_kill_dead(ReadyWalk *w);
// The walk claimed the item at `pos` (live until `lease_until` once this
// transaction commits): when the hint stands at it, the next walk may start
// right after it. Should the transaction (or a subtransaction) abort, the
// hints and frontiers of the queue are forgotten, so the item is found
// again at once.
void walk_claimed(ReadyWalk *w, ScanPos pos, TimestampTz lease_until);
// Kills what is left and records the hint for the next walk.
void walk_end(ReadyWalk *w);

// The checks a call taking a token (argument `argno`) starts with: the
// token is not NULL (22004) and the server is a primary (25006, naming
// `fn`). Returns the token.
int64 token_arg(FunctionCallInfo fcinfo, int argno, const char *fn);

// PC001 for a token that is not a live claim.
[[noreturn]] void stale_token(int64 token, const char *why);

}  // namespace pgclaim::api
