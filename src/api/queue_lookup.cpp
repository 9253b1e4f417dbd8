// Queues by name, through the backend's caches (caches.hpp): see queue_lookup.hpp.
#include "api/queue_lookup.hpp"

#include "api/caches.hpp"
#include "pg/direct.hpp"
#include "pg/lineage.hpp"
#include "shmem/drops.hpp"
#include "shmem/epochs.hpp"

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
    // A queue created by this transaction is forgotten if it rolls back
    // (caches.hpp, producer_queues).
    pg::call_core([&] { producer_queues().put(cname, qid, epoch); });
    return qid;
}

namespace {
// A queue whose name differs from `name` in case only, or nullptr. Runs on
// an SPI connection of its own (the caller may hold one).
char *queue_named_alike(const char *name) {
    char *found = nullptr;
    MemoryContext cxt = CurrentMemoryContext;
    if (SPI_connect() != SPI_OK_CONNECT) return nullptr;
    Oid types[1] = {TEXTOID};
    Datum v[1] = {CStringGetTextDatum(name)};
    if (SPI_execute_with_args("SELECT q.name FROM claim.queues q WHERE pg_catalog.lower(q.name) "
                              "OPERATOR(pg_catalog.=) pg_catalog.lower($1) "
                              "ORDER BY q.name COLLATE \"C\" LIMIT 1",
                              1, types, v, nullptr, true, 1) == SPI_OK_SELECT &&
        SPI_processed == 1) {
        char *n = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);
        if (n != nullptr) found = MemoryContextStrdup(cxt, n);
    }
    SPI_finish();
    return found;
}
}  // namespace

void unknown_queue(const char *name) {
    char *alike = queue_named_alike(name);
    if (alike != nullptr)
        pg::error({ERRCODE_UNDEFINED_OBJECT,
                   psprintf("Queue names are case-sensitive: did you mean \"%s\"?", alike)},
                  "queue \"%s\" does not exist", name);
    pg::error({ERRCODE_UNDEFINED_OBJECT, "Create it with claim.create_queue()."},
              "queue \"%s\" does not exist", name);
}

void recheck_after_wait(const char *name, QueueInfo *q, uint64 *drops) {
    if (shmem::drop_pending(pg::direct::items_relid(), q->queue_id)) unknown_queue(name);
    if (shmem::queue_drops() != *drops) {
        *drops = shmem::queue_drops();
        *q = lookup_queue(name);
    }
}

}  // namespace pgclaim::api
