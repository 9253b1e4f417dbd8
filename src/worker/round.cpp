// One round of a database's worker: promote due scheduled items, kill items
// whose last allowed lease expired, wake waiters of queues whose claims
// expired and of leases whose holders expired, purge old lease holdings,
// and send one coalesced NOTIFY per queue that producers made ready.
#include "worker/round.hpp"

#include "worker/coordination.hpp"

#include "pg/item_locks.hpp"
#include "pg/duties.hpp"
#include "pg/lineage.hpp"
#include "pg/schedule_fire.hpp"
#include "pg/steps_store.hpp"
#include "pg/switchover.hpp"
#include "pg/worker_txn.hpp"
#include "shmem/notify.hpp"
#include "shmem/wakeup.hpp"
#include "shmem/metrics.hpp"

extern "C" {
#include "catalog/namespace.h"
#include "common/hashfn.h"
#include "pgstat.h"
#include "utils/lsyscache.h"
}

namespace pgclaim::worker {

using namespace pgclaim::shmem;
using pg::Stmt;

namespace {

constexpr int kMaxReadyQueues = 1024;            // queues counted per round
constexpr int64 kBusyRetryUs = 10 * 1000;        // a dead item was locked: look again soon
constexpr int64 kPurgeEveryUs = 60 * USECS_PER_SEC;  // lease purge: at most this seldom...
constexpr int64 kPurgeMinEveryUs = USECS_PER_SEC;    // ...and at least this seldom

// Claims that expired since the last look: their items are claimable again.
Stmt s_expired = {
    "SELECT queue_id, count(*)::int8 FROM claim.claims "
    "WHERE lease_until <= $1 AND lease_until > $2 GROUP BY queue_id",
    2, {TIMESTAMPTZOID, TIMESTAMPTZOID}, nullptr};

Stmt s_next = {
    "SELECT (SELECT min(lease_until) FROM claim.claims WHERE lease_until > $1),"
    "       (SELECT min(x.run_at) FROM claim.queues q CROSS JOIN LATERAL ("
    "          SELECT i.run_at FROM claim.items i WHERE i.queue_id = q.queue_id"
    "            AND i.state = 'r' AND i.run_at IS NOT NULL ORDER BY i.run_at LIMIT 1) x)",
    1, {TIMESTAMPTZOID}, nullptr};

Stmt s_notify = {
    "SELECT pg_catalog.pg_notify('pg_claim', q.name) FROM claim.queues q "
    "WHERE $2 OR q.queue_id = ANY ($1)",
    2, {INT4ARRAYOID, BOOLOID}, nullptr};

// Leases (claim.lease_holders, sql/pg_claim--0.1.0.sql): holders that expired since the last
// look free their slots; the next expiry bounds the sleep.
Stmt s_lease_expired = {
    "SELECT name, count(*)::int8 FROM claim.lease_holders "
    "WHERE expires_at <= $1 AND expires_at > $2 GROUP BY name",
    2, {TIMESTAMPTZOID, TIMESTAMPTZOID}, nullptr};
Stmt s_lease_next = {"SELECT min(expires_at) FROM claim.lease_holders WHERE expires_at > $1", 1,
                     {TIMESTAMPTZOID}, nullptr};

// Holdings released or expired more than $1 ago (never a live one), at most
// kPurgeBatch per round, as claim.lease_purge(). A holder granted, renewed
// or released meanwhile is a new row version with another ctid: the DELETE
// re-checks the join on it and leaves it.
constexpr int64 kPurgeBatch = 10000;
Stmt s_lease_purge = {
    "WITH cand AS ("
    "  SELECT h.ctid FROM claim.lease_holders h"
    "  WHERE h.expires_at < $1"
    "     OR (h.acquired_at < $1 AND EXISTS ("
    "          SELECT 1 FROM claim.lease_released r"
    "          WHERE r.name = h.name AND r.slot = h.slot AND r.token = h.token))"
    "  LIMIT $2"
    "), d AS ("
    "  DELETE FROM claim.lease_holders h USING cand WHERE h.ctid = cand.ctid"
    "  RETURNING h.name, h.slot"
    "), r AS ("
    "  DELETE FROM claim.lease_released r USING d WHERE r.name = d.name AND r.slot = d.slot"
    ") SELECT count(*)::int8 FROM d",
    2, {TIMESTAMPTZOID, INT8OID}, nullptr};

// When the last purge round ran (this worker process).
TimestampTz last_purge = 0;

// Durable steps (pg/steps_store.hpp): the checkpoints of items that are
// gone, old events and orphaned waits go, looked for every 10 seconds (at
// once again after a full batch).
constexpr int64 kStepsPurgeEveryUs = 10 * USECS_PER_SEC;
TimestampTz last_steps_purge = 0;

void steps_duties(TimestampTz now, TimestampTz *next) {
    if (now - last_steps_purge < kStepsPurgeEveryUs || !pg::steps_catalog()) return;
    int64 purged = pg::purge_steps(now);
    last_steps_purge = purged >= pg::kStepsPurgeBatch ? 0 : now;
    if (purged >= pg::kStepsPurgeBatch) *next = now;
}

bool have_leases() {
    Oid nsp = get_namespace_oid("claim", true);
    return OidIsValid(nsp) && OidIsValid(get_relname_relid("lease_holders", nsp));
}

struct QueueCount {
    int32 queue_id;
    int64 count;
};

struct ReadyList {
    QueueCount q[kMaxReadyQueues];
    int n;
};

// Adds (queue, count); queues beyond kMaxReadyQueues are not counted.
void add_count(ReadyList *list, int32 queue_id, int64 count) {
    for (int i = 0; i < list->n; ++i)
        if (list->q[i].queue_id == queue_id) {
            list->q[i].count += count;
            return;
        }
    if (list->n < kMaxReadyQueues) list->q[list->n++] = QueueCount{queue_id, count};
}

// Adds the (queue_id, count) rows of SPI_tuptable; returns their sum. With
// `expired`, the rows are expired claims and are counted as such (metrics).
int64 add_counts(ReadyList *list, uint64 rows, TimestampTz now, TimestampTz *next,
                 bool expired = false) {
    int64 sum = 0;
    for (uint64 r = 0; r < rows; ++r) {
        int64 c = pg::col_int64(r, 2);
        add_count(list, pg::col_int32(r, 1), c);
        if (expired) count(pg::col_int32(r, 1), Metric::Expired, c);
        sum += c;
        if (next != nullptr && c >= pg::kDutyBatch) *next = now;  // more are due: go on at once
    }
    pg::free_result();
    return sum;
}

// Items whose last allowed lease expired become dead. Returns how many.
int64 kill_dead_items(TimestampTz now, TimestampTz *next) {
    uint64 rows = pg::find_dead(now);
    if (rows == 0) return 0;
    int64 *ids = (int64 *)palloc(sizeof(int64) * rows);
    int nids = 0;
    for (uint64 r = 0; r < rows; ++r) {
        int64 id = pg::col_int64(r, 1);
        if (pg::lock_item(id, false))
            ids[nids++] = id;
        else
            *next = now + kBusyRetryUs;
    }
    pg::free_result();
    if (rows >= (uint64)pg::kDutyBatch) *next = now;
    int32 *queues = (int32 *)palloc(sizeof(int32) * (nids > 0 ? nids : 1));
    int64 killed = pg::kill_dead(ids, nids, now, queues);
    for (int64 i = 0; i < killed; ++i) count_killed(queues[i], 1);
    return killed;
}

// The earlier of *next and the timestamp in column `colno` of row 0.
void earliest(TimestampTz *next, int colno) {
    bool isnull;
    Datum t = pg::col(0, colno, &isnull);
    if (!isnull && DatumGetTimestampTz(t) < *next) *next = DatumGetTimestampTz(t);
}

// Lease holders that expired: wake waiters of those names (the key is the
// lease's wake key: a 64-bit hash of the name's bytes); then purge old
// holdings, looked for once a minute (or once per lease_purge_after when
// that is shorter, at least once a second).
void lease_duties(DbSlot *slot, TimestampTz now, TimestampTz last_expiry, TimestampTz *next) {
    Datum v[2] = {TimestampTzGetDatum(now), TimestampTzGetDatum(last_expiry)};
    uint64 rows = pg::run(s_lease_expired, v, nullptr);
    for (uint64 r = 0; r < rows; ++r) {
        bool isnull;
        text *t = DatumGetTextPP(pg::col(r, 1, &isnull));
        uint64 key = hash_bytes_extended((const unsigned char *)VARDATA_ANY(t),
                                         (int)VARSIZE_ANY_EXHDR(t), 0);
        notify_ready(WaitKind::Lease, (int64)key, pg::col_int64(r, 2));
    }
    pg::free_result();
    pg::run(s_lease_next, v, nullptr);
    earliest(next, 1);
    pg::free_result();
    if (guc_lease_purge_after_s < 0) return;
    int64 after_us = (int64)guc_lease_purge_after_s * USECS_PER_SEC;
    int64 every_us = after_us < kPurgeEveryUs ? after_us : kPurgeEveryUs;
    if (every_us < kPurgeMinEveryUs) every_us = kPurgeMinEveryUs;
    if (now - last_purge < every_us) return;
    Datum pv[2] = {TimestampTzGetDatum(now - after_us), Int64GetDatum(kPurgeBatch)};
    pg::run(s_lease_purge, pv, nullptr);
    int64 purged = pg::col_int64(0, 1);
    pg::free_result();
    slot->purged += purged;
    // A full batch: more are waiting, go on at the next round.
    last_purge = purged >= kPurgeBatch ? 0 : now;
    if (purged >= kPurgeBatch) *next = now;
}

// One NOTIFY per queue made ready, by producers or by this round.
void send_notifies(DbSlot *slot, const ReadyList *ready) {
    int32 *qids = (int32 *)palloc(sizeof(int32) * (kNotifyQueues + kMaxReadyQueues));
    bool all;
    int nq = take_notify_queues(slot, qids, &all);
    for (int i = 0; i < ready->n; ++i) qids[nq++] = ready->q[i].queue_id;
    if (!all && nq == 0) return;
    Datum *d = (Datum *)palloc(sizeof(Datum) * (nq > 0 ? nq : 1));
    for (int i = 0; i < nq; ++i) d[i] = Int32GetDatum(qids[i]);
    Datum v[2] = {PointerGetDatum(construct_array(d, nq, INT4OID, 4, true, TYPALIGN_INT)),
                  BoolGetDatum(all)};
    slot->notifies += pg::run(s_notify, v, nullptr);
    pg::free_result();
}

}  // namespace

bool run_round(DbSlot *slot, bool duties, TimestampTz *last_expiry, TimestampTz *next) {
    // In the caller's context: it outlives the duties' transaction.
    ReadyList *ready = (ReadyList *)palloc(sizeof(ReadyList));
    ready->n = 0;
    pg::worker_txn_begin(duties ? "pg_claim worker: expiry, schedules, wake-ups"
                                : "pg_claim worker: wake-ups");
    // The extension may be dropped concurrently: hold its object lock while
    // working, and look again once we have it.
    if (!pg::lock_extension()) {
        pg::worker_txn_commit();
        pgstat_report_activity(STATE_IDLE, nullptr);
        return false;
    }

    TimestampTz now = GetCurrentTimestamp();
    int64 counts[3] = {0, 0, 0};  // promoted, expired, killed: counted once committed
    // The subscriber of a logical replication of pg_claim's tables does no
    // duties until the switchover: the source does them, and what they
    // change arrives by the subscription (docs/operations.md).
    if (duties && pg::switchover::copy_in_progress()) {
        *next = now + (int64)guc_worker_naptime_ms * 1000;
        duties = false;
    }
    if (duties) {
        *next = now + (int64)guc_worker_naptime_ms * 1000;
        // Scheduled items that are due become ready.
        int64 promoted = add_counts(ready, pg::promote_all_queues(now), now, next);
        // Items whose last allowed lease expired are dead.
        int64 killed = kill_dead_items(now, next);
        // The other expired claims: their items are claimable again.
        Datum v[2] = {TimestampTzGetDatum(now), TimestampTzGetDatum(*last_expiry)};
        int64 expired = add_counts(ready, pg::run(s_expired, v, nullptr), now, nullptr, true);
        // Due schedules enqueue their items (claim.enqueue wakes claimers at commit).
        (void)pg::fire_schedules(now, next);
        if (have_leases()) lease_duties(slot, now, *last_expiry, next);
        steps_duties(now, next);
        // Finished items past their queue's retention go (the history ring
        // moves on; dead items are deleted).
        (void)pg::rotate_history(now);
        if (pg::purge_expired_dead(now) >= pg::kDutyBatch) *next = now;
        *last_expiry = now;
        // When to look again.
        pg::run(s_next, v, nullptr);
        earliest(next, 1);
        earliest(next, 2);
        pg::free_result();
        // The token ceiling, for a subscriber of this database.
        pg::switchover::publish_token_mark();
        counts[0] = promoted;
        counts[1] = expired;
        counts[2] = killed;
    }

    // Waiters are woken when this transaction commits (shmem/wakeup.cpp).
    for (int i = 0; i < ready->n; ++i)
        notify_ready(WaitKind::Queue, ready->q[i].queue_id, ready->q[i].count);

    pg::worker_txn_commit();
    // Sessions that expired end, the watch log is trimmed: in a transaction
    // of their own, so that a failure there never undoes the duties above.
    if (duties) {
        pg::worker_txn_begin("pg_claim worker: sessions");
        if (pg::lock_extension()) coordination_duties(next);
        pg::worker_txn_commit();
    }
    if (duties) {
        slot->last_expiry = *last_expiry;  // the next worker of this database goes on from here
        slot->cycles++;
        slot->promoted += counts[0];
        slot->expired += counts[1];
        slot->killed += counts[2];
    }

    // The NOTIFYs in a transaction of their own: a full NOTIFY queue fails
    // only this one (at its commit), never the duties committed above.
    // Producers set notify_pending after adding their queues.
    if (guc_notify && (ready->n > 0 || notify_requested(slot))) {
        pg::worker_txn_begin("pg_claim worker: notify");
        send_notifies(slot, ready);
        pg::worker_txn_commit();
    }
    pgstat_report_stat(false);
    pgstat_report_activity(STATE_IDLE, nullptr);
    return true;
}

}  // namespace pgclaim::worker
