// SQL surface: group claims.
//   claim.group_claim
//
// A group is the set of pending items of a queue with the same group_key; its
// head is the one with the lowest id. Only the head can start a claim of its
// group (claim_next and group_claim alike), and every claimer holds the
// head's item lock (pg::lock_item) while it claims, so two claimers of one
// group are serialized without waiting: the second one fails the try-lock and
// moves on (or returns nothing when it asked for that group).
//
// Finding the next group does not walk the groups: the scan walks items_ready
// in delivery order (ord, id), exactly like claim_next, and takes the first
// item that is not under a live claim and is the head of its group (one probe
// of items_group per item looked at). The followers come from items_group in
// id order: each one is try-locked and taken while it is ready and free; the
// first that is not stops the claim (group order is never skipped).
//
// The locked items are then claimed under one token (one nextval): with the
// latest committed state, read under the locks, the head must still be the
// head and claimable and each follower claimable; the longest such prefix
// is claimed. Items not taken are unlocked. Every read and write goes
// through the direct path (pg/direct.hpp), as claim_next's do.
#include "api/partition.hpp"
#include "api/caches.hpp"
#include "api/keys.hpp"
#include "api/queue_lookup.hpp"
#include "api/ready_walk.hpp"
#include "api/tokens.hpp"
#include "core/rules.hpp"
#include "pg/item_locks.hpp"
#include "pg/direct.hpp"
#include "pg/direct_read.hpp"
#include "pg/duties.hpp"
#include "shmem/drops.hpp"
#include "shmem/epochs.hpp"
#include "shmem/metrics.hpp"

extern "C" {
#include "utils/datum.h"
}

using namespace pgclaim;
namespace direct = pgclaim::pg::direct;

