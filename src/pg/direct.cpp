// Server layer: see direct.hpp.
#include "pg/direct.hpp"

#include <algorithm>

extern "C" {
#include "access/genam.h"
#include "access/relscan.h"
#include "access/stratnum.h"
#include "access/table.h"
#include "access/tableam.h"
#include "catalog/namespace.h"
#include "catalog/pg_collation_d.h"
#include "commands/sequence.h"
#include "executor/executor.h"
#include "executor/tuptable.h"
#include "nodes/execnodes.h"
#include "utils/acl.h"
#include "utils/fmgroids.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "tcop/utility.h"
}

namespace pgclaim::pg::direct {

namespace {

// Relation OIDs and attribute numbers, resolved once per installation.
struct Catalog {
    bool valid;
    Oid items, items_pkey, items_ready, items_group, claims, claims_pkey, claims_token,
        token_seq;
    AttrNumber i_id, i_queue, i_ord, i_state, i_run_at, i_failures, i_group, i_payload, i_enq;
    AttrNumber c_item, c_queue, c_token, c_attempt, c_lease, c_claimed, c_worker;
};
Catalog cat;

Oid rel_oid(Oid nsp, const char *name) {
    Oid o = get_relname_relid(name, nsp);
    if (!OidIsValid(o)) elog(ERROR, "pg_claim: relation claim.%s is missing", name);
    return o;
}

AttrNumber att(Oid rel, const char *name) {
    AttrNumber a = get_attnum(rel, name);
    if (a == InvalidAttrNumber) elog(ERROR, "pg_claim: column %s is missing", name);
    return a;
}

void load() {
    if (cat.valid) return;
    Oid nsp = get_namespace_oid("claim", false);
    cat.items = rel_oid(nsp, "items");
    cat.items_pkey = rel_oid(nsp, "items_pkey");
    cat.items_ready = rel_oid(nsp, "items_ready");
    cat.items_group = rel_oid(nsp, "items_group");
    cat.claims = rel_oid(nsp, "claims");
    cat.claims_pkey = rel_oid(nsp, "claims_pkey");
    cat.claims_token = rel_oid(nsp, "claims_token");
    cat.token_seq = rel_oid(nsp, "token_seq");
    cat.i_id = att(cat.items, "id");
    cat.i_queue = att(cat.items, "queue_id");
    cat.i_ord = att(cat.items, "ord");
    cat.i_state = att(cat.items, "state");
    cat.i_run_at = att(cat.items, "run_at");
    cat.i_failures = att(cat.items, "failures");
    cat.i_group = att(cat.items, "group_key");
    cat.i_payload = att(cat.items, "payload");
    cat.i_enq = att(cat.items, "enqueued_at");
    cat.c_item = att(cat.claims, "item_id");
    cat.c_queue = att(cat.claims, "queue_id");
    cat.c_token = att(cat.claims, "token");
    cat.c_attempt = att(cat.claims, "attempt");
    cat.c_lease = att(cat.claims, "lease_until");
    cat.c_claimed = att(cat.claims, "claimed_at");
    cat.c_worker = att(cat.claims, "worker");
    cat.valid = true;
}

// The index must have exactly these key columns (a later version of the
// install script could change them; better a clear error than a wrong scan).
void check_index(Relation idx, std::initializer_list<AttrNumber> cols) {
    int i = 0;
    bool ok = idx->rd_index->indnkeyatts == (int)cols.size();
    for (AttrNumber a : cols) {
        if (!ok) break;
        ok = idx->rd_index->indkey.values[i++] == a;
    }
    if (!ok)
        elog(ERROR, "pg_claim: index %s does not have the expected columns",
             RelationGetRelationName(idx));
}

void require(Oid rel, AclMode mode) {
    AclResult r = pg_class_aclcheck(rel, GetUserId(), mode);
    if (r != ACLCHECK_OK) aclcheck_error(r, OBJECT_TABLE, get_rel_name(rel));
}

Datum get(TupleTableSlot *slot, AttrNumber a, bool *isnull) { return slot_getattr(slot, a, isnull); }

// One equality probe of an int8 key (first index column) returning the
// first visible row into `slot`.
bool probe_int8(Relation heap, Relation idx, int64 key, Snapshot snap, TupleTableSlot *slot) {
    ScanKeyData k;
    ScanKeyInit(&k, 1, BTEqualStrategyNumber, F_INT8EQ, Int64GetDatum(key));
    IndexScanDesc scan = index_beginscan(heap, idx, snap, 1, 0);
    index_rescan(scan, &k, 1, nullptr, 0);
    bool found = index_getnext_slot(scan, ForwardScanDirection, slot);
    index_endscan(scan);
    return found;
}

}  // namespace

void reset() { cat.valid = false; }

Snapshot latest() { return RegisterSnapshot(GetLatestSnapshot()); }
void release(Snapshot snap) { UnregisterSnapshot(snap); }

struct Tables {
    Mode mode;
    Relation items, items_pkey, items_ready, items_group, claims, claims_pkey, claims_token;
    TupleTableSlot *item_slot, *claim_slot, *scan_slot, *group_slot, *ins_slot;
    EState *estate;
    ResultRelInfo *rri;
};

Tables *open(Mode mode) {
    load();
    // The SQL these paths replace read both tables and wrote claim.claims
    // (and, for complete, claim.items): the same privileges are required.
    if (mode == Mode::Claim) {
        require(cat.items, ACL_SELECT);
        require(cat.claims, ACL_SELECT | ACL_INSERT | ACL_UPDATE | ACL_DELETE);
    } else {
        require(cat.items, ACL_SELECT | ACL_DELETE);
        require(cat.claims, ACL_SELECT | ACL_DELETE);
    }
    PreventCommandIfReadOnly(mode == Mode::Claim ? "claim.claim_next()" : "claim.complete()");
    PreventCommandIfParallelMode(mode == Mode::Claim ? "claim.claim_next()" : "claim.complete()");

    Tables *t = (Tables *)palloc0(sizeof(Tables));
    t->mode = mode;
    t->items = table_open(cat.items, mode == Mode::Complete ? RowExclusiveLock : AccessShareLock);
    t->items_pkey = index_open(cat.items_pkey, AccessShareLock);
    t->claims = table_open(cat.claims, RowExclusiveLock);
    t->claims_pkey = index_open(cat.claims_pkey, AccessShareLock);
    t->claims_token = index_open(cat.claims_token, AccessShareLock);
    check_index(t->items_pkey, {cat.i_id});
    check_index(t->claims_pkey, {cat.c_item});
    check_index(t->claims_token, {cat.c_token});
    t->item_slot = table_slot_create(t->items, nullptr);
    t->claim_slot = table_slot_create(t->claims, nullptr);
    if (mode == Mode::Claim) {
        t->items_ready = index_open(cat.items_ready, AccessShareLock);
        t->items_group = index_open(cat.items_group, AccessShareLock);
        check_index(t->items_ready, {cat.i_queue, cat.i_ord, cat.i_id});
        check_index(t->items_group, {cat.i_queue, cat.i_group, cat.i_id});
        t->scan_slot = table_slot_create(t->items, nullptr);
        t->group_slot = table_slot_create(t->items, nullptr);
        t->ins_slot = MakeSingleTupleTableSlot(RelationGetDescr(t->claims), &TTSOpsVirtual);
        t->estate = CreateExecutorState();
        t->rri = makeNode(ResultRelInfo);
        InitResultRelInfo(t->rri, t->claims, 0, nullptr, 0);
        ExecOpenIndices(t->rri, false);
    }
    return t;
}

void close(Tables *t) {
    if (t->mode == Mode::Claim) {
        ExecCloseIndices(t->rri);
        FreeExecutorState(t->estate);
        ExecDropSingleTupleTableSlot(t->ins_slot);
        ExecDropSingleTupleTableSlot(t->scan_slot);
        ExecDropSingleTupleTableSlot(t->group_slot);
        index_close(t->items_group, NoLock);
        index_close(t->items_ready, NoLock);
    }
    ExecDropSingleTupleTableSlot(t->claim_slot);
    ExecDropSingleTupleTableSlot(t->item_slot);
    index_close(t->claims_token, NoLock);
    index_close(t->claims_pkey, NoLock);
    table_close(t->claims, NoLock);
    index_close(t->items_pkey, NoLock);
    table_close(t->items, NoLock);
    pfree(t);
}

struct ReadyScan {
    Tables *t;
    IndexScanDesc scan;
    ScanKeyData keys[2];
    ScanKeyData row[2];
};

ReadyScan *ready_begin(Tables *t, int32 queue_id, const ScanPos *from, bool inclusive,
                       Snapshot snap) {
    ReadyScan *s = (ReadyScan *)palloc0(sizeof(ReadyScan));
    s->t = t;
    int nkeys = 1;
    ScanKeyInit(&s->keys[0], 1, BTEqualStrategyNumber, F_INT4EQ, Int32GetDatum(queue_id));
    if (from != nullptr) {
        // (ord, id) >= / > (from.ord, from.id) as one row comparison: the
        // scan starts right there instead of at the first entry of `ord`.
        StrategyNumber st = inclusive ? BTGreaterEqualStrategyNumber : BTGreaterStrategyNumber;
        ScanKeyEntryInitialize(&s->row[0], SK_ROW_MEMBER, 2, st, INT4OID, InvalidOid,
                               F_BTINT4CMP, Int32GetDatum(from->ord));
        ScanKeyEntryInitialize(&s->row[1], SK_ROW_MEMBER | SK_ROW_END, 3, st, INT8OID,
                               InvalidOid, F_BTINT8CMP, Int64GetDatum(from->id));
        ScanKeyEntryInitialize(&s->keys[1], SK_ROW_HEADER, 2, st, InvalidOid, InvalidOid,
                               InvalidOid, PointerGetDatum(s->row));
        nkeys = 2;
    }
    s->scan = index_beginscan(t->items, t->items_ready, snap, nkeys, 0);
    index_rescan(s->scan, s->keys, nkeys, nullptr, 0);
    return s;
}

bool ready_next(ReadyScan *s, int64 *id, int32 *ord, Datum *group_key, bool *group_null) {
    TupleTableSlot *slot = s->t->scan_slot;
    while (index_getnext_slot(s->scan, ForwardScanDirection, slot)) {
        bool isnull;
        // The index predicate holds for every version reached through it;
        // checked anyway, it costs nothing.
        if (DatumGetChar(get(slot, cat.i_state, &isnull)) != 'r') continue;
        (void)get(slot, cat.i_run_at, &isnull);
        if (!isnull) continue;
        *id = DatumGetInt64(get(slot, cat.i_id, &isnull));
        *ord = DatumGetInt32(get(slot, cat.i_ord, &isnull));
        *group_key = get(slot, cat.i_group, group_null);
        return true;
    }
    return false;
}

void ready_end(ReadyScan *s) {
    index_endscan(s->scan);
    ExecClearTuple(s->t->scan_slot);
    pfree(s);
}

bool claim_of(Tables *t, int64 item_id, Snapshot snap, ClaimRow *out) {
    TupleTableSlot *slot = t->claim_slot;
    if (!probe_int8(t->claims, t->claims_pkey, item_id, snap, slot)) return false;
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
    IndexScanDesc scan = index_beginscan(t->claims, t->claims_token, snap, 1, 0);
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

bool item_get(Tables *t, int64 id, Snapshot snap, ItemRow *out) {
    TupleTableSlot *slot = t->item_slot;
    if (!probe_int8(t->items, t->items_pkey, id, snap, slot)) return false;
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
    return true;
}

bool group_has_earlier(Tables *t, int32 queue_id, Datum group_key, int64 id, Snapshot snap) {
    ScanKeyData k[3];
    ScanKeyInit(&k[0], 1, BTEqualStrategyNumber, F_INT4EQ, Int32GetDatum(queue_id));
    ScanKeyEntryInitialize(&k[1], 0, 2, BTEqualStrategyNumber, InvalidOid, C_COLLATION_OID,
                           F_TEXTEQ, group_key);
    ScanKeyInit(&k[2], 3, BTLessStrategyNumber, F_INT8LT, Int64GetDatum(id));
    IndexScanDesc scan = index_beginscan(t->items, t->items_group, snap, 3, 0);
    index_rescan(scan, k, 3, nullptr, 0);
    TupleTableSlot *slot = t->group_slot;
    bool found = false;
    while (index_getnext_slot(scan, ForwardScanDirection, slot)) {
        bool isnull;
        if (DatumGetChar(get(slot, cat.i_state, &isnull)) == 'r') {
            found = true;
            break;
        }
    }
    index_endscan(scan);
    ExecClearTuple(slot);
    return found;
}

void claim_insert(Tables *t, int64 item_id, int32 queue_id, int64 token, int32 attempt,
                  TimestampTz lease_until, TimestampTz claimed_at, Datum worker,
                  bool worker_null) {
    TupleTableSlot *slot = t->ins_slot;
    ExecClearTuple(slot);
    int natts = RelationGetDescr(t->claims)->natts;
    for (int i = 0; i < natts; ++i) {
        slot->tts_values[i] = (Datum)0;
        slot->tts_isnull[i] = true;
    }
    auto set = [&](AttrNumber a, Datum v, bool isnull) {
        slot->tts_values[a - 1] = v;
        slot->tts_isnull[a - 1] = isnull;
    };
    set(cat.c_item, Int64GetDatum(item_id), false);
    set(cat.c_queue, Int32GetDatum(queue_id), false);
    set(cat.c_token, Int64GetDatum(token), false);
    set(cat.c_attempt, Int32GetDatum(attempt), false);
    set(cat.c_lease, TimestampTzGetDatum(lease_until), false);
    set(cat.c_claimed, TimestampTzGetDatum(claimed_at), false);
    set(cat.c_worker, worker, worker_null);
    ExecStoreVirtualTuple(slot);
    ExecSimpleRelationInsert(t->rri, t->estate, slot);
    ResetPerTupleExprContext(t->estate);
}

namespace {
bool delete_tid(Relation rel, const ItemPointerData *tid) {
    ItemPointerData copy = *tid;
    TM_FailureData tmfd;
    TM_Result r = table_tuple_delete(rel, &copy, GetCurrentCommandId(true), InvalidSnapshot,
                                     InvalidSnapshot, true, &tmfd, false);
    return r == TM_Ok;
}
}  // namespace

bool claim_delete(Tables *t, const ItemPointerData *tid) { return delete_tid(t->claims, tid); }
bool item_delete(Tables *t, const ItemPointerData *tid) { return delete_tid(t->items, tid); }

int64 next_token(Tables *) { return nextval_internal(cat.token_seq, true); }

}  // namespace pgclaim::pg::direct
