// The backend's caches: see caches.hpp.
#include "api/caches.hpp"
#include "api/tokens.hpp"

#include "pg/direct.hpp"
#include "shmem/frontier.hpp"
#include "shmem/shared.hpp"
#include "shmem/wakeup.hpp"

namespace pgclaim::api {

namespace {
// Whether this backend used a cache whose state a transaction's end must
// forget: until then the ends of its transactions have nothing to do.
bool in_use = false;
}  // namespace

// One of each per backend process, made on first use.
ScanHints &hints() { static ScanHints h; return h; }
PromoteSchedule &promote_schedule() { static PromoteSchedule p; return p; }
QueueCache &queue_cache() { static QueueCache c; return c; }
ProducerQueues &producer_queues() {
    static ProducerQueues c;
    in_use = true;
    return c;
}

void sync_caches() {
    static Oid seen = InvalidOid;
    Oid rel = pg::direct::items_relid();
    if (rel == seen) return;
    seen = rel;
    pg::call_core([&] {
        queue_cache().clear();
        producer_queues().clear();
        hints().forget_all();
        promote_schedule().forget_all();
    });
    forget_grants();  // a new extension's tokens start again
}

void forget_queues() {
    pg::call_core([&] {
        queue_cache().clear();
        producer_queues().clear();
    });
}

void enqueued_ready(int32 queue_id, int32 priority) {
    if (shmem::frontier_behind(pg::direct::items_relid(), queue_id, -priority))
        forget_at_commit(queue_id);
}

void forget_hints(int32 queue_id) {
    pg::call_core([&] { hints().forget(queue_id); });
    forget_empty(queue_id);
    shmem::frontier_forget(pg::direct::items_relid(), queue_id);
    forget_at_commit(queue_id);
}

// ---------------------------------------------------------------------------
// The memo of empty queues
// ---------------------------------------------------------------------------

namespace {
// At most this long after an empty scan ended another is skipped: the
// bound on what a path that makes items ready without a notification would
// delay. Counted from the end, so that a scan slower than this (a long walk
// over rows a pinned snapshot keeps) still spares the next ones.
constexpr int64 kEmptyUs = 100 * 1000;
constexpr int kEmptySlots = 16;
struct EmptyMemo {
    Oid install;
    int32 queue_id;
    TimestampTz since;  // when the empty scan started; 0: unused
    TimestampTz until;  // kEmptyUs after it ended
};
EmptyMemo empty_memo[kEmptySlots];

EmptyMemo *memo_of(int32 queue_id) {
    Oid install = pg::direct::items_relid();
    for (EmptyMemo &m : empty_memo)
        if (m.since != 0 && m.queue_id == queue_id && m.install == install) return &m;
    return nullptr;
}
}  // namespace

bool queue_seen_empty(int32 queue_id, TimestampTz now) {
    EmptyMemo *m = memo_of(queue_id);
    if (m == nullptr) return false;
    // The queue's stamp moves when a transaction that made items ready
    // commits; this transaction's own are visible to it already.
    if (now < m->until && now >= m->since && shmem::queue_quiet_since(queue_id, m->since) &&
        !shmem::ready_pending(shmem::WaitKind::Queue, queue_id))
        return true;
    m->since = 0;
    return false;
}

void remember_empty(int32 queue_id, TimestampTz scan_start) {
    if (!shmem::preloaded()) return;
    EmptyMemo *m = memo_of(queue_id);
    if (m == nullptr) {
        m = &empty_memo[0];
        for (EmptyMemo &e : empty_memo)
            if (e.since == 0 || e.since < m->since) m = &e;  // a free or the oldest
    }
    *m = EmptyMemo{pg::direct::items_relid(), queue_id, scan_start,
                   GetCurrentTimestamp() + kEmptyUs};
}

void forget_empty(int32 queue_id) {
    if (EmptyMemo *m = memo_of(queue_id)) m->since = 0;
}

// ---------------------------------------------------------------------------
// What the end of a transaction forgets
// ---------------------------------------------------------------------------

namespace {
// Queues whose hints moved past items claimed in the open transaction; on
// abort they are forgotten, and so are the producers' cached queue ids (a
// queue created by the aborted transaction is gone).
constexpr int kMaxAdvanced = 16;
int32 advanced_queues[kMaxAdvanced];
int nadvanced;
bool advanced_overflow;
Oid advanced_items;  // claim.items when they were noted

// Called from transaction callbacks: must not raise.
void forget_on_abort() noexcept {
    try {
        producer_queues().clear();
        if (advanced_overflow) hints().forget_all();
        for (int i = 0; i < nadvanced; ++i) hints().forget(advanced_queues[i]);
    } catch (...) {
    }
    for (int i = 0; i < nadvanced; ++i)
        shmem::frontier_forget(advanced_items, advanced_queues[i]);
    if (advanced_overflow) shmem::frontier_forget_all();
    nadvanced = 0;
    advanced_overflow = false;
}

// Queues whose items the open transaction makes ready behind positions
// (release, fail, redrive, ...): their frontiers are forgotten again once it
// commits, so a scan that ran in between publishes nothing past them.
int32 commit_queues[kMaxAdvanced];
int ncommit;
bool commit_overflow;
Oid commit_items;

void forget_at_end() {
    for (int i = 0; i < ncommit; ++i) shmem::frontier_forget(commit_items, commit_queues[i]);
    if (commit_overflow) shmem::frontier_forget_all();
}
}  // namespace

void forget_on_abort_of(int32 queue_id) {
    in_use = true;
    advanced_items = pg::direct::items_relid();
    for (int i = 0; i < nadvanced; ++i)
        if (advanced_queues[i] == queue_id) return;
    if (nadvanced == kMaxAdvanced)
        advanced_overflow = true;
    else
        advanced_queues[nadvanced++] = queue_id;
}

void forget_at_commit(int32 queue_id) {
    if (!IsTransactionState()) return;
    in_use = true;
    commit_items = pg::direct::items_relid();
    for (int i = 0; i < ncommit; ++i)
        if (commit_queues[i] == queue_id) return;
    if (ncommit < kMaxAdvanced)
        commit_queues[ncommit++] = queue_id;
    else
        commit_overflow = true;
}

void caches_at_xact_end(XactEvent event) {
    if (!in_use) return;
    if (event == XACT_EVENT_ABORT || event == XACT_EVENT_PARALLEL_ABORT ||
        event == XACT_EVENT_PREPARE) {
        // A prepared transaction may still roll back, in another session:
        // what it claimed is treated as given back now (while it stays
        // prepared, its items stay locked and scans stop at them).
        forget_on_abort();
        if (event == XACT_EVENT_PREPARE) forget_at_end();
        ncommit = 0;
        commit_overflow = false;
    } else if (event == XACT_EVENT_COMMIT || event == XACT_EVENT_PARALLEL_COMMIT) {
        forget_at_end();
        ncommit = 0;
        commit_overflow = false;
        nadvanced = 0;
        advanced_overflow = false;
    }
}

void caches_at_subxact_end(SubXactEvent event) {
    if (in_use && event == SUBXACT_EVENT_ABORT_SUB) forget_on_abort();
}

}  // namespace pgclaim::api
