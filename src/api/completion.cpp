// SQL surface: finishing work.
//   claim.complete(token, result), claim.complete(tokens[], skip_stale, results[])
// and the `done` tokens of claim.claim_next.
#include "api/completion.hpp"

#include <algorithm>

#include "api/arrays.hpp"
#include "api/caches.hpp"
#include "api/tokens.hpp"
#include "pg/item_locks.hpp"
#include "pg/direct.hpp"
#include "pg/direct_history.hpp"
#include "pg/direct_read.hpp"
#include "pg/direct_probe.hpp"
#include "pg/limits.hpp"
#include "pg/lineage.hpp"
#include "shmem/epochs.hpp"
#include "shmem/wakeup.hpp"
#include "shmem/metrics.hpp"

using namespace pgclaim;
using pgclaim::pg::Stmt;
namespace direct = pgclaim::pg::direct;

namespace {

Stmt s_live_count = {
    "SELECT count(*)::int4, max(lease_until) FROM claim.claims WHERE token = $1", 1, {INT8OID},
    nullptr};

// How many stale tokens the error of complete(tokens[]) lists.
constexpr int kStaleTokensShown = 20;

struct ItemToken {
    int64 item;
    int tok;  // index into the token array
    ItemPointerData claim_tid;  // where its claim row was read
};

struct Pairs {
    ItemToken *v;
    int n, cap;
};

void add_pair(int k, int64 item, const ItemPointerData *claim_tid, void *arg) {
    auto *p = (Pairs *)arg;
    if (p->n == p->cap) {
        p->cap *= 2;
        p->v = (ItemToken *)repalloc(p->v, sizeof(ItemToken) * p->cap);
    }
    p->v[p->n++] = ItemToken{item, k, *claim_tid};
}

// What a completion needs to know of a queue (pg::FinishSettings), cached
// per backend like queue definitions.
struct SettingsEntry {
    int32 queue_id;
    pg::FinishSettings settings;
    uint64 epoch;
    TimestampTz at;
};
constexpr int kSettingsEntries = 16;
constexpr int64 kSettingsTtlUs = 1000000;
SettingsEntry settings_cache[kSettingsEntries];
int settings_next = 0;

// The queue's settings; connects SPI (*spi) on a miss.
pg::FinishSettings queue_settings(int32 queue_id, TimestampTz now, bool *spi) {
    uint64 epoch = shmem::queue_changes();
    for (const SettingsEntry &e : settings_cache)
        if (e.queue_id == queue_id && e.at != 0 && e.epoch == epoch &&
            now - e.at < kSettingsTtlUs && now >= e.at)
            return e.settings;
    if (!*spi) {
        SPI_connect();
        *spi = true;
    }
    pg::FinishSettings fs = pg::finish_settings(queue_id);
    settings_cache[settings_next] = SettingsEntry{queue_id, fs, epoch, now};
    settings_next = (settings_next + 1) % kSettingsEntries;
    return fs;
}

}  // namespace

