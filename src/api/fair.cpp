// Fair share between keys inside a queue; see fair.hpp and docs/fairness.md.
// SQL surface: claim.set_fair_weight, claim._fair_state (claim.fair_stats).
#include "api/fair.hpp"

#include "api/keys.hpp"
#include "api/caches.hpp"
#include "api/queue_lookup.hpp"
#include "core/fair.hpp"
#include "pg/direct_fair.hpp"
#include "pg/direct_read.hpp"
#include "shmem/epochs.hpp"
#include "shmem/fair.hpp"

extern "C" {
#include "common/hashfn.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
}

using namespace pgclaim;
using pgclaim::pg::Stmt;
namespace direct = pgclaim::pg::direct;

namespace {

Stmt s_flag = {"SELECT fair FROM claim.queues WHERE queue_id = $1", 1, {INT4OID}, nullptr};
Stmt s_key_find = {"SELECT key_id FROM claim.fair_keys WHERE queue_id = $1 AND fair_key = $2", 2,
                   {INT4OID, TEXTOID}, nullptr};
Stmt s_key_add = {
    "INSERT INTO claim.fair_keys (queue_id, fair_key) VALUES ($1, $2) "
    "ON CONFLICT (queue_id, fair_key) DO NOTHING RETURNING key_id",
    2, {INT4OID, TEXTOID}, nullptr};
Stmt s_mark = {"UPDATE claim.items SET fair_key_id = $2 WHERE id = ANY ($1)", 2,
               {INT8ARRAYOID, INT4OID}, nullptr};
Stmt s_set_flag = {"UPDATE claim.queues SET fair = $2 WHERE name = $1 RETURNING queue_id", 2,
                   {TEXTOID, BOOLOID}, nullptr};
Stmt s_backfill = {
    "UPDATE claim.items SET fair_key_id = 0 WHERE queue_id = $1 AND fair_key_id IS NULL", 1,
    {INT4OID}, nullptr};
Stmt s_weights = {
    "SELECT key_id, weight FROM claim.fair_keys WHERE queue_id = $1 AND weight <> 1", 1,
    {INT4OID}, nullptr};
Stmt s_set_weight = {
    "INSERT INTO claim.fair_keys (queue_id, fair_key, weight) "
    "SELECT q.queue_id, $2, $3 FROM claim.queues q WHERE q.name = $1 "
    "ON CONFLICT (queue_id, fair_key) DO UPDATE SET weight = EXCLUDED.weight "
    "RETURNING queue_id, key_id",
    3, {TEXTOID, TEXTOID, INT4OID}, nullptr};
Stmt s_drop_keys = {"DELETE FROM claim.fair_keys WHERE queue_id = $1", 1, {INT4OID}, nullptr};

// --- the backend's caches ------------------------------------------------------

constexpr int64 kFlagTtlUs = USECS_PER_SEC;

struct FlagKey {
    Oid install;
    int32 queue_id;
};
struct FlagEntry {
    FlagKey key;
    bool fair;
    uint64 epoch;
    TimestampTz at;
};
// A fair key by (installation, queue, two hashes of its text).
struct KeyKey {
    Oid install;
    int32 queue_id;
    uint64 h1, h2;
};
struct KeyEntry {
    KeyKey key;
    int32 key_id;
};

HTAB *flags;
HTAB *keys;

HTAB *make_table(const char *name, Size keysize, Size entrysize) {
    HASHCTL ctl;
    memset(&ctl, 0, sizeof(ctl));
    ctl.keysize = keysize;
    ctl.entrysize = entrysize;
    ctl.hcxt = TopMemoryContext;
    return hash_create(name, 64, &ctl, HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
}

// Keys made ready by this transaction: active in the scheduler at commit.
constexpr int kMaxPending = 256;
struct Pending {
    Oid install;
    int32 queue_id;
    int32 key_id;
};
Pending pending[kMaxPending];
int npending;
// Keys this transaction's walks found exhausted and took out of the active
// set: should it roll back, the items it claimed of them are ready again,
// and so the keys are active again.
Pending dropped_here[kMaxPending];
int ndropped_here;

void reactivate_dropped() {
    for (int i = 0; i < ndropped_here; ++i)
        shmem::fair_activate(dropped_here[i].install, dropped_here[i].queue_id,
                             &dropped_here[i].key_id, 1);
    ndropped_here = 0;
}

void on_xact(XactEvent event) {
    if (event == XACT_EVENT_COMMIT || event == XACT_EVENT_PARALLEL_COMMIT) {
        for (int i = 0; i < npending; ++i)
            shmem::fair_activate(pending[i].install, pending[i].queue_id, &pending[i].key_id, 1);
        npending = 0;
        ndropped_here = 0;
    } else if (event == XACT_EVENT_ABORT || event == XACT_EVENT_PARALLEL_ABORT ||
               event == XACT_EVENT_PREPARE) {
        if (event == XACT_EVENT_PREPARE)
            ndropped_here = 0;
        else
            reactivate_dropped();
        // A prepared transaction's keys are found by the claimers' next look
        // for keys (shmem::kFairDiscoverUs). Keys an aborted transaction
        // added are gone: so are the ids cached for them.
        npending = 0;
        if (event != XACT_EVENT_PREPARE && keys != nullptr) {
            hash_destroy(keys);
            keys = nullptr;
        }
    }
}

// A savepoint rolled back takes the fair keys it added with it: so go the
// ids cached for them (an item enqueued later would carry a key id that no
// row of claim.fair_keys has).
void on_subxact(SubXactEvent event) {
    if (event != SUBXACT_EVENT_ABORT_SUB) return;
    if (keys != nullptr) {
        hash_destroy(keys);
        keys = nullptr;
    }
    // Claims of the savepoint are undone (a key active again that has
    // nothing left is found so by the next walk).
    reactivate_dropped();
}

void note_pending(Oid install, int32 queue_id, int32 key_id) {
    shmem::fair_prepare();  // the commit callback allocates nothing
    for (int i = npending - 1; i >= 0 && i >= npending - 8; --i)
        if (pending[i].key_id == key_id && pending[i].queue_id == queue_id &&
            pending[i].install == install)
            return;
    if (npending < kMaxPending) pending[npending++] = Pending{install, queue_id, key_id};
}

int32 key_id_of(int32 queue_id, text *key) {
    Oid install = direct::items_relid();
    if (keys == nullptr) keys = make_table("pg_claim fair keys", sizeof(KeyKey), sizeof(KeyEntry));
    if (hash_get_num_entries(keys) >= 65536) {
        hash_destroy(keys);
        keys = make_table("pg_claim fair keys", sizeof(KeyKey), sizeof(KeyEntry));
    }
    KeyKey k;
    memset(&k, 0, sizeof(k));
    k.install = install;
    k.queue_id = queue_id;
    const unsigned char *b = (const unsigned char *)VARDATA_ANY(key);
    int len = (int)VARSIZE_ANY_EXHDR(key);
    k.h1 = hash_bytes_extended(b, len, 0);
    k.h2 = hash_bytes_extended(b, len, 0x9e3779b97f4a7c15ULL);
    bool found;
    auto *e = (KeyEntry *)hash_search(keys, &k, HASH_FIND, &found);
    if (found) return e->key_id;

    SPI_connect();
    Datum v[2] = {Int32GetDatum(queue_id), PointerGetDatum(key)};
    int32 id = -1;
    for (int round = 0; round < 3 && id < 0; ++round) {
        if (pg::run(s_key_find, v, nullptr) > 0 || pg::run(s_key_add, v, nullptr) > 0)
            id = pg::col_int32(0, 1);
        CHECK_FOR_INTERRUPTS();
    }
    SPI_finish();
    if (id < 0)
        pg::error({ERRCODE_T_R_SERIALIZATION_FAILURE,
                   "Retry the call: another transaction added the same fair key meanwhile."},
                  "could not add fair key to queue %d", queue_id);
    e = (KeyEntry *)hash_search(keys, &k, HASH_ENTER, &found);
    e->key_id = id;
    return id;
}

}  // namespace

namespace pgclaim::api {

bool fair_queue(int32 queue_id) {
    if (!direct::fair_catalog()) return false;
    Oid install = direct::items_relid();
    if (flags == nullptr) flags = make_table("pg_claim fair flags", sizeof(FlagKey), sizeof(FlagEntry));
    FlagKey k;
    memset(&k, 0, sizeof(k));
    k.install = install;
    k.queue_id = queue_id;
    uint64 epoch = shmem::queue_changes();
    TimestampTz now = pg::clock_now();
    bool found;
    auto *e = (FlagEntry *)hash_search(flags, &k, HASH_FIND, &found);
    if (found && e->epoch == epoch && now >= e->at && now - e->at < kFlagTtlUs) return e->fair;
    SPI_connect();
    Datum v[1] = {Int32GetDatum(queue_id)};
    bool fair = false;
    if (pg::run(s_flag, v, nullptr) > 0) {
        bool isnull;
        Datum d = pg::col(0, 1, &isnull);
        fair = !isnull && DatumGetBool(d);
    }
    SPI_finish();
    if (hash_get_num_entries(flags) >= 4096) {
        hash_destroy(flags);
        flags = make_table("pg_claim fair flags", sizeof(FlagKey), sizeof(FlagEntry));
    }
    e = (FlagEntry *)hash_search(flags, &k, HASH_ENTER, &found);
    e->fair = fair;
    e->epoch = epoch;
    e->at = now;
    return fair;
}

int32 fair_key_arg(FunctionCallInfo fcinfo, int argno, int32 queue_id) {
    if (PG_NARGS() <= argno || PG_ARGISNULL(argno)) return fair_key_default(queue_id);
    return fair_key_text(queue_id, PG_GETARG_TEXT_PP(argno));
}

namespace {
// The queues this backend warned about (a few: the warning is a nudge).
int32 warned_not_fair[8];
int nwarned_not_fair = 0;

void warn_not_fair(int32 queue_id) {
    for (int i = 0; i < nwarned_not_fair; ++i)
        if (warned_not_fair[i] == queue_id) return;
    if (nwarned_not_fair < 8) warned_not_fair[nwarned_not_fair++] = queue_id;
    ereport(WARNING,
            (errcode(ERRCODE_WARNING),
             errmsg("the queue is not fair: its items' fair_key has no effect on claims"),
             errhint("Make the queue fair with claim.alter_queue(queue, fair => true); the keys "
                     "given until then are kept and count from then on.")));
}
}  // namespace

int32 fair_key_text(int32 queue_id, text *key) {
    check_key_length(key, "fair_key");
    if (!direct::fair_catalog())
        pg::error({ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE, "Run ALTER EXTENSION pg_claim UPDATE."},
                  "fair keys need pg_claim 0.3.0");
    if (!fair_queue(queue_id)) warn_not_fair(queue_id);
    int32 id = key_id_of(queue_id, key);
    note_pending(direct::items_relid(), queue_id, id);
    return id;
}

int32 fair_key_default(int32 queue_id) {
    if (!fair_queue(queue_id)) return -1;
    note_pending(direct::items_relid(), queue_id, kDefaultFairKey);
    return kDefaultFairKey;
}

void fair_mark_items(const int64 *ids, int n, int32 key_id) {
    if (key_id < 0 || n <= 0) return;
    Datum v[2] = {pg::int8_array(ids, n), Int32GetDatum(key_id)};
    pg::run(s_mark, v, nullptr);
    pg::free_result();
}

void store_fair_flag(FunctionCallInfo fcinfo, int argno) {
    if (PG_NARGS() <= argno || PG_ARGISNULL(argno)) return;
    bool fair = PG_GETARG_BOOL(argno);
    if (fair) direct::lock_items(true);  // no producer between the flag and the backfill
    Datum v[2] = {PG_GETARG_DATUM(0), BoolGetDatum(fair)};
    if (pg::run(s_set_flag, v, nullptr) == 0) unknown_queue(pg::arg_cstring(fcinfo, 0));
    int32 queue_id = pg::col_int32(0, 1);
    pg::free_result();
    if (fair) {
        Datum b[1] = {Int32GetDatum(queue_id)};
        pg::run(s_backfill, b, nullptr);
        pg::free_result();
        note_pending(direct::items_relid(), queue_id, kDefaultFairKey);
    }
    shmem::queues_changed_at_commit();
    forget_queues();
    if (flags != nullptr) {
        hash_destroy(flags);
        flags = nullptr;
    }
}

void fair_queue_dropped(int32 queue_id) {
    if (!direct::fair_catalog()) return;
    Datum v[1] = {Int32GetDatum(queue_id)};
    pg::run(s_drop_keys, v, nullptr);
    pg::free_result();
    shmem::fair_forget(direct::items_relid(), queue_id);
}

// --- the claim walk of a fair queue -----------------------------------------------

struct FairSource {
    direct::Tables *t;
    Oid install;
    int32 queue_id;
    Snapshot snap;
    TimestampTz now;
    uint64 seen;  // fair_activations before snap was taken
    int n;
    // The plan: keys in the order of their first pick, with their quota.
    int32 *plan_key;
    int *plan_quota;
    int nplan, idx;
    direct::FairScan *scan;
    int took_cur;
    int64 last_id;
    // Candidates of the round (so that a key walked twice yields each once).
    int64 *taken;
    int ntaken, cap_taken;
    int replans;
    int want;  // items the round still wants beyond the candidates taken
    // Per key of the round: claims handed out, and the keys found exhausted.
    int32 *stat_key;
    int *stat_n;
    int nstat, stat_cap;
    int32 *dropped;
    int ndropped, dropped_cap;
    direct::ReadyScan *fallback;
    bool fallback_done;
};

namespace {

void plan(FairSource *s) {
    int m = s->want;
    if (m < 1) m = 1;
    int32 *picks = (int32 *)palloc(sizeof(int32) * m);
    int got = shmem::fair_pick(s->install, s->queue_id, m, picks);
    s->nplan = 0;
    s->idx = 0;
    for (int i = 0; i < got; ++i) {
        int j = 0;
        while (j < s->nplan && s->plan_key[j] != picks[i]) ++j;
        if (j == s->nplan) {
            s->plan_key[j] = picks[i];
            s->plan_quota[j] = 0;
            ++s->nplan;
        }
        ++s->plan_quota[j];
    }
    pfree(picks);
}

void note_stat(FairSource *s, int32 key, int n) {
    if (n <= 0) return;
    for (int i = 0; i < s->nstat; ++i)
        if (s->stat_key[i] == key) {
            s->stat_n[i] += n;
            return;
        }
    if (s->nstat == s->stat_cap) return;
    s->stat_key[s->nstat] = key;
    s->stat_n[s->nstat++] = n;
}

void end_key(FairSource *s, bool exhausted) {
    direct::fair_scan_end(s->scan);
    s->scan = nullptr;
    int32 key = s->plan_key[s->idx];
    note_stat(s, key, s->took_cur);
    if (exhausted && s->ndropped < s->dropped_cap) s->dropped[s->ndropped++] = key;
    ++s->idx;
}

// A key found exhausted leaves the active set, remembered in case this
// transaction rolls back (reactivate_dropped).
void deactivate(FairSource *s, int32 key) {
    if (!shmem::fair_deactivate(s->install, s->queue_id, key, s->seen)) return;
    if (ndropped_here < kMaxPending)
        dropped_here[ndropped_here++] = Pending{s->install, s->queue_id, key};
}

bool taken_before(FairSource *s, int64 id) {
    for (int i = 0; i < s->ntaken; ++i)
        if (s->taken[i] == id) return true;
    return false;
}

}  // namespace

uint64 fair_activations() { return shmem::fair_activations(); }

FairSource *fair_source_begin(direct::Tables *t, int32 queue_id, int n, Snapshot snap,
                              TimestampTz now, uint64 seen) {
    FairSource *s = (FairSource *)palloc0(sizeof(FairSource));
    s->t = t;
    s->install = direct::items_relid();
    s->queue_id = queue_id;
    s->snap = snap;
    s->now = now;
    s->seen = seen;
    s->n = n;
    s->plan_key = (int32 *)palloc(sizeof(int32) * n);
    s->plan_quota = (int *)palloc(sizeof(int) * n);
    s->cap_taken = n;
    s->want = n;
    s->taken = (int64 *)palloc(sizeof(int64) * n);
    s->stat_cap = s->dropped_cap = n + 8;
    s->stat_key = (int32 *)palloc(sizeof(int32) * s->stat_cap);
    s->stat_n = (int *)palloc(sizeof(int) * s->stat_cap);
    s->dropped = (int32 *)palloc(sizeof(int32) * s->dropped_cap);

    uint64 epoch = shmem::queue_changes();
    shmem::FairDuties d = shmem::fair_begin(s->install, queue_id, epoch, now);
    if (d.weights) {
        Datum v[1] = {Int32GetDatum(queue_id)};
        uint64 nw = pg::run(s_weights, v, nullptr);
        int32 *k = (int32 *)palloc(sizeof(int32) * (nw + 1));
        int32 *w = (int32 *)palloc(sizeof(int32) * (nw + 1));
        for (uint64 i = 0; i < nw; ++i) {
            k[i] = pg::col_int32(i, 1);
            w[i] = pg::col_int32(i, 2);
        }
        pg::free_result();
        shmem::fair_load_weights(s->install, queue_id, epoch, k, w, (int)nw);
    }
    if (d.discover) {
        int32 *k = (int32 *)palloc(sizeof(int32) * shmem::kFairKeysPerQueue);
        int nk = direct::fair_keys_ready(t, queue_id, snap, k, shmem::kFairKeysPerQueue);
        shmem::fair_activate(s->install, queue_id, k, nk, false);
        pfree(k);
    }
    plan(s);
    return s;
}

bool fair_source_next(FairSource *s, int64 *id, int32 *ord, Datum *group_key, bool *group_null,
                      ItemPointerData *tid) {
    for (;;) {
        if (s->fallback != nullptr) {
            if (direct::ready_next(s->fallback, id, ord, group_key, group_null, tid)) {
                s->last_id = *id;
                return true;
            }
            direct::ready_end(s->fallback);
            s->fallback = nullptr;
            return false;
        }
        if (s->scan != nullptr) {
            if (s->took_cur >= s->plan_quota[s->idx]) {
                end_key(s, false);
                continue;
            }
            bool more;
            while ((more = direct::fair_scan_next(s->scan, id, ord, group_key, group_null, tid)) &&
                   taken_before(s, *id)) {
            }
            if (more) {
                s->last_id = *id;
                return true;
            }
            end_key(s, true);
            continue;
        }
        if (s->idx < s->nplan) {
            s->scan = direct::fair_scan_begin(s->t, s->queue_id, s->plan_key[s->idx], s->snap);
            s->took_cur = 0;
            continue;
        }
        // The plan is done. While the round wants more, pick again among
        // the keys still active; when no key yielded anything, walk the
        // whole ready index once (items without a fair key).
        if (s->want > 0 && s->replans < 16 && s->nplan > 0) {
            // Keys found exhausted leave the active set before the next pick.
            for (int i = 0; i < s->ndropped; ++i) deactivate(s, s->dropped[i]);
            s->ndropped = 0;
            ++s->replans;
            plan(s);
            if (s->nplan > 0) continue;
        }
        if (s->ntaken == 0 && !s->fallback_done) {
            s->fallback_done = true;
            s->fallback = direct::ready_begin(s->t, s->queue_id, nullptr, true, s->snap);
            continue;
        }
        return false;
    }
}

void fair_source_wants(FairSource *s, int n) { s->want = n; }

void fair_source_took(FairSource *s) {
    if (s->ntaken == s->cap_taken) {
        s->cap_taken *= 2;
        s->taken = (int64 *)repalloc(s->taken, sizeof(int64) * s->cap_taken);
    }
    s->taken[s->ntaken++] = s->last_id;
    --s->want;
    if (s->scan != nullptr) ++s->took_cur;
}

void fair_source_end(FairSource *s) {
    if (s->scan != nullptr) end_key(s, false);
    if (s->fallback != nullptr) direct::ready_end(s->fallback);
    for (int i = 0; i < s->ndropped; ++i) deactivate(s, s->dropped[i]);
    for (int i = 0; i < s->nstat; ++i)
        shmem::fair_handed(s->install, s->queue_id, s->stat_key[i], s->stat_n[i], s->now);
}

void fair_at_xact_end(XactEvent event) { on_xact(event); }

void fair_at_subxact_end(SubXactEvent event) { on_subxact(event); }

}  // namespace pgclaim::api

// claim.set_fair_weight(queue text, fair_key text, weight int): the key's
// weight in the queue (the key is added when it is new).
PGCLAIM_FUNCTION(pgclaim_set_fair_weight) {
    pg::require_args(fcinfo, "queue", "fair_key", "weight");
    pg::require_primary("claim.set_fair_weight");
    char *name = pg::arg_cstring(fcinfo, 0);
    api::check_key_length(PG_GETARG_TEXT_PP(1), "fair_key");
    int32 weight = PG_GETARG_INT32(2);
    if (weight < 1 || weight > kMaxFairWeight)
        pg::error({ERRCODE_INVALID_PARAMETER_VALUE,
                   "A weight is a key's share relative to the other keys' (docs/fairness.md)."},
                  "weight must be between 1 and %d", kMaxFairWeight);
    SPI_connect();
    Datum v[3] = {PG_GETARG_DATUM(0), PG_GETARG_DATUM(1), Int32GetDatum(weight)};
    if (pg::run(s_set_weight, v, nullptr) == 0) api::unknown_queue(name);
    pg::free_result();
    SPI_finish();
    // The claimers load the weights again once this commits.
    shmem::queues_changed_at_commit();
    PG_RETURN_VOID();
}

// claim._fair_state(): the scheduler's keys of this database.
PGCLAIM_FUNCTION(pgclaim_fair_state) {
    InitMaterializedSRF(fcinfo, MAT_SRF_USE_EXPECTED_DESC);
    ReturnSetInfo *rsinfo = (ReturnSetInfo *)fcinfo->resultinfo;
    Oid install = direct::items_relid();
    if (!OidIsValid(install)) return (Datum)0;
    shmem::FairKeyState *st;
    int n = shmem::fair_snapshot(install, pg::clock_now(), &st);
    for (int i = 0; i < n; ++i) {
        Datum out[4] = {Int32GetDatum(st[i].queue_id), Int32GetDatum(st[i].key_id),
                        BoolGetDatum(st[i].active), Int64GetDatum(st[i].handed_last_minute)};
        bool nulls[4] = {false, false, false, false};
        tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, out, nulls);
    }
    return (Datum)0;
}
