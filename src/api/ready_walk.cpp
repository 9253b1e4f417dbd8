// The walk over a queue's ready items (claim_next, group_claim), the
// promotion of due scheduled items before it and the wait for items after
// it: see ready_walk.hpp.
#include "api/ready_walk.hpp"

#include "api/caches.hpp"
#include "api/tokens.hpp"
#include "shmem/shared.hpp"
#include "shmem/frontier.hpp"

#include "pg/item_locks.hpp"
#include "pg/direct.hpp"
#include "pg/duties.hpp"
#include "pg/lineage.hpp"
#include "core/error.hpp"
#include "shmem/wakeup.hpp"
#include "shmem/metrics.hpp"

extern "C" {
#include "catalog/namespace.h"
#include "utils/lsyscache.h"
}
#include "core/queue_cache.hpp"

namespace pgclaim::api {

void promote_due(int32 queue_id, TimestampTz now) {
    TimestampTz next;
    if (pg::promote_queue(queue_id, now, &next) > 0) forget_hints(queue_id);
    pg::call_core([&] {
        promote_schedule().checked(queue_id, now,
                                   next == DT_NOEND ? std::nullopt : std::optional<int64_t>(next));
    });
}

bool wait_for_items(int32 queue_id, TimestampTz deadline, TimestampTz wake_at) {
    TimestampTz now = pg::clock_now();
    if (now >= deadline) return false;
    TimestampTz until = wake_at > 0 && wake_at < deadline ? wake_at : deadline;
    if (until <= now) return true;  // look again at once
    if (shmem::wait_for(shmem::WaitKind::Queue, queue_id, (long)((until - now + 999) / 1000)))
        pg::call_core([&] { hints().forget(queue_id); });
    return true;
}

void walk_begin(ReadyWalk *w, int32 queue_id, int32 max_attempts, TimestampTz now) {
    w->queue_id = queue_id;
    w->max_attempts = max_attempts;
    w->now = now;
    w->from_head = true;
    w->start = ScanPos{0, 0};
    w->start_expires = PG_INT64_MAX;
    ScanPos start = w->start;
    bool from_head = true;
    int64 own_expires = PG_INT64_MAX;
    shmem::Frontier f = shmem::frontier_get(pg::direct::items_relid(), queue_id, now);
    uint64 epoch = f.epoch;
    w->epoch = epoch;
    pg::call_core([&] {
        int64_t e = INT64_MAX;
        if (auto s = hints().start(queue_id, now, &e, epoch)) {
            start = *s;
            from_head = false;
            own_expires = e;
        }
    });
    // What this walk publishes holds no longer than where it started.
    w->start_expires = own_expires;
    // A backend starts at the shared frontier when that is further on than
    // its own position (see shmem/frontier.hpp); when its own walk from the
    // head is due, it starts there too while another backend's recent walk
    // from the head vouches for the frontier: one walk from the head per
    // validity period for the queue, not one per backend.
    if (f.valid && (from_head ? now < f.head_until
                              : (f.pos.ord > start.ord ||
                                 (f.pos.ord == start.ord && f.pos.id > start.id)))) {
        start = f.pos;
        from_head = false;
        w->start_expires = f.expires;
    }
    w->start = start;
    w->from_head = from_head;
    w->hint_have = w->hint_done = false;
    w->hint_pos = start;
    w->claims_end = PG_INT64_MAX;
    w->walk_us = 0;
    w->t0 = GetCurrentTimestamp();
    w->dead_cap = 16;
    w->ndead = 0;
    w->dead = (int64 *)palloc(sizeof(int64) * w->dead_cap);
    w->advanced = false;
}

bool walk_step(ReadyWalk *w, ScanPos pos, bool has_claim, TimestampTz lease_until, int32 attempt) {
    bool live = has_claim && lease_until > w->now;
    w->before_step = {w->hint_have, w->hint_done, w->hint_pos, w->walk_us};
    if (!w->hint_done) {
        // The next walk may start at the first item that is not under a
        // live claim; the claims passed over bound how long.
        w->hint_pos = pos;
        w->hint_have = true;
        if (live) {
            if (lease_until < w->claims_end) w->claims_end = lease_until;
        } else {
            w->hint_done = true;
            w->walk_us = GetCurrentTimestamp() - w->t0;  // what reaching it cost
        }
    }
    if (live) return false;
    if (has_claim && attempt >= w->max_attempts) {
        if (pg::lock_item(pos.id, false)) {
            if (w->ndead == w->dead_cap) {
                w->dead_cap *= 2;
                w->dead = (int64 *)repalloc(w->dead, sizeof(int64) * w->dead_cap);
            }
            w->dead[w->ndead++] = pos.id;
        }
        return false;
    }
    return true;
}

void walk_claimed(ReadyWalk *w, ScanPos pos, TimestampTz lease_until) {
    // Other walks may pass this item while it is locked (walk_pass_busy):
    // should this transaction roll back, its abort forgets the queue's
    // positions everywhere (forget_on_abort).
    w->advanced = true;
    if (!w->hint_have || !(w->hint_pos == pos)) return;
    w->hint_pos = ScanPos{pos.ord, pos.id + 1};  // (ord, id) >= this: strictly after
    if (lease_until < w->claims_end) w->claims_end = lease_until;
}

bool walk_frontier_passed(const ReadyWalk *w, ScanPos pos, ScanPos *to, TimestampTz *expires) {
    if (w->from_head) return false;  // a walk from the head vouches for what it read
    shmem::Frontier f = shmem::frontier_get(pg::direct::items_relid(), w->queue_id, w->now);
    if (!f.valid || f.epoch != w->epoch) return false;
    if (!(f.pos.ord > pos.ord || (f.pos.ord == pos.ord && f.pos.id > pos.id))) return false;
    *to = f.pos;
    *expires = f.expires;
    return true;
}

void walk_jumped(ReadyWalk *w, ScanPos to, TimestampTz expires) {
    if (expires < w->start_expires) w->start_expires = expires;
    if (!w->hint_done) {
        w->hint_pos = to;
        w->hint_have = true;
    }
}

void walk_lost_race(ReadyWalk *w, ScanPos pos) {
    w->hint_have = w->before_step.have;
    w->hint_done = w->before_step.done;
    w->hint_pos = w->before_step.pos;
    w->walk_us = w->before_step.walk_us;
    walk_pass_busy(w, pos);
}

void walk_pass_busy(ReadyWalk *w, ScanPos pos) {
    if (w->hint_done) return;
    w->hint_pos = pos;
    w->hint_have = true;
}

void walk_kill_dead(ReadyWalk *w) {
    shmem::count_killed(w->queue_id, pg::kill_dead(w->dead, w->ndead, w->now));
    w->ndead = 0;
}

void walk_end(ReadyWalk *w) {
    walk_kill_dead(w);
    if (!w->hint_done) w->walk_us = GetCurrentTimestamp() - w->t0;
    // A position reached from the shared frontier holds only as long as
    // the frontier did.
    if (w->start_expires < w->claims_end) w->claims_end = w->start_expires;
    if (w->advanced) forget_on_abort_of(w->queue_id);
    ReadyWalk c = *w;
    pg::call_core([&] {
        hints().record(c.queue_id, c.from_head,
                       c.hint_have ? std::optional<ScanPos>(c.hint_pos) : std::nullopt, c.walk_us,
                       c.now, c.claims_end, c.epoch);
    });
    if (c.hint_have) {
        TimestampTz head_until = 0;
        if (c.from_head) pg::call_core([&] { head_until = c.now + ScanHints::validity_us(c.walk_us); });
        shmem::frontier_put(pg::direct::items_relid(), c.queue_id, c.hint_pos, c.now,
                            c.claims_end, c.epoch, head_until);
    }
}

void grant_claim(pg::direct::Tables *t, const ClaimGrant &g, int64 id,
                 const pg::direct::ItemRow &it, int64 token, int32 attempt, bool one_item) {
    ItemPointerData claim_tid;
    // A token of one item only (claim_next's) is remembered for its
    // completion (remember_grant); group_claim's cover several.
    if (pg::direct::claim_insert(t, id, g.queue_id, token, attempt, g.lease_until, g.now,
                                 g.worker, g.worker_null, &it.tid, &claim_tid) &&
        one_item)
        remember_grant(token, id, &claim_tid);
    // Should the claim roll back, the item is ready again at once.
    shmem::notify_if_aborted(shmem::WaitKind::Queue, g.queue_id, 1);
    Datum out[8] = {g.qname,
                    Int64GetDatum(id),
                    Int64GetDatum(token),
                    it.group_key,
                    it.payload,
                    Int32GetDatum(attempt),
                    TimestampTzGetDatum(it.enqueued_at),
                    TimestampTzGetDatum(g.lease_until)};
    bool isnull[8] = {false, false, false, it.group_null, false, false, false, false};
    tuplestore_putvalues(g.rsinfo->setResult, g.rsinfo->setDesc, out, isnull);
}

}  // namespace pgclaim::api
