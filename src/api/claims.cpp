// SQL surface: workers' claims.
//   claim.claim_next (claim.complete: completion.cpp; the other calls that
//   take a token: token_calls.cpp)
//
// Concurrency model (docs/internals.md):
//  * an item is claimed when claim.claims holds a row for it with a lease in
//    the future; claim.claims is UNLOGGED, so claiming writes no WAL;
//  * every state change of an item happens under a transaction-level lock on
//    the item (pg::lock_item). Claimers only *try* the lock and skip busy
//    items, so they never wait for each other; complete/fail/extend/release
//    and assert_token wait for it. assert_token keeps it until the caller's
//    transaction ends, so the claim cannot pass to anyone else meanwhile;
//  * after taking the lock every check reads the latest committed state.
#include <algorithm>

#include "api/arrays.hpp"
#include "api/completion.hpp"
#include "api/fair.hpp"
#include "api/partition.hpp"
#include "api/caches.hpp"
#include "api/queue_lookup.hpp"
#include "api/ready_walk.hpp"
#include "api/tokens.hpp"
#include "core/rate_limit.hpp"
#include "core/rules.hpp"
#include "pg/item_locks.hpp"
#include "pg/direct.hpp"
#include "pg/direct_read.hpp"
#include "pg/direct_probe.hpp"
#include "pg/limits.hpp"
#include "pg/lineage.hpp"
#include "shmem/claim_slots.hpp"
#include "shmem/rates.hpp"
#include "shmem/drops.hpp"
#include "shmem/epochs.hpp"
#include "shmem/wakeup.hpp"
#include "shmem/metrics.hpp"

extern "C" {
#include "common/hashfn.h"
#include "utils/hsearch.h"
#include "tcop/utility.h"
}

using namespace pgclaim;
using pgclaim::pg::Stmt;
namespace direct = pgclaim::pg::direct;