namespace pgclaim::api {

// Find the claim rows of the tokens, lock the items in id order (so
// completers never deadlock), then check each claim row again under the
// lock: a claimer that held the lock meanwhile may have changed it.
int complete_tokens(const int64 *tokens, int ntok, const Datum *results,
                    const bool *result_nulls, bool *done, direct::Tables *loop) {
    TimestampTz now = pg::clock_now();
    direct::Tables *t = loop != nullptr ? loop : direct::open(direct::Mode::Complete);
    if (loop != nullptr) direct::use(t, direct::Mode::Complete);
    for (int k = 0; k < ntok; ++k) done[k] = false;
    Pairs pp{(ItemToken *)palloc(sizeof(ItemToken) * (ntok + 4)), 0, ntok + 4};
    // Tokens this backend granted (remember_grant): their items and claim
    // rows are known without a look at claims_token, and their items are
    // only tried. A token not known, an item busy, or a pair that does not
    // hold under the lock sends the call the ordinary way.
    bool hinted = ntok > 0;
    for (int k = 0; k < ntok && hinted; ++k) {
        int64 item;
        ItemPointerData claim_tid;
        if (granted_here(tokens[k], &item, &claim_tid))
            add_pair(k, item, &claim_tid, &pp);
        else
            hinted = false;
    }
    auto by_item = [](const ItemToken &a, const ItemToken &b) {
        return a.item < b.item || (a.item == b.item && a.tok < b.tok);
    };
    if (hinted) {
        std::sort(pp.v, pp.v + pp.n, by_item);
        int nlocked = 0;
        while (nlocked < pp.n && pg::lock_item(pp.v[nlocked].item, false)) ++nlocked;
        if (nlocked < pp.n) {
            for (int i = 0; i < nlocked; ++i) pg::unlock_item(pp.v[i].item);
            hinted = false;
        }
    }
    ItemToken *pairs = nullptr;
    int npairs = 0;
    Snapshot snap = nullptr;
    int64 *ids = nullptr;
    direct::ClaimRow *claims = nullptr;
    ItemPointerData *tids = nullptr;
    bool *has = nullptr;
    for (;;) {
        if (!hinted) {
            // The ordinary way: the pairs from claims_token, then the items
            // locked in id order (so completers never deadlock).
            pp.n = 0;
            snap = direct::latest();
            direct::items_with_tokens(t, tokens, ntok, snap, add_pair, &pp);
            direct::release(snap);
            std::sort(pp.v, pp.v + pp.n, by_item);
            for (int i = 0; i < pp.n; ++i) pg::lock_item(pp.v[i].item, true);
        }
        pairs = pp.v;
        npairs = pp.n;
        if (npairs == 0) break;
        snap = direct::latest();
        // The claim rows of every pair under the locks; each item then
        // where its claim row says it is (direct_probe.hpp, direct_read.hpp).
        ids = (int64 *)palloc(sizeof(int64) * npairs);
        for (int i = 0; i < npairs; ++i) ids[i] = pairs[i].item;
        claims = (direct::ClaimRow *)palloc(sizeof(direct::ClaimRow) * npairs);
        tids = (ItemPointerData *)palloc(sizeof(ItemPointerData) * npairs);
        has = (bool *)palloc(sizeof(bool) * npairs);
        // Each claim row again where it was read: the version seen there
        // under the lock is the current one. Those updated or gone since
        // are looked up by item.
        int nmiss = 0;
        for (int i = 0; i < npairs; ++i) {
            has[i] = direct::claim_at(t, pairs[i].item, &pairs[i].claim_tid, snap, &claims[i]);
            if (!has[i]) ++nmiss;
        }
        if (nmiss > 0) {
            int64 *miss_ids = (int64 *)palloc(sizeof(int64) * nmiss);
            int *miss_at = (int *)palloc(sizeof(int) * nmiss);
            for (int i = 0, m = 0; i < npairs; ++i)
                if (!has[i]) {
                    miss_ids[m] = ids[i];
                    miss_at[m++] = i;
                }
            direct::ClaimRow *mc = (direct::ClaimRow *)palloc(sizeof(direct::ClaimRow) * nmiss);
            bool *mhas = (bool *)palloc(sizeof(bool) * nmiss);
            direct::claims_of(t, miss_ids, nmiss, snap, mc, mhas);
            for (int m = 0; m < nmiss; ++m) {
                has[miss_at[m]] = mhas[m];
                if (mhas[m]) claims[miss_at[m]] = mc[m];
            }
        }
        if (!hinted) break;
        bool hold = true;
        for (int i = 0; i < npairs && hold; ++i)
            hold = has[i] && claims[i].token == tokens[pairs[i].tok];
        if (hold) break;
        for (int i = 0; i < npairs; ++i) pg::unlock_item(pairs[i].item);
        direct::release(snap);
        snap = nullptr;
        hinted = false;
    }
    int completed = 0;
    bool spi = false;
    int64 *finished = (int64 *)palloc(sizeof(int64) * (npairs > 0 ? npairs : 1));
    int32 last_queue = -1;
    if (npairs > 0) {
        for (int i = 0; i < npairs; ++i) {
            int k = pairs[i].tok;
            const direct::ClaimRow &c = claims[i];
            if (!has[i] || c.token != tokens[k] || c.lease_until <= now) continue;
            // The item where its claim row says it was; not there any more
            // (moved, updated): by id. Read last, so that the item's row is
            // the one in the item slot (finish_to_history reads it there).
            direct::ItemRow it;
            if (!(c.has_item_tid && direct::item_of_claim(t, ids[i], &c.item_tid, snap, &it))) {
                bool found;
                direct::item_tids(t, &ids[i], 1, snap, &tids[i], &found);
                if (!found || !direct::item_at(t, &tids[i], snap, &it)) continue;
            }
            bool ok;
            pg::FinishSettings fs = queue_settings(it.queue_id, now, &spi);
            if (fs.retain_us > 0) {
                bool rnull = results == nullptr || result_nulls[k];
                Datum result = rnull ? (Datum)0 : results[k];
                ok = direct::claim_delete(t, &c.tid);
                direct::Moved m = ok ? direct::finish_to_history(t, snap, result, rnull,
                                                                  c.attempt, now)
                                     : direct::Moved::Gone;
                if (m == direct::Moved::UseSql) {
                    if (!spi) {
                        SPI_connect();
                        spi = true;
                    }
                    ok = pg::finish_retained(pairs[i].item, result, rnull, c.attempt, now);
                } else {
                    ok = m == direct::Moved::Done;
                }
            } else {
                ok = direct::claim_delete(t, &c.tid) && direct::item_delete(t, &it.tid);
            }
            if (!ok) continue;
            ++completed;
            shmem::count(it.queue_id, shmem::Metric::Completed);
            done[k] = true;
            finished[completed - 1] = pairs[i].item;
            if (it.queue_id != last_queue) {
                shmem::notify_finished(it.queue_id);
                last_queue = it.queue_id;
            }
            // A slot under the queue's or the group's limit is free.
            if (fs.limited) shmem::notify_ready(shmem::WaitKind::Queue, it.queue_id, 1);
        }
        direct::release(snap);
    }
    if (loop == nullptr) direct::close(t);
    CommandCounterIncrement();
    if (completed > 0 && pg::dependencies_possible()) {
        if (!spi) {
            SPI_connect();
            spi = true;
        }
        uint64 rows = pg::release_children(finished, completed, now);
        for (uint64 r = 0; r < rows; ++r) {
            int32 queue_id = pg::col_int32(r, 1);
            shmem::notify_ready(shmem::WaitKind::Queue, queue_id, pg::col_int64(r, 2));
            forget_hints(queue_id);
        }
        pg::free_result();
    }
    if (spi) SPI_finish();
    return completed;
}

void stale_tokens(const int64 *tokens, const bool *done, int ntok, const char *hint) {
    int nstale = 0;
    for (int i = 0; i < ntok; ++i)
        if (!done[i]) ++nstale;
    StringInfoData list;
    initStringInfo(&list);
    int shown = 0;
    for (int i = 0; i < ntok && shown < kStaleTokensShown; ++i) {
        if (done[i]) continue;
        appendStringInfo(&list, "%s%lld", shown ? ", " : "", (long long)tokens[i]);
        ++shown;
    }
    pg::error({pg::kStaleToken, hint,
               psprintf("Stale tokens%s: %s",
                        nstale > kStaleTokensShown ? psprintf(" (first %d)", kStaleTokensShown)
                                                   : "",
                        list.data)},
              "%d of the tokens %s not a live claim", nstale, nstale == 1 ? "is" : "are");
}

void refuse_token(int64 token) {
    Datum v[1] = {Int64GetDatum(token)};
    pg::run(s_live_count, v, nullptr);
    if (pg::col_int32(0, 1) == 0)
        stale_token(token, "No claim carries this token: it is unknown, or its item was "
                           "completed, failed, re-claimed, cancelled or dropped.");
    bool isnull;
    TimestampTz until = DatumGetTimestampTz(pg::col(0, 2, &isnull));
    stale_token(token, until == DT_NOBEGIN
                           ? "The claim was released."
                           : psprintf("The lease expired at %s.", timestamptz_to_str(until)));
}

}  // namespace pgclaim::api

