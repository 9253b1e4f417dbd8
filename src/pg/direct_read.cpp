// Direct reads of claim.items and claim.claims (see direct.hpp): the ready
// scan in delivery order, claim and item probes, and the group check.
#include "pg/direct_read.hpp"
#include "pg/direct_rules.hpp"
#include "pg/xact_locks.hpp"

#include "pg/direct_tables.hpp"
#include "pg/compat.hpp"

#include <algorithm>

extern "C" {
#include "utils/timestamp.h"
#include "access/xact.h"
#include "storage/bufmgr.h"
#include "storage/procarray.h"
#include "access/genam.h"
#include "access/htup_details.h"
#include "access/relscan.h"
#include "access/stratnum.h"
#include "access/table.h"
#include "access/tableam.h"
#include "catalog/index.h"
#include "catalog/pg_index.h"
#include "catalog/namespace.h"
#include "catalog/pg_collation_d.h"
#include "commands/sequence.h"
#include "executor/executor.h"
#include "executor/tuptable.h"
#include "nodes/execnodes.h"
#include "utils/acl.h"
#include "utils/fmgroids.h"
#include "utils/inval.h"
#include "utils/memutils.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "storage/lmgr.h"
#include "tcop/utility.h"
}

namespace pgclaim::pg::direct {

struct ReadyScan {
    Tables *t;
    IndexScanDesc scan;
    Snapshot snap;
    int stretches;  // stretches read so far, this one included (0: past them)
    int64 stretch;  // this stretch's length in ids
    ScanPos bound;  // its last entry
    ScanKeyData keys[4];
    ScanKeyData row[2];
};

namespace {
// (ord, id) >= / > `from` as one row comparison: the scan starts right there
// instead of at the first entry of `ord`.
void scan_from(ReadyScan *s, const ScanPos &from, bool inclusive) {
    StrategyNumber st = inclusive ? BTGreaterEqualStrategyNumber : BTGreaterStrategyNumber;
    ScanKeyEntryInitialize(&s->row[0], SK_ROW_MEMBER, 2, st, INT4OID, InvalidOid, F_BTINT4CMP,
                           Int32GetDatum(from.ord));
    ScanKeyEntryInitialize(&s->row[1], SK_ROW_MEMBER | SK_ROW_END, 3, st, INT8OID, InvalidOid,
                           F_BTINT8CMP, Int64GetDatum(from.id));
    ScanKeyEntryInitialize(&s->keys[1], SK_ROW_HEADER, 2, st, InvalidOid, InvalidOid,
                           InvalidOid, PointerGetDatum(s->row));
}

void scan_start(ReadyScan *s, int nkeys) {
    s->scan = compat::begin_index_scan(s->t->items, s->t->items_ready, s->snap, nkeys);
    s->scan->xs_want_itup = true;  // ready_next_passing reads (ord, id) from the entry
    index_rescan(s->scan, s->keys, nkeys, nullptr, 0);
}

// Entries of `ord` after `from`, up to id from.id + stretch: equality on
// (queue_id, ord) makes both bounds on id required, so the index stops
// reading its leaf page at the bound (a row comparison bounds only its
// first column, ord).
void stretch_keys(ReadyScan *s, const ScanPos &from, bool inclusive, int64 stretch) {
    s->stretch = stretch;
    s->bound = ScanPos{from.ord, from.id + stretch};
    ScanKeyInit(&s->keys[1], 2, BTEqualStrategyNumber, F_INT4EQ, Int32GetDatum(from.ord));
    if (inclusive)
        ScanKeyInit(&s->keys[2], 3, BTGreaterEqualStrategyNumber, F_INT8GE, Int64GetDatum(from.id));
    else
        ScanKeyInit(&s->keys[2], 3, BTGreaterStrategyNumber, F_INT8GT, Int64GetDatum(from.id));
    ScanKeyInit(&s->keys[3], 3, BTLessEqualStrategyNumber, F_INT8LE, Int64GetDatum(s->bound.id));
}

bool stretch_fits(const ScanPos &from, int64 stretch) {
    return stretch > 0 && from.id <= PG_INT64_MAX - stretch;
}

// At the end of a stretch the scan goes on past its bound: a stretch
// kStretchGrowth times longer, then, after kStretches, the rest of the
// queue. False when the scan was not a stretch (the end of the queue).
constexpr int kStretches = 2;
constexpr int64 kStretchGrowth = 8;
bool stretch_done(ReadyScan *s) {
    if (s->stretches == 0) return false;
    index_endscan(s->scan);
    ScanPos from = s->bound;
    int64 next = s->stretch * kStretchGrowth;
    if (s->stretches < kStretches && next / kStretchGrowth == s->stretch &&
        stretch_fits(from, next)) {
        ++s->stretches;
        stretch_keys(s, from, false, next);
        scan_start(s, 4);
    } else {
        s->stretches = 0;
        scan_from(s, from, false);
        scan_start(s, 2);
    }
    return true;
}
}  // namespace

ReadyScan *ready_begin(Tables *t, int32 queue_id, const ScanPos *from, bool inclusive,
                       Snapshot snap, int64 stretch) {
    ReadyScan *s = (ReadyScan *)palloc0(sizeof(ReadyScan));
    s->t = t;
    s->snap = snap;
    int nkeys = 1;
    ScanKeyInit(&s->keys[0], 1, BTEqualStrategyNumber, F_INT4EQ, Int32GetDatum(queue_id));
    if (from != nullptr && stretch_fits(*from, stretch)) {
        s->stretches = 1;
        stretch_keys(s, *from, inclusive, stretch);
        nkeys = 4;
    } else if (from != nullptr) {
        scan_from(s, *from, inclusive);
        nkeys = 2;
    }
    scan_start(s, nkeys);
    return s;
}

namespace {
// The row in `slot` (reached through a ready index) as a ready item; false
// when it is not one.
bool ready_row(TupleTableSlot *slot, int64 *id, int32 *ord, Datum *group_key, bool *group_null,
               ItemPointerData *tid) {
    bool isnull;
    // The index predicate holds for every version reached through it;
    // checked anyway, it costs nothing.
    if (DatumGetChar(get(slot, cat.i_state, &isnull)) != 'r') return false;
    (void)get(slot, cat.i_run_at, &isnull);
    if (!isnull) return false;
    *id = DatumGetInt64(get(slot, cat.i_id, &isnull));
    *ord = DatumGetInt32(get(slot, cat.i_ord, &isnull));
    *group_key = get(slot, cat.i_group, group_null);
    *tid = slot->tts_tid;
    return true;
}
}  // namespace

bool next_ready_item(Tables *t, struct IndexScanDescData *scan, int64 *id, int32 *ord, Datum *group_key,
                     bool *group_null, ItemPointerData *tid) {
    TupleTableSlot *slot = t->scan_slot;
    while (index_getnext_slot(scan, ForwardScanDirection, slot))
        if (ready_row(slot, id, ord, group_key, group_null, tid)) return true;
    return false;
}

bool ready_next_passing(ReadyScan *s, PassFn pass, void *arg, int64 *id, int32 *ord,
                        Datum *group_key, bool *group_null, ItemPointerData *tid) {
    TupleTableSlot *slot = s->t->scan_slot;
    // An MVCC snapshot sees at most one version per entry, so each entry
    // is fetched once (what index_getnext_slot does for such a snapshot).
    for (;;) {
        IndexScanDesc scan = s->scan;
        if (index_getnext_tid(scan, ForwardScanDirection) == nullptr) {
            if (stretch_done(s)) continue;
            return false;
        }
        bool isnull;
        // items_ready is (queue_id, ord, id): checked by direct::open.
        int32 o = DatumGetInt32(index_getattr(scan->xs_itup, 2, scan->xs_itupdesc, &isnull));
        int64 i = DatumGetInt64(index_getattr(scan->xs_itup, 3, scan->xs_itupdesc, &isnull));
        if (pass(i, o, arg)) {
            CHECK_FOR_INTERRUPTS();
            continue;
        }
        if (!index_fetch_heap(scan, slot)) continue;
        if (ready_row(slot, id, ord, group_key, group_null, tid)) return true;
    }
}

bool ready_next(ReadyScan *s, int64 *id, int32 *ord, Datum *group_key, bool *group_null,
                ItemPointerData *tid) {
    do {
        if (next_ready_item(s->t, s->scan, id, ord, group_key, group_null, tid)) return true;
    } while (stretch_done(s));
    return false;
}

void end_item_scan(Tables *t, struct IndexScanDescData *scan) {
    index_endscan(scan);
    ExecClearTuple(t->scan_slot);
}

void ready_end(ReadyScan *s) {
    end_item_scan(s->t, s->scan);
    pfree(s);
}

bool claim_of(Tables *t, int64 item_id, Snapshot snap, ClaimRow *out) {
    TupleTableSlot *slot = t->claim_slot;
    if (!probe_int8(t->claims, t->claims_pkey, item_id, snap, slot)) {
        // A transaction prepared before the server's last start may hold a
        // claim of this item that its row alone shows (its lock was not
        // kept): a claimer takes such a row as a live claim.
        if (t->mode != Mode::Claim || !xact_locks_prepared_unknown()) return false;
        SnapshotData dirty;
        InitDirtySnapshot(dirty);
        bool pending = probe_int8(t->claims, t->claims_pkey, item_id, &dirty, slot) &&
                       TransactionIdIsValid(dirty.xmin);
        ExecClearTuple(slot);
        if (!pending) return false;
        // Live for a second: a walk's hint that passes it is not kept longer.
        out->token = 0;
        out->attempt = 0;
        out->lease_until = GetCurrentTimestamp() + USECS_PER_SEC;
        ItemPointerSetInvalid(&out->tid);
        return true;
    }
    bool isnull;
    out->token = DatumGetInt64(get(slot, cat.c_token, &isnull));
    out->attempt = DatumGetInt32(get(slot, cat.c_attempt, &isnull));
    out->lease_until = DatumGetTimestampTz(get(slot, cat.c_lease, &isnull));
    out->tid = slot->tts_tid;
    ExecClearTuple(slot);
    return true;
}

int items_with_token(Tables *t, int64 token, Snapshot snap, int64 **ids) {
    ScanKeyData k;
    ScanKeyInit(&k, 1, BTEqualStrategyNumber, F_INT8EQ, Int64GetDatum(token));
    IndexScanDesc scan = compat::begin_index_scan(t->claims, t->claims_token, snap, 1);
    index_rescan(scan, &k, 1, nullptr, 0);
    int n = 0, cap = 4;
    int64 *v = (int64 *)palloc(sizeof(int64) * cap);
    TupleTableSlot *slot = t->claim_slot;
    while (index_getnext_slot(scan, ForwardScanDirection, slot)) {
        bool isnull;
        if (n == cap) {
            cap *= 2;
            v = (int64 *)repalloc(v, sizeof(int64) * cap);
        }
        v[n++] = DatumGetInt64(get(slot, cat.c_item, &isnull));
    }
    index_endscan(scan);
    ExecClearTuple(slot);
    // Ascending, so that lockers of several items never deadlock.
    std::sort(v, v + n);
    *ids = v;
    return n;
}

namespace {
void item_read(TupleTableSlot *slot, ItemRow *out) {
    bool isnull;
    out->queue_id = DatumGetInt32(get(slot, cat.i_queue, &isnull));
    char state = DatumGetChar(get(slot, cat.i_state, &isnull));
    (void)get(slot, cat.i_run_at, &isnull);
    out->ready = state == 'r' && isnull;
    out->failures = DatumGetInt32(get(slot, cat.i_failures, &isnull));
    out->group_key = get(slot, cat.i_group, &out->group_null);
    out->payload = get(slot, cat.i_payload, &isnull);
    out->enqueued_at = DatumGetTimestampTz(get(slot, cat.i_enq, &isnull));
    out->tid = slot->tts_tid;
}
}  // namespace

bool item_get(Tables *t, int64 id, Snapshot snap, ItemRow *out) {
    if (!probe_int8(t->items, pkey_index(t), id, snap, t->item_slot)) return false;
    item_read(t->item_slot, out);
    return !t->rls_items || sql_item_visible(id);
}

namespace {
// Does an open transaction other than this one delete or update the row in
// `slot`? Claimers pass over such an item: the lock table keeps the items
// of open transactions, but after a restart it is empty while a prepared
// transaction may still hold a completion, a failure or a cancel of the
// item, which only its row shows.
bool row_in_flux(TupleTableSlot *slot) {
    bool should_free;
    HeapTuple tup = ExecFetchSlotHeapTuple(slot, false, &should_free);
    HeapTupleHeader h = tup->t_data;
    bool busy = false;
    if (!(h->t_infomask & HEAP_XMAX_INVALID) && !HEAP_XMAX_IS_LOCKED_ONLY(h->t_infomask)) {
        TransactionId x = HeapTupleHeaderGetUpdateXid(h);
        busy = TransactionIdIsValid(x) && !TransactionIdIsCurrentTransactionId(x) &&
               TransactionIdIsInProgress(x);
    }
    if (should_free) heap_freetuple(tup);
    return busy;
}
}  // namespace

namespace {
// The version in t->item_slot, read as item_at reads it.
bool item_in_slot(Tables *t, ItemRow *out) {
    if (t->mode == Mode::Claim && row_in_flux(t->item_slot)) {
        ExecClearTuple(t->item_slot);
        return false;
    }
    item_read(t->item_slot, out);
    if (!t->rls_items) return true;
    bool isnull;
    return sql_item_visible(DatumGetInt64(get(t->item_slot, cat.i_id, &isnull)));
}
}  // namespace

bool item_at(Tables *t, const ItemPointerData *tid, Snapshot snap, ItemRow *out) {
    ItemPointerData copy = *tid;
    if (!table_tuple_fetch_row_version(t->items, &copy, snap, t->item_slot)) return false;
    return item_in_slot(t, out);
}

bool item_of_claim(Tables *t, int64 id, const ItemPointerData *tid, Snapshot snap,
                   ItemRow *out) {
    if (!ItemPointerIsValid(tid)) return false;
    if (!t->items_blocks_known) {
        t->items_blocks = RelationGetNumberOfBlocks(t->items);
        t->items_blocks_known = true;
    }
    if (ItemPointerGetBlockNumber(tid) >= t->items_blocks) return false;
    ItemPointerData copy = *tid;
    if (!table_tuple_fetch_row_version(t->items, &copy, snap, t->item_slot)) return false;
    bool isnull;
    if (DatumGetInt64(get(t->item_slot, cat.i_id, &isnull)) != id) {
        ExecClearTuple(t->item_slot);
        return false;
    }
    return item_in_slot(t, out);
}

struct GroupScan {
    Tables *t;
    IndexScanDesc scan;
};

namespace {
// The entries of a group in items_group (queue_id, group_key, id), with id
// `op` `id` (BTLessStrategyNumber or BTGreaterStrategyNumber; id < 0 with
// BTGreaterStrategyNumber: every entry), in id order.
GroupScan *group_scan(Tables *t, int32 queue_id, Datum group_key, StrategyNumber op, int64 id,
                      Snapshot snap) {
    GroupScan *s = (GroupScan *)palloc(sizeof(GroupScan));
    s->t = t;
    ScanKeyData k[3];
    ScanKeyInit(&k[0], 1, BTEqualStrategyNumber, F_INT4EQ, Int32GetDatum(queue_id));
    ScanKeyEntryInitialize(&k[1], 0, 2, BTEqualStrategyNumber, InvalidOid, C_COLLATION_OID,
                           F_TEXTEQ, group_key);
    ScanKeyInit(&k[2], 3, op, op == BTLessStrategyNumber ? F_INT8LT : F_INT8GT,
                Int64GetDatum(id));
    s->scan = compat::begin_index_scan(t->items, group_index(t), snap, 3);
    index_rescan(s->scan, k, 3, nullptr, 0);
    return s;
}
}  // namespace

GroupScan *group_begin(Tables *t, int32 queue_id, Datum group_key, int64 after_id,
                       Snapshot snap) {
    return group_scan(t, queue_id, group_key, BTGreaterStrategyNumber, after_id, snap);
}

bool group_next(GroupScan *s, int64 *id, bool *ready, ItemPointerData *tid) {
    TupleTableSlot *slot = s->t->group_slot;
    while (index_getnext_slot(s->scan, ForwardScanDirection, slot)) {
        bool isnull;
        if (DatumGetChar(get(slot, cat.i_state, &isnull)) != 'r') continue;
        *id = DatumGetInt64(get(slot, cat.i_id, &isnull));
        (void)get(slot, cat.i_run_at, &isnull);
        *ready = isnull;
        *tid = slot->tts_tid;
        return true;
    }
    return false;
}

void group_end(GroupScan *s) {
    index_endscan(s->scan);
    ExecClearTuple(s->t->group_slot);
    pfree(s);
}

bool group_has_earlier(Tables *t, int32 queue_id, Datum group_key, int64 id, Snapshot snap) {
    GroupScan *s = group_scan(t, queue_id, group_key, BTLessStrategyNumber, id, snap);
    int64 earlier;
    bool ready;
    ItemPointerData tid;
    bool found = group_next(s, &earlier, &ready, &tid);
    group_end(s);
    return found;
}

}  // namespace pgclaim::pg::direct
