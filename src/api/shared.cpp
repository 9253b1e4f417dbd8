// Helpers shared by the SQL surfaces in src/api.
#include "api/shared.hpp"
#include "shmem/frontier.hpp"

#include "api/hints.hpp"
#include "pg/direct.hpp"
#include "pg/duties.hpp"
#include "pg/lineage.hpp"
#include "core/error.hpp"
#include "shmem/wakeup.hpp"

extern "C" {
#include "catalog/namespace.h"
#include "utils/lsyscache.h"
}
#include "core/queue_cache.hpp"

namespace pgclaim::api {

namespace {
pg::Stmt s_lookup = {
    "SELECT queue_id, lease, max_attempts, paused FROM claim.queues WHERE name = $1", 1,
    {TEXTOID}, nullptr};
// A 0.1.0 catalog not yet updated has no paused column.
pg::Stmt s_lookup_v1 = {
    "SELECT queue_id, lease, max_attempts, false FROM claim.queues WHERE name = $1", 1,
    {TEXTOID}, nullptr};
}  // namespace

QueueInfo lookup_queue(const char *name) {
    Datum v[1] = {CStringGetTextDatum(name)};
    if (pg::run(pg::lifecycle_catalog() ? s_lookup : s_lookup_v1, v, nullptr) == 0)
        unknown_queue(name);
    bool isnull;
    QueueInfo q;
    q.queue_id = pg::col_int32(0, 1);
    q.lease_us = pg::interval_us(DatumGetIntervalP(pg::col(0, 2, &isnull)), "lease");
    q.max_attempts = pg::col_int32(0, 3);
    q.paused = DatumGetBool(pg::col(0, 4, &isnull));
    return q;
}

namespace {
QueueCache &queue_cache() {
    static QueueCache c;
    return c;
}
ProducerQueues &producer_queues() {
    static ProducerQueues c;
    return c;
}
void register_xact_callbacks();
}  // namespace

QueueInfo lookup_queue_cached(const char *name) {
    sync_caches();
    int64 now = pg::clock_now();
    uint64 epoch = shmem::queue_changes();
    bool hit = false;
    QueueDef def = {0, 0, 0, false};
    pg::pure([&] {
        if (auto d = queue_cache().get(name, now, epoch)) {
            def = *d;
            hit = true;
        }
    });
    if (hit) return QueueInfo{def.queue_id, def.lease_us, def.max_attempts, def.paused};
    QueueInfo q = lookup_queue(name);
    def = QueueDef{q.queue_id, q.lease_us, q.max_attempts, q.paused};
    pg::pure([&] { queue_cache().put(name, def, now, epoch); });
    return q;
}

void sync_caches() {
    static Oid seen = InvalidOid;
    Oid rel = pg::direct::items_relid();
    if (rel == seen) return;
    seen = rel;
    pg::pure([&] {
        queue_cache().clear();
        producer_queues().clear();
        hints().forget_all();
        promote_schedule().forget_all();
    });
}

int32 producer_queue(void *direct_tables, Datum name, const char *cname) {
    sync_caches();
    uint64 epoch = shmem::queue_drops();
    int32 qid = -1;
    bool hit = false;
    pg::pure([&] {
        if (auto id = producer_queues().get(cname, epoch)) {
            qid = *id;
            hit = true;
        }
    });
    if (hit) return qid;
    auto *t = (pg::direct::Tables *)direct_tables;
    Snapshot snap = pg::direct::latest();
    qid = pg::direct::queue_id(t, name, snap);
    pg::direct::release(snap);
    if (qid < 0) unknown_queue(cname);
    // A queue created by this transaction is forgotten if it rolls back.
    register_xact_callbacks();
    pg::pure([&] { producer_queues().put(cname, qid, epoch); });
    return qid;
}

void forget_queues() {
    pg::pure([&] {
        queue_cache().clear();
        producer_queues().clear();
    });
}

namespace {
// 2^32: more tokens than a server could hand out between two WAL flushes.
pg::Stmt s_token_jump = {
    "SELECT pg_catalog.setval('claim.token_seq',"
    "                         pg_catalog.nextval('claim.token_seq') + 4294967296)",
    0, {}, nullptr};
}  // namespace

void before_tokens() {
    if (!shmem::preloaded() || shmem::tokens_fenced()) return;
    pg::run(s_token_jump, nullptr, nullptr);
    pg::flush_token_wal();
    shmem::mark_tokens_fenced();
}

void after_tokens() {
    if (!shmem::preloaded()) pg::flush_token_wal();
}

void promote_due(int32 queue_id, TimestampTz now) {
    TimestampTz next;
    if (pg::promote_queue(queue_id, now, &next) > 0) forget_hints(queue_id);
    pg::pure([&] {
        promote_schedule().checked(queue_id, now,
                                   next == DT_NOEND ? std::nullopt : std::optional<int64_t>(next));
    });
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
    pg::pure([&] {
        int64_t e = INT64_MAX;
        if (auto s = hints().start(queue_id, now, &e)) {
            start = *s;
            from_head = false;
            own_expires = e;
        }
    });
    // What this walk publishes holds no longer than where it started.
    w->start_expires = own_expires;
    // Between its own walks from the head, a backend starts at the shared
    // frontier when that is further on (see worker/frontier.hpp).
    ScanPos f;
    TimestampTz f_expires;
    if (!from_head &&
        shmem::frontier_get(pg::direct::items_relid(), queue_id, now, &f, &f_expires) &&
        (f.ord > start.ord || (f.ord == start.ord && f.id > start.id))) {
        start = f;
        w->start_expires = f_expires;
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
    nadvanced = 0;
    advanced_overflow = false;
}

void on_xact_end(XactEvent event, void *) {
    if (event == XACT_EVENT_ABORT || event == XACT_EVENT_PARALLEL_ABORT) {
        forget_on_abort();
    } else if (event == XACT_EVENT_COMMIT || event == XACT_EVENT_PARALLEL_COMMIT ||
               event == XACT_EVENT_PREPARE) {
        nadvanced = 0;
        advanced_overflow = false;
    }
}

void on_subxact_end(SubXactEvent event, SubTransactionId, SubTransactionId, void *) {
    if (event == SUBXACT_EVENT_ABORT_SUB) forget_on_abort();
}

void register_xact_callbacks() {
    static bool registered = false;
    if (!registered) {
        RegisterXactCallback(on_xact_end, nullptr);
        RegisterSubXactCallback(on_subxact_end, nullptr);
        registered = true;
    }
}

void note_advanced(int32 queue_id) {
    register_xact_callbacks();
    advanced_items = pg::direct::items_relid();
    for (int i = 0; i < nadvanced; ++i)
        if (advanced_queues[i] == queue_id) return;
    if (nadvanced == kMaxAdvanced)
        advanced_overflow = true;
    else
        advanced_queues[nadvanced++] = queue_id;
}
}  // namespace

void walk_claimed(ReadyWalk *w, ScanPos pos, TimestampTz lease_until) {
    if (!w->hint_have || !(w->hint_pos == pos)) return;
    w->hint_pos = ScanPos{pos.ord, pos.id + 1};  // (ord, id) >= this: strictly after
    if (lease_until < w->claims_end) w->claims_end = lease_until;
    w->advanced = true;
}

void walk_kill_dead(ReadyWalk *w) {
    (void)pg::kill_dead(w->dead, w->ndead, w->now);
    w->ndead = 0;
}

void walk_end(ReadyWalk *w) {
    walk_kill_dead(w);
    if (!w->hint_done) w->walk_us = GetCurrentTimestamp() - w->t0;
    // A position reached from the shared frontier holds only as long as
    // the frontier did.
    if (w->start_expires < w->claims_end) w->claims_end = w->start_expires;
    if (w->advanced) note_advanced(w->queue_id);
    ReadyWalk c = *w;
    pg::pure([&] {
        hints().record(c.queue_id, c.from_head,
                       c.hint_have ? std::optional<ScanPos>(c.hint_pos) : std::nullopt, c.walk_us,
                       c.now, c.claims_end);
    });
    if (c.hint_have)
        shmem::frontier_put(pg::direct::items_relid(), c.queue_id, c.hint_pos, c.now,
                             c.claims_end);
}

void check_key_length(const text *key, const char *what) {
    size_t len = VARSIZE_ANY_EXHDR(key);
    if (len == 0 || len > (size_t)kMaxKeyBytes)
        pg::error({ERRCODE_INVALID_PARAMETER_VALUE}, "%s must be 1 to %d bytes long", what,
                  kMaxKeyBytes);
}

int64 token_arg(FunctionCallInfo fcinfo, int argno, const char *fn) {
    pg::require_arg(fcinfo, argno, "token");
    pg::require_primary(fn);
    return PG_GETARG_INT64(argno);
}

void unknown_queue(const char *name) {
    pg::error({ERRCODE_UNDEFINED_OBJECT, "Create it with claim.create_queue()."},
              "queue \"%s\" does not exist", name);
}

bool wait_for_items(int32 queue_id, TimestampTz deadline) {
    TimestampTz now = pg::clock_now();
    if (now >= deadline) return false;
    if (shmem::wait_for(shmem::WaitKind::Queue, queue_id, (long)((deadline - now + 999) / 1000)))
        pg::pure([&] { hints().forget(queue_id); });
    return true;
}

void forget_hints(int32 queue_id) {
    pg::pure([&] { hints().forget(queue_id); });
    shmem::frontier_forget(pg::direct::items_relid(), queue_id);
}

void stale_token(int64 token, const char *why) {
    pg::error({pg::kStaleToken,
               "The lease expired, or the item was re-claimed, completed, failed or released. "
               "Discard this worker's result; the item is (or will be) delivered again under a "
               "new token.",
               why},
              "token %lld is not a live claim", (long long)token);
}

}  // namespace pgclaim::api