namespace {

struct ClaimArgs {
    const api::QueueInfo *q;
    Datum qname;
    int max_items;
    TimestampTz now;
    TimestampTz lease_until;
    Datum worker;
    bool worker_null;
    ReturnSetInfo *rsinfo;
};

// A claim row that blocks a new claim: a live lease, or attempts used up.
bool claim_blocks(const ClaimArgs &a, bool has, const direct::ClaimRow &c) {
    return has && (c.lease_until > a.now || c.attempt >= a.q->max_attempts);
}

// The head is locked by the caller. Adds the following ready items of its group, claims them all
// under one token, emits the rows. Returns how many were claimed (0: the
// head was not claimable after all; it is unlocked).
// *wal is the caller's pg::wal_mark(): items made dead on the way are
// logged writes, kept.
int take_group(const ClaimArgs &a, direct::Tables *t, int64 head, Datum gkey, bool gkey_null,
               uint64 *wal) {
    const int32 qid = a.q->queue_id;
    int cap = a.max_items < 64 ? a.max_items : 64;
    int64 *cand = (int64 *)palloc(sizeof(int64) * cap);
    ItemPointerData *cand_tid = (ItemPointerData *)palloc(sizeof(ItemPointerData) * cap);
    int ncand = 0;
    ItemPointerSetInvalid(&cand_tid[ncand]);  // the head is read by id
    cand[ncand++] = head;

    if (!gkey_null && a.max_items > 1) {
        // The followers, in id order: each one is taken while it is ready
        // and free; an item whose last attempt expired is dead and passed.
        Snapshot snap = direct::latest();
        direct::GroupScan *gs = direct::group_begin(t, qid, gkey, head, snap);
        int64 *dead = (int64 *)palloc(sizeof(int64) * cap);
        int ndead = 0, dead_cap = cap;
        int64 id;
        bool ready;
        ItemPointerData tid;
        for (int seen = 0; seen < a.max_items - 1 && direct::group_next(gs, &id, &ready, &tid);
             ++seen) {
            CHECK_FOR_INTERRUPTS();
            if (!ready) break;  // scheduled: stop here
            direct::ClaimRow c;
            bool has = direct::claim_of(t, id, snap, &c);
            if (has && c.lease_until > a.now) break;  // cannot happen while we hold the head
            if (!pg::lock_item(id, false)) break;     // someone is busy with it
            if (has && c.attempt >= a.q->max_attempts) {
                // Its lease ran out on the last attempt: it is dead, the
                // group moves on past it.
                if (ndead == dead_cap) {
                    dead_cap *= 2;
                    dead = (int64 *)repalloc(dead, sizeof(int64) * dead_cap);
                }
                dead[ndead++] = id;
                continue;
            }
            if (ncand == cap) {
                cap = cap * 2 > a.max_items ? a.max_items : cap * 2;
                cand = (int64 *)repalloc(cand, sizeof(int64) * cap);
                cand_tid = (ItemPointerData *)repalloc(cand_tid, sizeof(ItemPointerData) * cap);
            }
            cand_tid[ncand] = tid;
            cand[ncand++] = id;
        }
        direct::group_end(gs);
        direct::release(snap);
        if (ndead > 0) {
            pg::wal_forget(*wal);
            shmem::count_killed(qid, pg::kill_dead(dead, ndead, a.now));
            *wal = pg::wal_mark();
        }
    }

    // Under the locks, with the latest committed state: the longest prefix
    // of the candidates that is claimable now (the head still the head,
    // each one ready, never claimed or expired with attempts left) is
    // claimed under one token. Nobody else can change these items' claim
    // rows before we commit. The items this call made dead are seen.
    CommandCounterIncrement();
    Snapshot snap = direct::latest();
    const api::ClaimGrant grant{a.rsinfo, a.qname, qid, a.now, a.lease_until, a.worker,
                                a.worker_null};
    int got = 0;
    int64 token = 0;
    for (; got < ncand; ++got) {
        int64 id = cand[got];
        direct::ClaimRow c;
        direct::ItemRow it;
        bool has = direct::claim_of(t, id, snap, &c);
        // The head by id: its row may have changed since the walk read it
        // (a coalescing trigger merges into pending items), and a named
        // group must not come back empty for that. A follower changed
        // since is left for the next claim.
        bool read = got == 0 ? direct::item_get(t, id, snap, &it)
                             : direct::item_at(t, &cand_tid[got], snap, &it);
        bool ok = !claim_blocks(a, has, c) && read && it.ready &&
                  (got > 0 || it.group_null ||
                   !direct::group_has_earlier(t, qid, it.group_key, id, snap)) &&
                  (!has || direct::claim_delete(t, &c.tid));
        if (!ok) break;
        if (got == 0) token = api::make_token(direct::next_token(t));
        int32 attempt = has ? c.attempt + 1 : it.failures + 1;
        api::grant_claim(t, grant, id, it, token, attempt, false);
    }
    direct::release(snap);
    for (int i = got; i < ncand; ++i) pg::unlock_item(cand[i]);
    // Later statements of this transaction (and SPI below) see the claims.
    if (got > 0) CommandCounterIncrement();
    return got;
}

// How many dead heads one call moves past before it gives up on the group.
constexpr int kMaxHeadRounds = 8;

// Claim the named group if its head is ready and free.
// Reading and claiming write only WAL that needs no flush at commit besides
// unlogged rows (see claim_round in claims.cpp): forgotten between
// pg::wal_mark() and pg::wal_forget(), so that a group claim commits
// asynchronously. Items made dead are logged writes and stay outside.
int claim_named_group(const ClaimArgs &a, direct::Tables *t, Datum gkey) {
    uint64 wal = pg::wal_mark();
    int claimed = 0;
    for (int round = 0; round < kMaxHeadRounds; ++round) {
        Snapshot snap = direct::latest();
        direct::GroupScan *gs = direct::group_begin(t, a.q->queue_id, gkey, -1, snap);
        int64 head;
        bool ready;
        ItemPointerData tid;
        bool found = direct::group_next(gs, &head, &ready, &tid);
        direct::group_end(gs);
        direct::ClaimRow c;
        bool has = found && ready && direct::claim_of(t, head, snap, &c);
        direct::release(snap);
        if (!found || !ready) break;                  // empty, or a scheduled head
        if (has && c.lease_until > a.now) break;      // claimed
        if (!pg::lock_item(head, false)) break;       // another claimer is on it
        if (has && c.attempt >= a.q->max_attempts) {  // dead: the next item is the head now
            pg::wal_forget(wal);
            shmem::count_killed(a.q->queue_id, pg::kill_dead(&head, 1, a.now));
            wal = pg::wal_mark();
            CommandCounterIncrement();  // the next round's snapshot sees it dead
            continue;
        }
        claimed = take_group(a, t, head, gkey, false, &wal);
        break;
    }
    pg::wal_forget(wal);
    return claimed;
}

// Walk the ready items in delivery order; claim the group of the first free head.
int claim_first_group(const ClaimArgs &a, direct::Tables *t) {
    const int32 qid = a.q->queue_id;
    api::ReadyWalk w;
    api::walk_begin(&w, qid, a.q->max_attempts, a.now);
    int claimed = 0;

    // The walk reads a snapshot taken now; the claim of the group found
    // (take_group) checks everything again under the locks.
    Snapshot snap = direct::latest();
    direct::ReadyScan *scan =
        direct::ready_begin(t, qid, w.from_head ? nullptr : &w.start, true, snap);
    uint64 wal = pg::wal_mark();  // see claim_named_group
    while (claimed == 0) {
        int64 id;
        int32 ord;
        Datum gk;
        bool gk_null;
        ItemPointerData tid;
        if (!direct::ready_next(scan, &id, &ord, &gk, &gk_null, &tid)) break;
        CHECK_FOR_INTERRUPTS();
        direct::ClaimRow c{};
        bool has = direct::claim_of(t, id, snap, &c);
        if (!api::walk_step(&w, ScanPos{ord, id}, has, c.lease_until, c.attempt)) continue;
        if (!gk_null && direct::group_has_earlier(t, qid, gk, id, snap)) continue;  // not the head
        if (!pg::lock_item(id, false)) continue;  // someone else is on it
        Datum gcopy = gk_null ? (Datum)0 : datumCopy(gk, false, -1);
        pg::wal_forget(wal);
        api::walk_kill_dead(&w);
        wal = pg::wal_mark();
        claimed = take_group(a, t, id, gcopy, gk_null, &wal);
    }
    direct::ready_end(scan);
    direct::release(snap);
    pg::wal_forget(wal);
    api::walk_end(&w);
    return claimed;
}

int group_round(ClaimArgs &a, int64 lease_us, bool named, Datum gkey) {
    a.now = pg::clock_now();
    a.lease_until = a.now + lease_us;
    // Due scheduled items become ready (in place, keeping their id). A group
    // claim looks every time (one index probe): a group is held back by a
    // scheduled head, so a due head must not wait for this backend's
    // promotion schedule.
    direct::Tables *t = direct::open(direct::Mode::Claim);
    Snapshot snap = direct::latest();
    bool due = direct::scheduled_due(t, a.q->queue_id, a.now, snap);
    direct::release(snap);
    if (due) {
        api::promote_due(a.q->queue_id, a.now);
        CommandCounterIncrement();  // the walk's snapshot sees them ready
    }
    int claimed = named ? claim_named_group(a, t, gkey) : claim_first_group(a, t);
    direct::close(t);
    if (claimed > 0) api::after_tokens();
    shmem::count(a.q->queue_id, shmem::Metric::Claimed, claimed);
    return claimed;
}

}  // namespace

