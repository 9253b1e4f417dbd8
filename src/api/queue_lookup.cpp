// Queue lookup and the backend's caches of queues, shared by the SQL
// surfaces in src/api; also their common argument checks.
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
    "SELECT queue_id, lease, max_attempts, paused, coalesce(max_active, 0), group_limit,"
    "       coalesce(rate, 0), rate_per, rate_per_group "
    "FROM claim.queues WHERE name = $1",
    1, {TEXTOID}, nullptr};
// A 0.1.0 catalog not yet updated has none of the newer columns.
pg::Stmt s_lookup_v1 = {
    "SELECT queue_id, lease, max_attempts, false, 0, 1, 0, interval '1 second', false "
    "FROM claim.queues WHERE name = $1",
    1, {TEXTOID}, nullptr};
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
    q.max_active = pg::col_int32(0, 5);
    q.group_limit = pg::col_int32(0, 6);
    q.rate = pg::col_int32(0, 7);
    q.rate_per_us = pg::interval_us(DatumGetIntervalP(pg::col(0, 8, &isnull)), "rate_per");
    q.rate_per_group = DatumGetBool(pg::col(0, 9, &isnull));
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
}  // namespace

void forget_producer_queues() noexcept {
    try {
        producer_queues().clear();
    } catch (...) {
    }
}

QueueInfo lookup_queue_cached(const char *name) {
    sync_caches();
    int64 now = pg::clock_now();
    uint64 epoch = shmem::queue_changes();
    bool hit = false;
    QueueDef def{};
    pg::call_core([&] {
        if (auto d = queue_cache().get(name, now, epoch)) {
            def = *d;
            hit = true;
        }
    });
    if (hit) return def;
    QueueInfo q = lookup_queue(name);
    pg::call_core([&] { queue_cache().put(name, q, now, epoch); });
    return q;
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
}

int32 producer_queue(void *direct_tables, Datum name, const char *cname) {
    sync_caches();
    uint64 epoch = shmem::queue_drops();
    int32 qid = -1;
    bool hit = false;
    pg::call_core([&] {
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
    pg::call_core([&] { producer_queues().put(cname, qid, epoch); });
    return qid;
}

void forget_queues() {
    pg::call_core([&] {
        queue_cache().clear();
        producer_queues().clear();
    });
}

void check_key_length(const text *key, const char *what) {
    size_t len = VARSIZE_ANY_EXHDR(key);
    if (len == 0 || len > (size_t)kMaxKeyBytes)
        pg::error({ERRCODE_INVALID_PARAMETER_VALUE}, "%s must be 1 to %d bytes long", what,
                  kMaxKeyBytes);
}

void unknown_queue(const char *name) {
    pg::error({ERRCODE_UNDEFINED_OBJECT, "Create it with claim.create_queue()."},
              "queue \"%s\" does not exist", name);
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

void forget_hints(int32 queue_id) {
    pg::call_core([&] { hints().forget(queue_id); });
    forget_empty(queue_id);
    shmem::frontier_forget(pg::direct::items_relid(), queue_id);
}

}  // namespace pgclaim::api