PGCLAIM_FUNCTION(pgclaim_complete) {
    pg::require_arg(fcinfo, 0, "token");
    pg::require_primary("claim.complete");
    int64 token = PG_GETARG_INT64(0);
    bool has_result = PG_NARGS() > 1 && !PG_ARGISNULL(1);
    Datum result = has_result ? PG_GETARG_DATUM(1) : (Datum)0;
    bool result_null = !has_result;
    bool done;
    int n = api::complete_tokens(&token, 1, &result, &result_null, &done);
    if (n == 0) {
        SPI_connect();
        api::refuse_token(token);
    }
    PG_RETURN_INT32(n);
}

PGCLAIM_FUNCTION(pgclaim_complete_many) {
    pg::require_arg(fcinfo, 0, "tokens");
    pg::require_primary("claim.complete_many");
    bool skip_stale = PG_NARGS() > 1 && !PG_ARGISNULL(1) && PG_GETARG_BOOL(1);
    int nelems;
    int64 *given = api::int8_arg(fcinfo, 0, "tokens", false, &nelems);
    if (nelems == 0) PG_RETURN_INT32(0);

    // Results pair with the tokens by position; a token given twice keeps
    // its first result.
    Datum *rvals = nullptr;
    bool *rnulls = nullptr;
    if (PG_NARGS() > 2 && !PG_ARGISNULL(2)) {
        ArrayType *ra = PG_GETARG_ARRAYTYPE_P(2);
        int nr;
        if (ARR_NDIM(ra) > 1)
            pg::error({ERRCODE_INVALID_PARAMETER_VALUE}, "results must be a one-dimensional array");
        deconstruct_array(ra, JSONBOID, -1, false, TYPALIGN_INT, &rvals, &rnulls, &nr);
        if (nr != nelems)
            pg::error({ERRCODE_INVALID_PARAMETER_VALUE,
                       "Pass one result per token, NULL where there is none."},
                      "results has %d elements but tokens has %d", nr, nelems);
    }
    int *order = (int *)palloc(sizeof(int) * nelems);
    for (int i = 0; i < nelems; ++i) order[i] = i;
    std::stable_sort(order, order + nelems, [&](int a, int b) { return given[a] < given[b]; });
    int64 *tokens = (int64 *)palloc(sizeof(int64) * nelems);
    Datum *results = rvals ? (Datum *)palloc(sizeof(Datum) * nelems) : nullptr;
    bool *result_nulls = rvals ? (bool *)palloc(sizeof(bool) * nelems) : nullptr;
    int ntok = 0;
    for (int i = 0; i < nelems; ++i) {
        int o = order[i];
        if (ntok > 0 && tokens[ntok - 1] == given[o]) continue;
        tokens[ntok] = given[o];
        if (rvals) {
            results[ntok] = rvals[o];
            result_nulls[ntok] = rnulls[o];
        }
        ++ntok;
    }
    bool *done = (bool *)palloc(sizeof(bool) * ntok);
    int32 completed = api::complete_tokens(tokens, ntok, results, result_nulls, done);
    if (!skip_stale) {
        bool all = true;
        for (int i = 0; i < ntok; ++i) all &= done[i];
        if (!all)
            api::stale_tokens(tokens, done, ntok,
                              "Nothing was completed. Pass skip_stale => true to complete the "
                              "live ones and skip the rest.");
    }
    PG_RETURN_INT32(completed);
}