PGCLAIM_FUNCTION(pgclaim_group_claim) {
    pg::require_args(fcinfo, "queue", "max_items", nullptr, "wait");
    pg::require_primary("claim.group_claim");
    char *name = pg::arg_cstring(fcinfo, 0);
    int32 max_items = PG_GETARG_INT32(1);
    int64_t lease_us = -1;
    if (!PG_ARGISNULL(2)) {
        lease_us = pg::interval_us(PG_GETARG_INTERVAL_P(2), "lease");
        pg::call_core([&] { check_positive_duration("lease", lease_us, kMaxLeaseUs); });
    }
    int64_t wait_us = pg::interval_us(PG_GETARG_INTERVAL_P(3), "wait");
    pg::call_core([&] {
        check_range("max_items", max_items, 1, kMaxGroupClaim);
        check_nonnegative_duration("wait", wait_us, kMaxWaitUs);
    });
    bool named = !PG_ARGISNULL(5);
    Datum gkey = named ? PG_GETARG_DATUM(5) : (Datum)0;
    if (named) api::check_key_length(DatumGetTextPP(gkey), "group_key");

    InitMaterializedSRF(fcinfo, MAT_SRF_USE_EXPECTED_DESC);
    ReturnSetInfo *rsinfo = (ReturnSetInfo *)fcinfo->resultinfo;

    SPI_connect();
    api::sync_caches();  // scan hints of a dropped installation must go
    api::QueueInfo q = api::lookup_queue_cached(name);
    if (q.max_active > 0 || q.rate > 0)
        pg::error({ERRCODE_FEATURE_NOT_SUPPORTED,
                   "Claim from this queue with claim.claim_next, which keeps its limits."},
                  "claim.group_claim cannot claim from queue \"%s\": it has a max_active or "
                  "rate limit",
                  name);
    if (lease_us < 0) lease_us = q.lease_us;
    api::before_tokens();
    ClaimArgs a;
    a.q = &q;
    a.qname = PG_GETARG_DATUM(0);
    a.max_items = max_items;
    a.now = 0;
    a.lease_until = 0;
    a.worker_null = PG_ARGISNULL(4);
    a.worker = a.worker_null ? (Datum)0 : PG_GETARG_DATUM(4);
    a.rsinfo = rsinfo;
    TimestampTz deadline = pg::clock_now() + wait_us;
    uint64 drops = shmem::queue_drops();
    for (;;) {
        // A paused queue hands out nothing; its resume wakes the waiters.
        if (q.paused) q = api::lookup_queue(name);
        int claimed = 0;
        if (!q.paused) {
            // Each round in its own SPI connection, so a long wait does not
            // grow (see claim_next).
            SPI_connect();
            claimed = group_round(a, lease_us, named, gkey);
            SPI_finish();
        }
        if (claimed > 0) break;
        if (!api::wait_for_items(q.queue_id, deadline)) break;
        api::recheck_after_wait(name, &q, &drops);
    }
    SPI_finish();
    return (Datum)0;
}
