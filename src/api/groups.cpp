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
// One statement then claims the locked items under one token (one nextval):
// it re-checks under the locks, with the latest committed state, that the
// head is still the head and claimable and that each follower is claimable,
// and claims the longest such prefix. Items not taken are unlocked.
#include "api/partition.hpp"
#include "api/hints.hpp"
#include "api/keys.hpp"
#include "api/queue_lookup.hpp"
#include "api/ready_walk.hpp"
#include "api/tokens.hpp"
#include "core/rules.hpp"
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
using pgclaim::pg::Stmt;
namespace direct = pgclaim::pg::direct;

namespace {

// Columns: id, ready, lease_until, attempt.
#define GMEMBER_SELECT                                                         \
    "SELECT i.id, i.run_at IS NULL, c.lease_until, c.attempt "                 \
    "FROM claim.items i "                                                      \
    "LEFT JOIN LATERAL (SELECT lease_until, attempt FROM claim.claims cc "     \
    "                   WHERE cc.item_id = i.id) c ON true "                   \
    "WHERE i.queue_id = $1 AND i.group_key = $2 AND i.state = 'r' "

Stmt s_group_head = {GMEMBER_SELECT "ORDER BY i.id LIMIT 1", 2, {INT4OID, TEXTOID}, nullptr};
Stmt s_followers = {GMEMBER_SELECT "AND i.id > $3 ORDER BY i.id LIMIT $4", 4,
                    {INT4OID, TEXTOID, INT8OID, INT8OID}, nullptr};

// The end of the group claiming statement: the upsert of claim rows (a new claim, or an expired one with attempts
// left, gets the token), ending the "ins" CTE.
#define PGCLAIM_CLAIM_CONFLICT                                               \
    "  ON CONFLICT (item_id) DO UPDATE"                                      \
    "    SET token = EXCLUDED.token, attempt = c.attempt + 1,"               \
    "        lease_until = EXCLUDED.lease_until, claimed_at = EXCLUDED.claimed_at," \
    "        worker = EXCLUDED.worker"                                       \
    "    WHERE c.lease_until <= EXCLUDED.claimed_at AND c.attempt < $5"      \
    "  RETURNING c.item_id, c.token, c.attempt, c.lease_until"               \
    ") "
// The columns returned for claim.item, from the claimed rows and the items.
#define PGCLAIM_CLAIM_UPSERT                                                 \
    PGCLAIM_CLAIM_CONFLICT                                                   \
    "SELECT ins.item_id, ins.token, ins.attempt, ins.lease_until,"           \
    "       i.group_key, i.payload, i.enqueued_at "                          \
    "FROM ins JOIN claim.items i ON i.id = ins.item_id "

// Claim the longest prefix of the locked candidates ($1, head first) that is
// claimable now, under one token.
Stmt s_gclaim = {
    "WITH cand AS ("
    "  SELECT u.id, u.n, i.queue_id, i.failures,"
    "    COALESCE(i.state = 'r' AND i.run_at IS NULL"
    "      AND (u.n > 1 OR i.group_key IS NULL OR NOT EXISTS ("
    "           SELECT 1 FROM claim.items e WHERE e.queue_id = i.queue_id"
    "             AND e.group_key = i.group_key AND e.state = 'r' AND e.id < i.id))"
    "      AND NOT EXISTS (SELECT 1 FROM claim.claims x WHERE x.item_id = i.id"
    "             AND (x.lease_until > $3 OR x.attempt >= $5)), false) AS ok"
    "  FROM unnest($1::bigint[]) WITH ORDINALITY AS u(id, n)"
    "  LEFT JOIN claim.items i ON i.id = u.id"
    "), lim AS ("
    "  SELECT COALESCE(min(n) FILTER (WHERE NOT ok), 9223372036854775807) AS stop FROM cand"
    "), tok AS ("
    "  SELECT " PGCLAIM_NEXT_TOKEN_SQL " AS t FROM lim WHERE lim.stop > 1"
    "), ins AS ("
    "  INSERT INTO claim.claims AS c"
    "    (item_id, queue_id, token, attempt, lease_until, claimed_at, worker)"
    "  SELECT cand.id, cand.queue_id, tok.t, cand.failures + 1, $2, $3, $4"
    "  FROM cand, lim, tok WHERE cand.n < lim.stop ORDER BY cand.n"
    PGCLAIM_CLAIM_UPSERT "ORDER BY ins.item_id",
    5, {INT8ARRAYOID, TIMESTAMPTZOID, TIMESTAMPTZOID, TEXTOID, INT4OID}, nullptr};

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

// The head is locked by the caller. Adds the following ready items of its
// group, claims them all under one token, emits the rows. Returns how many
// were claimed (0: the head was not claimable after all; it is unlocked).
// *wal is the caller's pg::wal_mark(): items made dead on the way are
// logged writes, kept.
int take_group(const ClaimArgs &a, int64 head, Datum gkey, bool gkey_null, uint64 *wal) {
    int cap = a.max_items < 64 ? a.max_items : 64;
    int64 *cand = (int64 *)palloc(sizeof(int64) * cap);
    int ncand = 0;
    cand[ncand++] = head;

    if (!gkey_null && a.max_items > 1) {
        Datum v[4] = {Int32GetDatum(a.q->queue_id), gkey, Int64GetDatum(head),
                      Int64GetDatum(a.max_items - 1)};
        uint64 rows = pg::run(s_followers, v, nullptr);
        int64 *dead = (int64 *)palloc(sizeof(int64) * (rows > 0 ? rows : 1));
        int ndead = 0;
        for (uint64 r = 0; r < rows; ++r) {
            bool isnull, lease_null;
            int64 id = pg::col_int64(r, 1);
            if (!DatumGetBool(pg::col(r, 2, &isnull))) break;  // scheduled: stop here
            TimestampTz lease_until = DatumGetTimestampTz(pg::col(r, 3, &lease_null));
            if (!lease_null && lease_until > a.now) break;  // cannot happen while we hold the head
            if (!lease_null && pg::col_int32(r, 4) >= a.q->max_attempts) {
                // Its lease ran out on the last attempt: it is dead, the group
                // moves on past it.
                if (!pg::lock_item(id, false)) break;
                dead[ndead++] = id;
                continue;
            }
            if (!pg::lock_item(id, false)) break;  // someone is busy with it
            if (ncand == cap) {
                cap = cap * 2 > a.max_items ? a.max_items : cap * 2;
                cand = (int64 *)repalloc(cand, sizeof(int64) * cap);
            }
            cand[ncand++] = id;
        }
        pg::free_result();
        pg::wal_forget(*wal);
        shmem::count_killed(a.q->queue_id, pg::kill_dead(dead, ndead, a.now));
        *wal = pg::wal_mark();
    }

    Datum cv[5] = {pg::int8_array(cand, ncand), TimestampTzGetDatum(a.lease_until),
                   TimestampTzGetDatum(a.now), a.worker, Int32GetDatum(a.q->max_attempts)};
    char cn[6] = {' ', ' ', ' ', a.worker_null ? 'n' : ' ', ' ', '\0'};
    uint64 got = pg::run(s_gclaim, cv, cn);
    // Rows come in id order, which is the order of cand: the taken ones are
    // a prefix of it.
    uint64 matched = 0;
    for (uint64 r = 0; r < got; ++r) {
        Datum out[8];
        bool isnull[8] = {false, false, false, false, false, false, false, false};
        out[0] = a.qname;
        out[1] = pg::col(r, 1, &isnull[1]);
        out[2] = pg::col(r, 2, &isnull[2]);
        out[3] = pg::col(r, 5, &isnull[3]);
        out[4] = pg::col(r, 6, &isnull[4]);
        out[5] = pg::col(r, 3, &isnull[5]);
        out[6] = pg::col(r, 7, &isnull[6]);
        out[7] = pg::col(r, 4, &isnull[7]);
        tuplestore_putvalues(a.rsinfo->setResult, a.rsinfo->setDesc, out, isnull);
        if (matched < (uint64)ncand && DatumGetInt64(out[1]) == cand[matched]) ++matched;
    }
    for (int i = (int)matched; i < ncand; ++i) pg::unlock_item(cand[i]);
    return (int)got;
}

// How many dead heads one call moves past before it gives up on the group.
constexpr int kMaxHeadRounds = 8;

// Claim the named group if its head is ready and free.
// Reading and claiming write only WAL that needs no flush at commit besides
// unlogged rows (see claim_round in claims.cpp): forgotten between
// pg::wal_mark() and pg::wal_forget(), so that a group claim commits
// asynchronously. Items made dead are logged writes and stay outside.
int claim_named_group(const ClaimArgs &a, Datum gkey) {
    uint64 wal = pg::wal_mark();
    int claimed = 0;
    for (int round = 0; round < kMaxHeadRounds; ++round) {
        Datum v[2] = {Int32GetDatum(a.q->queue_id), gkey};
        if (pg::run(s_group_head, v, nullptr) == 0) break;
        bool isnull, lease_null;
        int64 head = pg::col_int64(0, 1);
        if (!DatumGetBool(pg::col(0, 2, &isnull))) break;  // scheduled
        TimestampTz lease_until = DatumGetTimestampTz(pg::col(0, 3, &lease_null));
        if (!lease_null && lease_until > a.now) break;  // claimed
        if (!lease_null && pg::col_int32(0, 4) >= a.q->max_attempts) {
            if (!pg::lock_item(head, false)) break;
            pg::wal_forget(wal);
            shmem::count_killed(a.q->queue_id, pg::kill_dead(&head, 1, a.now));
            wal = pg::wal_mark();
            continue;  // the next item is the head now
        }
        if (!pg::lock_item(head, false)) break;  // another claimer is on it
        claimed = take_group(a, head, gkey, false, &wal);
        break;
    }
    pg::wal_forget(wal);
    return claimed;
}

// Walk the ready items in delivery order; claim the group of the first free head.
int claim_first_group(const ClaimArgs &a) {
    const int32 qid = a.q->queue_id;
    api::ReadyWalk w;
    api::walk_begin(&w, qid, a.q->max_attempts, a.now);
    int claimed = 0;

    // The walk reads the tables directly (see pg/direct.hpp); the claim of
    // the group found (take_group) re-checks everything under the locks.
    direct::Tables *t = direct::open(direct::Mode::Claim);
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
        claimed = take_group(a, id, gcopy, gk_null, &wal);
    }
    direct::ready_end(scan);
    direct::release(snap);
    direct::close(t);
    pg::wal_forget(wal);
    api::walk_end(&w);
    return claimed;
}

int group_round(ClaimArgs &a, int64 lease_us, bool named, Datum gkey) {
    a.now = pg::clock_now();
    a.lease_until = a.now + lease_us;
    // Due scheduled items become ready (in place, keeping their id). A group
    // claim looks every time: a group is held back by a scheduled head, so
    // a due head must not wait for this backend's promotion schedule.
    api::promote_due(a.q->queue_id, a.now);
    int claimed = named ? claim_named_group(a, gkey) : claim_first_group(a);
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
        // A queue being dropped (drop_queue waits for this transaction and
        // wakes it): the call ends with the unknown-queue error. A queue
        // dropped meanwhile is looked up again, which raises when it is gone.
        if (shmem::drop_pending(direct::items_relid(), q.queue_id)) api::unknown_queue(name);
        if (shmem::queue_drops() != drops) {
            drops = shmem::queue_drops();
            q = api::lookup_queue(name);
        }
    }
    SPI_finish();
    return (Datum)0;
}