namespace {

// --- helpers ------------------------------------------------------------------

HTAB *int64_set(const char *name, long size) {
    HASHCTL ctl;
    ctl.keysize = sizeof(uint64);
    ctl.entrysize = sizeof(uint64);
    ctl.hcxt = CurrentMemoryContext;
    return hash_create(name, size, &ctl, HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
}

// Adds key; false if it was there already.
bool set_add(HTAB *set, uint64 key) {
    bool found;
    hash_search(set, &key, HASH_ENTER, &found);
    return !found;
}

bool set_has(HTAB *set, uint64 key) {
    bool found;
    hash_search(set, &key, HASH_FIND, &found);
    return found;
}

// How often a claimer waiting at a concurrency limit looks again, besides
// being woken by the completions that free a slot.
constexpr int64 kLimitRecheckUs = USECS_PER_SEC;

// What the limits of a queue let one round claim, and what that took.
struct BatchLimits {
    int rate_taken;  // claims taken from the queue's rate
    int reserved;    // claims reserved under max_active
    bool locked;     // max_active counted under the queue's lock instead
};

// How many of `n` items the queue's limits let this call claim now
// (max_active, a rate for the whole queue); *retry_at when a rate that
// turned it away may let it in.
int limited_batch(const api::QueueInfo &q, int n, TimestampTz now, BatchLimits *lim,
                  TimestampTz *retry_at) {
    lim->rate_taken = 0;
    lim->reserved = 0;
    lim->locked = false;
    if (q.max_active > 0) {
        // Reserve first, then count the committed live claims (see
        // shmem/claim_slots.hpp); without shared memory for it, count under
        // the queue's lock, kept until commit when something was claimed.
        Oid install = direct::items_relid();
        int64 others = shmem::claim_slots_reserve(install, q.queue_id, n);
        if (others < 0) {
            pg::lock_queue_claims(q.queue_id);
            lim->locked = true;
            others = 0;
        } else {
            lim->reserved = n;
        }
        // Every live claim is a row of claim.claims: while that table could
        // not hold enough rows to reach the limit, there is nothing to count.
        int64 live = others + n + pg::claims_upper_bound() <= q.max_active
                         ? 0
                         : pg::live_claims(q.queue_id, now);
        int64 room = q.max_active - others - live;
        if (room < n) {
            int keep = room > 0 ? (int)room : 0;
            if (lim->reserved > 0) {
                shmem::claim_slots_give_back(install, q.queue_id, n - keep);
                lim->reserved = keep;
            }
            n = keep;
        }
        if (n == 0) return 0;
    }
    if (q.rate > 0 && !q.rate_per_group) {
        n = shmem::rate_take(direct::items_relid(), q.queue_id, 0,
                             rate_rule(q.rate, q.rate_per_us), n, now, retry_at);
        lim->rate_taken = n;
    }
    return n;
}

// What limited_batch took, to give back what the round did not use.
void limits_done(const api::QueueInfo &q, const BatchLimits &lim, int claimed) {
    if (lim.locked && claimed == 0) pg::unlock_queue_claims(q.queue_id);
    if (lim.reserved > claimed)
        shmem::claim_slots_give_back(direct::items_relid(), q.queue_id, lim.reserved - claimed);
    if (lim.rate_taken > claimed)
        shmem::rate_give_back(direct::items_relid(), q.queue_id, 0, rate_rule(q.rate, q.rate_per_us),
                              lim.rate_taken - claimed);
}

// Under the item's lock: may this item of a group start now? With a group
// limit K, at most K items of a group are in flight, started in enqueue
// order: fewer than K unfinished items of its group come before it. A
// group rate takes one claim from the group's allowance.
bool group_admits(const api::QueueInfo &q, direct::Tables *t, const direct::ItemRow &it,
                  int64 id, Snapshot snap, uint64 group_hash, TimestampTz now,
                  TimestampTz *retry_at) {
    if (q.group_limit <= 1) {
        if (!it.group_null && direct::group_has_earlier(t, q.queue_id, it.group_key, id, snap))
            return false;
    } else if (!it.group_null &&
               pg::earlier_in_group(q.queue_id, it.group_key, id, q.group_limit) >= q.group_limit) {
        return false;
    }
    if (q.rate > 0 && q.rate_per_group) {
        TimestampTz next = 0;
        if (shmem::rate_take(direct::items_relid(), q.queue_id, it.group_null ? 0 : group_hash,
                             rate_rule(q.rate, q.rate_per_us), 1, now, &next) == 0) {
            if (*retry_at == 0 || next < *retry_at) *retry_at = next;
            return false;
        }
    }
    return true;
}

// Entries of the ready index passed over without reading the item's row.
// Many claimers at once would otherwise each read the rows of all items the
// others are taking or hold, on the heap pages those write:
//  * an item whose lock another claimer's open transaction holds, having
//    said the item has no group key: passed as the walk passes every busy
//    item without a group key (walk_pass_busy);
//  * an item with a live claim row (its lease runs past `now`): not
//    claimable whatever its row says, passed as the walk passes a live
//    claim (walk_step). The claim row is probed by the item's id from the
//    entry; the probe of an item that is not passed is kept for the caller.
//    Items under live claims lie in runs (those claimed together or one
//    after the other), so the probe comes first only after a live claim: an
//    entry whose item is gone (completed, and kept by an old snapshot) is
//    probed at most once per run of live claims before it.
struct PassClaimed {
    api::ReadyWalk *w;
    bool *met_any;
    direct::ClaimCursor *cur;  // claims_pkey read along the walk
    const Snapshot *snap;  // the walk's snapshot (it changes when the walk jumps)
    TimestampTz now;
    bool probe_first;  // the last claim met was live
    int64 probed_id;   // the last item probed and not passed (0: none)
    bool probed_has;
    direct::ClaimRow probed;
};

bool pass_claimed_now(int64 id, int32 ord, void *arg) {
    auto *p = (PassClaimed *)arg;
    if (pg::item_busy_ungrouped(id)) {
        *p->met_any = true;
        api::walk_pass_busy(p->w, ScanPos{ord, id});
        return true;
    }
    if (!p->probe_first) return false;
    direct::ClaimRow c{};
    bool has = direct::claim_of_cursor(p->cur, id, *p->snap, &c);
    if (has && c.lease_until > p->now) {
        *p->met_any = true;
        (void)api::walk_step(p->w, ScanPos{ord, id}, true, c.lease_until, c.attempt);
        return true;
    }
    p->probe_first = false;
    p->probed_id = id;
    p->probed_has = has;
    p->probed = c;
    return false;
}

// How far past its start a walk for n items first reads the ready index
// (direct::ready_begin): its items, and the entry of the item it completed
// (the one-statement loop). Every entry the index reads costs key checks;
// a walk that must go further reads a stretch 8 times longer, then the
// rest of the queue.
int64 walk_stretch(int n) { return 4 + (int64)n; }

// One pass over the queue: claims up to n items, appends them to the result.
// *retry_at: when a rate that turned items away lets them in (0: none did).
// loop: the relations claim_next opened for its `done` (left open), or nullptr.
int claim_round(const api::QueueInfo &q, Datum qname, int n, int64 lease_us, Datum worker,
                bool worker_null, ReturnSetInfo *rsinfo, TimestampTz *retry_at,
                direct::Tables *loop) {
    TimestampTz now = pg::clock_now();
    *retry_at = 0;
    BatchLimits lim;
    n = limited_batch(q, n, now, &lim, retry_at);
    if (n == 0) {
        limits_done(q, lim, 0);
        return 0;
    }

    // Scheduled items that are due become ready (in place, keeping their id).
    bool check_due = true;
    pg::call_core([&] { check_due = api::promote_schedule().due(q.queue_id, now); });
    if (check_due) api::promote_due(q.queue_id, now);
    // An empty queue whose emptiness nothing has changed since: no walk.
    if (api::queue_seen_empty(q.queue_id, now)) {
        limits_done(q, lim, 0);
        return 0;
    }

    api::ReadyWalk w;
    api::walk_begin(&w, q.queue_id, q.max_attempts, now);
    HTAB *groups = nullptr;  // created at the first group key met
    int64 *cand = (int64 *)palloc(sizeof(int64) * n);
    ItemPointerData *cand_tid = (ItemPointerData *)palloc(sizeof(ItemPointerData) * n);
    ScanPos *cand_pos = (ScanPos *)palloc(sizeof(ScanPos) * n);
    uint64 *cand_group = (uint64 *)palloc(sizeof(uint64) * n);
    direct::ClaimRow *cand_claim = (direct::ClaimRow *)palloc(sizeof(direct::ClaimRow) * n);
    bool *cand_has = (bool *)palloc(sizeof(bool) * n);
    // What the walk read of each candidate's claim row before its lock, and
    // under which snapshot (its count of ended transactions and command).
    direct::ClaimRow *seen_claim = (direct::ClaimRow *)palloc(sizeof(direct::ClaimRow) * n);
    bool *seen_has = (bool *)palloc(sizeof(bool) * n);
    uint64 *seen_count = (uint64 *)palloc(sizeof(uint64) * n);
    CommandId *seen_cid = (CommandId *)palloc(sizeof(CommandId) * n);
    int *probe_at = (int *)palloc(sizeof(int) * n);
    int64 *probe_ids = (int64 *)palloc(sizeof(int64) * n);
    int claimed = 0;
    int64 highest_drawn = 0;  // of the token sequence (after_tokens)
    TimestampTz lease_until = now + lease_us;
    const api::ClaimGrant grant{rsinfo, qname, q.queue_id, now, lease_until, worker, worker_null};

    // The scan reads a snapshot taken now; every candidate is checked again
    // under its lock with a snapshot taken after the lock was granted.
    direct::Tables *t = loop != nullptr ? loop : direct::open(direct::Mode::Claim);
    if (loop != nullptr) direct::use(t, direct::Mode::Claim);
    // A fair queue is walked key by key in the scheduler's order (api/fair.hpp);
    // the scheduler's activations are counted before the snapshot is taken.
    bool fair = api::fair_queue(q.queue_id);
    uint64 fair_seen = fair ? api::fair_activations() : 0;
    uint64 scan_count = 0;
    Snapshot scan_snap = direct::latest(&scan_count);
    api::FairSource *fsrc =
        fair ? api::fair_source_begin(t, q.queue_id, n, scan_snap, now, fair_seen) : nullptr;
    direct::ReadyScan *scan =
        fair ? nullptr
             : direct::ready_begin(t, q.queue_id, w.from_head ? nullptr : &w.start, true,
                                   scan_snap, walk_stretch(n));
    bool exhausted = false;
    bool met_any = false;  // a ready item, claimed or not, was seen
    direct::ClaimCursor *cur = direct::claim_cursor_begin(t);
    PassClaimed passing{&w, &met_any, cur, &scan_snap, now, true, 0, false, {}};
    // Scanning, probing and claiming write only WAL that needs no flush at
    // commit (pruning, the token sequence) besides unlogged rows: forgotten,
    // so a claim commits asynchronously. Items made dead are logged writes.
    uint64 wal = pg::wal_mark();
    while (claimed < n && !exhausted) {
        int ncand = 0;
        if (fair) api::fair_source_wants(fsrc, n - claimed);
        while (claimed + ncand < n) {
            int64 id;
            int32 ord;
            Datum gk;
            bool group_null;
            ItemPointerData tid;
            if (!(fair ? api::fair_source_next(fsrc, &id, &ord, &gk, &group_null, &tid)
                       : direct::ready_next_passing(scan, pass_claimed_now, &passing, &id, &ord,
                                                    &gk, &group_null, &tid))) {
                exhausted = true;
                break;
            }
            met_any = true;
            CHECK_FOR_INTERRUPTS();
            // Locked by another transaction (most often a claimer that
            // took it a moment ago): skipped without probing its claim.
            if (group_null && pg::item_busy(id)) {
                api::walk_pass_busy(&w, ScanPos{ord, id});
                continue;
            }
            // Free to this walk's snapshot, but the shared frontier moved
            // past it since: the claimers in between committed after the
            // snapshot was taken. Go on from the frontier, with a new one.
            ScanPos to;
            TimestampTz to_expires;
            if (!fair && group_null &&
                api::walk_frontier_passed(&w, ScanPos{ord, id}, &to, &to_expires)) {
                direct::ready_end(scan);
                direct::claim_cursor_reset(cur);
                direct::release(scan_snap);
                scan_snap = direct::latest(&scan_count);
                scan = direct::ready_begin(t, q.queue_id, &to, true, scan_snap, walk_stretch(n));
                api::walk_jumped(&w, to, to_expires);
                passing.probed_id = 0;
                continue;
            }
            direct::ClaimRow c{};
            bool has;
            if (!fair && passing.probed_id == id) {  // probed by pass_claimed_now
                has = passing.probed_has;
                c = passing.probed;
            } else {
                has = fair ? direct::claim_of(t, id, scan_snap, &c)
                           : direct::claim_of_cursor(cur, id, scan_snap, &c);
                if (has && c.lease_until > now) passing.probe_first = true;
            }
            passing.probed_id = 0;
            if (!api::walk_step(&w, ScanPos{ord, id}, has, c.lease_until, c.attempt)) continue;
            uint64 group_hash = 0;
            if (!group_null) {
                text *gt = DatumGetTextPP(gk);
                group_hash = hash_bytes_extended((const unsigned char *)VARDATA_ANY(gt),
                                         (int)VARSIZE_ANY_EXHDR(gt), 0);
                if (groups == nullptr) groups = int64_set("pg_claim groups", 64);
                if (set_has(groups, group_hash)) continue;  // one item per group per call
            }
            // Taken saying whether the item has a group key, so that other
            // walks can pass it without reading its row (pass_claimed_now).
            if (!pg::lock_item(id, false, group_null)) {  // someone else is on it
                // (a prepared transaction's lock stops the walk's hint: it
                // may be rolled back from any session)
                if (group_null && pg::item_busy(id)) api::walk_lost_race(&w, ScanPos{ord, id});
                continue;
            }
            if (!group_null) set_add(groups, group_hash);
            seen_claim[ncand] = c;
            seen_has[ncand] = has;
            seen_count[ncand] = scan_count;
            seen_cid[ncand] = scan_snap->curcid;
            cand_group[ncand] = group_hash;
            cand_tid[ncand] = tid;
            cand_pos[ncand] = ScanPos{ord, id};
            cand[ncand++] = id;
            if (fair) api::fair_source_took(fsrc);
        }

        pg::wal_forget(wal);
        api::walk_kill_dead(&w);
        wal = pg::wal_mark();
        if (ncand == 0) continue;
        // Under the locks: still pending and ready, the head of its group,
        // and either never claimed or expired with attempts left. Nobody
        // else can change these items' claim rows before we commit.
        uint64 lock_count = 0;
        Snapshot snap = direct::latest(&lock_count);
        // A claim row read before the lock under a snapshot that this one
        // equals (no transaction ended in between, the same command) is what
        // a read now would find: only the others are read again, in one pass.
        int nprobe = 0;
        for (int i = 0; i < ncand; ++i) {
            if (lock_count != 0 && seen_count[i] == lock_count && seen_cid[i] == snap->curcid) {
                cand_claim[i] = seen_claim[i];
                cand_has[i] = seen_has[i];
            } else {
                probe_at[nprobe] = i;
                probe_ids[nprobe++] = cand[i];
            }
        }
        if (nprobe == ncand) {
            direct::claims_of(t, cand, ncand, snap, cand_claim, cand_has);
        } else if (nprobe > 0) {
            direct::claims_of(t, probe_ids, nprobe, snap, seen_claim, seen_has);
            for (int k = 0; k < nprobe; ++k) {
                cand_claim[probe_at[k]] = seen_claim[k];
                cand_has[probe_at[k]] = seen_has[k];
            }
        }
        for (int i = 0; i < ncand; ++i) {
            int64 id = cand[i];
            const direct::ClaimRow &c = cand_claim[i];
            direct::ItemRow it;
            bool has = cand_has[i];
            bool ok = (!has || (c.lease_until <= now && c.attempt < q.max_attempts)) &&
                      direct::item_at(t, &cand_tid[i], snap, &it) && it.ready &&
                      group_admits(q, t, it, id, snap, cand_group[i], now, retry_at) &&
                      (!has || direct::claim_delete(t, &c.tid));
            if (!ok) {
                pg::unlock_item(id);  // not ours to hold
                continue;
            }
            int64 drawn = direct::next_token(t);
            if (drawn > highest_drawn) highest_drawn = drawn;
            int64 token = api::make_token(drawn);
            int32 attempt = has ? c.attempt + 1 : it.failures + 1;
            api::grant_claim(t, grant, id, it, token, attempt, true);
            api::walk_claimed(&w, cand_pos[i], lease_until);
            ++claimed;
        }
        direct::release(snap);
    }
    if (fair)
        api::fair_source_end(fsrc);
    else
        direct::ready_end(scan);
    direct::claim_cursor_end(cur);
    direct::release(scan_snap);
    if (loop == nullptr) direct::close(t);
    pg::wal_forget(wal);
    // The walk started at the head and met nothing: the queue was empty at
    // `now` (taken before the snapshot of the walk).
    if (!met_any && (w.from_head || fair)) api::remember_empty(q.queue_id, now);
    // Later statements of this transaction (and SPI below) see the claims.
    if (claimed > 0) CommandCounterIncrement();
    if (fair) {
        // Positions in a fair walk are not positions of the queue's order:
        // no scan hint is kept from it.
        api::walk_kill_dead(&w);
        api::forget_hints(q.queue_id);
    } else {
        api::walk_end(&w);
    }
    if (claimed > 0) api::after_tokens(highest_drawn);
    limits_done(q, lim, claimed);
    shmem::count(q.queue_id, shmem::Metric::Claimed, claimed);
    return claimed;
}

}  // namespace

PGCLAIM_FUNCTION(pgclaim_claim_next) {
    pg::require_args(fcinfo, "queue", "n", nullptr, "wait");
    pg::require_primary("claim.claim_next");
    PreventCommandIfReadOnly("claim.claim_next()");
    char *name = pg::arg_cstring(fcinfo, 0);
    int32 n = PG_GETARG_INT32(1);
    int64 lease_us = api::lease_arg(fcinfo, 2);
    int64_t wait_us = pg::interval_us(PG_GETARG_INTERVAL_P(3), "wait");
    pg::call_core([&] {
        check_range("n", n, 1, kMaxClaimBatch);
        check_nonnegative_duration("wait", wait_us, kMaxWaitUs);
    });
    bool worker_null = PG_ARGISNULL(4);
    Datum worker = worker_null ? (Datum)0 : PG_GETARG_DATUM(4);

    InitMaterializedSRF(fcinfo, MAT_SRF_USE_EXPECTED_DESC);
    ReturnSetInfo *rsinfo = (ReturnSetInfo *)fcinfo->resultinfo;

    // done: complete these first, all or nothing (one statement per job).
    // The relations are opened once for the completion and the first round.
    direct::Tables *loop = nullptr;
    if (PG_NARGS() > 5 && !PG_ARGISNULL(5)) {
        int ndone;
        int64 *done_tokens = api::int8_arg_sorted(fcinfo, 5, "done", &ndone);
        if (ndone > 0) {
            bool *ok = (bool *)palloc(sizeof(bool) * ndone);
            loop = direct::open(direct::Mode::Loop);
            api::complete_tokens(done_tokens, ndone, nullptr, nullptr, ok, loop);
            for (int i = 0; i < ndone; ++i)
                if (!ok[i])
                    api::stale_tokens(done_tokens, ok, ndone,
                                      "Nothing was completed and nothing was claimed. Drop the "
                                      "stale tokens (their items are delivered again) and call "
                                      "again.");
        }
    }

    SPI_connect();
    api::QueueInfo q = api::lookup_queue_cached(name);
    if (lease_us < 0) lease_us = q.lease_us;
    api::before_tokens();
    TimestampTz deadline = pg::clock_now() + wait_us;
    uint64 drops = shmem::queue_drops();
    for (;;) {
        // A paused queue hands out nothing; its resume wakes the waiters.
        if (q.paused) q = api::lookup_queue(name);
        TimestampTz retry_at = 0;
        int claimed = 0;
        if (!q.paused) {
            // Each round in its own SPI connection: what it allocates (result
            // sets, candidate arrays, the group set) goes when it ends, so a
            // long wait does not grow.
            SPI_connect();
            claimed = claim_round(q, PG_GETARG_DATUM(0), n, lease_us, worker, worker_null,
                                  rsinfo, &retry_at, loop);
            SPI_finish();
        }
        if (loop != nullptr) {  // later rounds open their own
            direct::close(loop);
            loop = nullptr;
        }
        if (claimed > 0) break;
        // A rate that turned this call away lets it in at retry_at; at a
        // concurrency limit the call also looks again every second.
        if (retry_at == 0 && (q.max_active > 0 || q.group_limit > 1))
            retry_at = pg::clock_now() + kLimitRecheckUs;
        if (!api::wait_for_items(q.queue_id, deadline, retry_at)) break;
        api::recheck_after_wait(name, &q, &drops);
    }
    SPI_finish();
    return (Datum)0;
}
