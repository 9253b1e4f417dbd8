// Many rows by key at once (see direct_probe.hpp).
//
// The keys of one batch are close together: the items of a claim of 500 lie
// within a few thousand ids of each other (concurrent claimers take
// neighbouring stretches), and so do the tokens they got. One scan over
// [min, max] of the index reads each leaf page once; a descent per key
// reads the root and inner pages again for every key (the batch path's
// profile spent a third of its time in those descents). The scan checks
// each entry's key against the batch before it reads the row, so the rows
// of other batches in the range cost an index tuple each, not a heap fetch.
// Sparse keys (a span over kDenseSpan times their count) are probed one by
// one, with one scan descriptor.
#include "pg/direct_probe.hpp"

#include <algorithm>

#include "pg/direct_tables.hpp"
#include "pg/compat.hpp"
#include "pg/xact_locks.hpp"

extern "C" {
#include "access/genam.h"
#include "access/itup.h"
#include "access/relscan.h"
#include "access/stratnum.h"
#include "access/tableam.h"
#include "executor/tuptable.h"
#include "utils/fmgroids.h"
#include "utils/rel.h"
}

namespace pgclaim::pg::direct {

namespace {

constexpr uint64 kDenseSpan = 16;
constexpr int kDenseMin = 8;  // fewer keys: a probe each

// fn(i, slot, arg) for every i and row visible to `snap` in `heap` whose
// key (the first column of `idx`, int8) is keys[i].
using RowFn = void (*)(int i, TupleTableSlot *slot, void *arg);

void rows_by_keys(Relation heap, Relation idx, const int64 *keys, int n, Snapshot snap,
                  TupleTableSlot *slot, RowFn fn, void *arg) {
    if (n <= 0) return;
    int *ord = (int *)palloc(sizeof(int) * n);
    for (int i = 0; i < n; ++i) ord[i] = i;
    std::sort(ord, ord + n, [keys](int a, int b) { return keys[a] < keys[b]; });
    int64 lo = keys[ord[0]], hi = keys[ord[n - 1]];
    bool dense = n >= kDenseMin && (uint64)hi - (uint64)lo <= kDenseSpan * (uint64)n;
    if (dense) {
        ScanKeyData k[2];
        ScanKeyInit(&k[0], 1, BTGreaterEqualStrategyNumber, F_INT8GE, Int64GetDatum(lo));
        ScanKeyInit(&k[1], 1, BTLessEqualStrategyNumber, F_INT8LE, Int64GetDatum(hi));
        IndexScanDesc scan = compat::begin_index_scan(heap, idx, snap, 2);
        scan->xs_want_itup = true;  // the key is read from the entry
        index_rescan(scan, k, 2, nullptr, 0);
        int p = 0;
        // An MVCC snapshot sees at most one version per entry (as in
        // ready_next_passing): each entry is fetched at most once.
        while (p < n && index_getnext_tid(scan, ForwardScanDirection) != nullptr) {
            bool isnull;
            int64 key = DatumGetInt64(index_getattr(scan->xs_itup, 1, scan->xs_itupdesc, &isnull));
            while (p < n && keys[ord[p]] < key) ++p;
            if (p == n || keys[ord[p]] != key) continue;
            if (!index_fetch_heap(scan, slot)) continue;
            for (int q = p; q < n && keys[ord[q]] == key; ++q) fn(ord[q], slot, arg);
            ExecClearTuple(slot);
        }
        index_endscan(scan);
    } else {
        IndexScanDesc scan = compat::begin_index_scan(heap, idx, snap, 1);
        for (int p = 0; p < n;) {
            int64 key = keys[ord[p]];
            int q = p;
            while (q < n && keys[ord[q]] == key) ++q;
            ScanKeyData k;
            ScanKeyInit(&k, 1, BTEqualStrategyNumber, F_INT8EQ, Int64GetDatum(key));
            index_rescan(scan, &k, 1, nullptr, 0);
            while (index_getnext_slot(scan, ForwardScanDirection, slot)) {
                for (int r = p; r < q; ++r) fn(ord[r], slot, arg);
            }
            ExecClearTuple(slot);
            p = q;
        }
        index_endscan(scan);
    }
    pfree(ord);
}

struct ClaimsArg {
    ClaimRow *out;
    bool *has;
};

void take_claim(int i, TupleTableSlot *slot, void *arg) {
    auto *a = (ClaimsArg *)arg;
    bool isnull;
    a->has[i] = true;
    a->out[i].token = DatumGetInt64(get(slot, cat.c_token, &isnull));
    a->out[i].attempt = DatumGetInt32(get(slot, cat.c_attempt, &isnull));
    a->out[i].lease_until = DatumGetTimestampTz(get(slot, cat.c_lease, &isnull));
    a->out[i].tid = slot->tts_tid;
    a->out[i].has_item_tid = false;
    if (cat.c_item_tid != InvalidAttrNumber) {
        Datum d = get(slot, cat.c_item_tid, &isnull);
        if (!isnull) {
            a->out[i].item_tid = *(ItemPointer)DatumGetPointer(d);
            a->out[i].has_item_tid = true;
        }
    }
}

struct TokensArg {
    TokenItemFn fn;
    void *arg;
};

void take_token_item(int k, TupleTableSlot *slot, void *arg) {
    auto *a = (TokensArg *)arg;
    bool isnull;
    a->fn(k, DatumGetInt64(get(slot, cat.c_item, &isnull)), &slot->tts_tid, a->arg);
}

struct TidsArg {
    ItemPointerData *tids;
    bool *found;
};

void take_tid(int i, TupleTableSlot *slot, void *arg) {
    auto *a = (TidsArg *)arg;
    a->found[i] = true;
    a->tids[i] = slot->tts_tid;
}

}  // namespace

void claims_of(Tables *t, const int64 *ids, int n, Snapshot snap, ClaimRow *out, bool *has) {
    // A claimer after a restart with prepared transactions of unknown items
    // needs claim_of's look at rows of open transactions: one by one.
    if (t->mode == Mode::Claim && xact_locks_prepared_unknown()) {
        for (int i = 0; i < n; ++i) has[i] = claim_of(t, ids[i], snap, &out[i]);
        return;
    }
    for (int i = 0; i < n; ++i) has[i] = false;
    ClaimsArg a{out, has};
    rows_by_keys(t->claims, t->claims_pkey, ids, n, snap, t->claim_slot, take_claim, &a);
}

bool claim_at(Tables *t, int64 item_id, const ItemPointerData *tid, Snapshot snap,
              ClaimRow *out) {
    ItemPointerData copy = *tid;
    TupleTableSlot *slot = t->claim_slot;
    if (!table_tuple_fetch_row_version(t->claims, &copy, snap, slot)) return false;
    bool isnull, has = false;
    // The line may hold another row by now (the old one pruned).
    if (DatumGetInt64(get(slot, cat.c_item, &isnull)) == item_id) {
        ClaimsArg a{out, &has};
        take_claim(0, slot, &a);
    }
    ExecClearTuple(slot);
    return has;
}

void items_with_tokens(Tables *t, const int64 *tokens, int n, Snapshot snap, TokenItemFn fn,
                       void *arg) {
    TokensArg a{fn, arg};
    rows_by_keys(t->claims, t->claims_token, tokens, n, snap, t->claim_slot, take_token_item, &a);
}

void item_tids(Tables *t, const int64 *ids, int n, Snapshot snap, ItemPointerData *tids,
               bool *found) {
    for (int i = 0; i < n; ++i) found[i] = false;
    TidsArg a{tids, found};
    rows_by_keys(t->items, pkey_index(t), ids, n, snap, t->item_slot, take_tid, &a);
}

struct ClaimCursor {
    Tables *t;
    IndexScanDesc scan;  // claims_pkey from some id on, with `snap`
    Snapshot snap;
    int64 last;  // the last id asked about
    bool entry;  // the scan stands at an entry not consumed yet, of key `key`
    bool done;   // the scan has no more entries
    int64 key;
};

ClaimCursor *claim_cursor_begin(Tables *t) {
    auto *c = (ClaimCursor *)palloc0(sizeof(ClaimCursor));
    c->t = t;
    return c;
}

void claim_cursor_reset(ClaimCursor *c) {
    if (c->scan != nullptr) index_endscan(c->scan);
    c->scan = nullptr;
    c->snap = nullptr;
}

void claim_cursor_end(ClaimCursor *c) {
    claim_cursor_reset(c);
    pfree(c);
}

bool claim_of_cursor(ClaimCursor *c, int64 id, Snapshot snap, ClaimRow *out) {
    Tables *t = c->t;
    if (t->mode == Mode::Claim && xact_locks_prepared_unknown()) return claim_of(t, id, snap, out);
    if (c->scan == nullptr || c->snap != snap || id <= c->last) {
        claim_cursor_reset(c);
        ScanKeyData k;
        ScanKeyInit(&k, 1, BTGreaterEqualStrategyNumber, F_INT8GE, Int64GetDatum(id));
        c->scan = compat::begin_index_scan(t->claims, t->claims_pkey, snap, 1);
        c->scan->xs_want_itup = true;
        index_rescan(c->scan, &k, 1, nullptr, 0);
        c->snap = snap;
        c->entry = false;
        c->done = false;
    }
    c->last = id;
    TupleTableSlot *slot = t->claim_slot;
    for (;;) {
        if (!c->entry) {
            if (c->done || index_getnext_tid(c->scan, ForwardScanDirection) == nullptr) {
                c->done = true;
                return false;
            }
            bool isnull;
            c->key = DatumGetInt64(index_getattr(c->scan->xs_itup, 1, c->scan->xs_itupdesc, &isnull));
            c->entry = true;
        }
        if (c->key < id) {
            c->entry = false;
            continue;
        }
        if (c->key > id) return false;
        c->entry = false;  // this entry is consumed; a dead version: the next one
        if (!index_fetch_heap(c->scan, slot)) continue;
        bool has[1] = {false};
        ClaimsArg a{out, has};
        take_claim(0, slot, &a);
        ExecClearTuple(slot);
        return true;
    }
}

}  // namespace pgclaim::pg::direct
