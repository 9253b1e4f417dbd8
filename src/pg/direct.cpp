// Server layer: see direct.hpp.
#include "pg/direct.hpp"
#include "pg/direct_tables.hpp"
#include "pg/direct_fair.hpp"
#include "pg/direct_rules.hpp"
#include "pg/compat.hpp"

#include <algorithm>

extern "C" {
#include "access/genam.h"
#include "access/heapam.h"
#include "storage/bufmgr.h"
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

namespace {


// The IndexInfo of each index of our tables, built once per backend
// (ExecOpenIndices builds it again on every call), with its partial-index
// predicate compiled (ExecInsertIndexTuples would compile it every time), in
// long-lived memory. Indexes with expressions are not cached: their
// expression state lives in the caller's executor state.
struct IndexCache {
    bool stale;
    MemoryContext cxt;
    EState *estate;  // predicate states
    int n;
    Oid index[16];
    IndexInfo *info[16];
};
IndexCache icache;

IndexInfo *cached_index_info(Relation idx) {
    Oid o = RelationGetRelid(idx);
    for (int i = 0; i < icache.n; ++i)
        if (icache.index[i] == o) return icache.info[i];
    if (icache.cxt == nullptr) {
        icache.cxt = AllocSetContextCreate(CacheMemoryContext, "pg_claim index info",
                                           ALLOCSET_SMALL_SIZES);
        MemoryContext old = MemoryContextSwitchTo(icache.cxt);
        icache.estate = CreateExecutorState();
        MemoryContextSwitchTo(old);
    }
    bool expressions = !heap_attisnull(idx->rd_indextuple, Anum_pg_index_indexprs, nullptr);
    if (expressions || icache.n == 16) return BuildIndexInfo(idx);  // the caller's memory
    MemoryContext old = MemoryContextSwitchTo(icache.cxt);
    IndexInfo *ii = BuildIndexInfo(idx);
    if (ii->ii_Predicate != NIL)
        ii->ii_PredicateState = ExecPrepareQual(ii->ii_Predicate, icache.estate);
    MemoryContextSwitchTo(old);
    icache.index[icache.n] = o;
    icache.info[icache.n++] = ii;
    return ii;
}

// Any invalidation of one of our relations (DROP EXTENSION among others)
// forgets everything; resolving again costs a few catalog lookups.
void on_relcache_inval(Datum, Oid relid) {
    if (!cat.valid) return;
    if (!OidIsValid(relid) || relid == cat.items || relid == cat.claims || relid == cat.queues ||
        relid == cat.items_pkey || relid == cat.items_ready || relid == cat.items_group ||
        relid == cat.items_scheduled ||
        relid == cat.claims_pkey || relid == cat.claims_token || relid == cat.queues_name ||
        relid == cat.token_seq || relid == cat.item_id_seq ||
        (OidIsValid(cat.item_parents) && relid == cat.item_parents)) {
        cat.valid = false;
        icache.stale = true;  // freed at the next load(), not inside the callback
        return;
    }
    // An index of ours whose state changed (CREATE INDEX CONCURRENTLY and
    // REINDEX CONCURRENTLY flip indisready and indisvalid; their commits
    // invalidate the index itself as well as the table): its IndexInfo,
    // whose ii_ReadyForInserts was read from the old state, is built again.
    // The table's invalidation alone (above) already clears this cache, so
    // a stale "not ready" cannot outlive the flip; the index's own is the
    // second guard. TAP 015 holds a concurrent build at each phase while a
    // backend inserts, and amcheck finds every entry.
    for (int i = 0; i < icache.n; ++i)
        if (icache.index[i] == relid) {
            icache.stale = true;
            return;
        }
}

void load() {
    if (icache.stale) {
        // Tables opened earlier in this transaction may still point into
        // the old cache (load() also runs from items_relid() while a call
        // has its tables open): it is freed when the transaction ends.
        if (icache.cxt != nullptr) {
            if (IsTransactionState())
                MemoryContextSetParent(icache.cxt, TopTransactionContext);
            else
                MemoryContextDelete(icache.cxt);
        }
        icache.estate = nullptr;
        icache.cxt = nullptr;
        icache.n = 0;
        icache.stale = false;
    }
    if (cat.valid) return;
    register_relcache_callback(on_relcache_inval);
    Oid nsp = get_namespace_oid("claim", false);
    cat.items = rel_oid(nsp, "items");
    cat.items_pkey = rel_oid(nsp, "items_pkey");
    cat.items_ready = rel_oid(nsp, "items_ready");
    cat.items_group = rel_oid(nsp, "items_group");
    cat.items_scheduled = rel_oid(nsp, "items_scheduled");
    cat.claims = rel_oid(nsp, "claims");
    cat.claims_pkey = rel_oid(nsp, "claims_pkey");
    cat.claims_token = rel_oid(nsp, "claims_token");
    cat.token_seq = rel_oid(nsp, "token_seq");
    cat.queues = rel_oid(nsp, "queues");
    cat.queues_name = rel_oid(nsp, "queues_name_key");
    cat.item_id_seq = rel_oid(nsp, "item_id_seq");
    cat.item_parents = get_relname_relid("item_parents", nsp);
    cat.q_id = att(cat.queues, "queue_id");
    cat.q_name = att(cat.queues, "name");
    cat.i_priority = att(cat.items, "priority");
    cat.i_dedup = att(cat.items, "dedup_key");
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
    cat.c_item_tid = get_attnum(cat.claims, "item_tid");
    ++cat.generation;
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
        error({ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
               "The extension's objects were altered; re-create the extension."},
              "pg_claim: index %s does not have the expected columns",
              RelationGetRelationName(idx));
}

}  // namespace

void reset() { cat.valid = false; }

Oid items_relid() {
    if (cat.valid) return cat.items;
    if (!OidIsValid(get_namespace_oid("claim", true))) return InvalidOid;
    load();
    return cat.items;
}

Oid item_parents_relid() {
    if (!OidIsValid(items_relid())) return InvalidOid;
    return cat.item_parents;
}

Snapshot latest() { return RegisterSnapshot(GetLatestSnapshot()); }
Snapshot latest(uint64 *completions) {
    // The count lives in the static snapshot; its registered copy drops it.
    Snapshot s = GetLatestSnapshot();
    *completions = s->snapXactCompletionCount;
    return RegisterSnapshot(s);
}
void release(Snapshot snap) { UnregisterSnapshot(snap); }


void target_open(InsertTarget *it, Relation rel) {
    it->slot = MakeSingleTupleTableSlot(RelationGetDescr(rel), &TTSOpsVirtual);
    it->estate = CreateExecutorState();
    it->rri = makeNode(ResultRelInfo);
    InitResultRelInfo(it->rri, rel, 0, nullptr, 0);
    if (!RelationGetForm(rel)->relhasindex) return;
    List *ids = RelationGetIndexList(rel);
    int n = list_length(ids);
    Relation *descs = (Relation *)palloc(sizeof(Relation) * n);
    IndexInfo **infos = (IndexInfo **)palloc(sizeof(IndexInfo *) * n);
    int i = 0;
    ListCell *lc;
    foreach (lc, ids) {
        descs[i] = index_open(lfirst_oid(lc), RowExclusiveLock);
        infos[i] = cached_index_info(descs[i]);
        ++i;
    }
    list_free(ids);
    it->rri->ri_NumIndices = n;
    it->rri->ri_IndexRelationDescs = descs;
    it->rri->ri_IndexRelationInfo = infos;
}

void target_insert(InsertTarget *it) {
    ExecStoreVirtualTuple(it->slot);
    simple_table_tuple_insert(it->rri->ri_RelationDesc, it->slot);
    if (it->rri->ri_NumIndices > 0)
        (void)compat::insert_index_entries(it->rri, it->slot, it->estate);
    ResetPerTupleExprContext(it->estate);
}

void target_close(InsertTarget *it) {
    ExecCloseIndices(it->rri);
    FreeExecutorState(it->estate);
    ExecDropSingleTupleTableSlot(it->slot);
}

namespace {
void open_insert(Tables *t, Relation rel) {
    InsertTarget it;
    target_open(&it, rel);
    t->ins_slot = it.slot;
    t->estate = it.estate;
    t->rri = it.rri;
}

void close_insert(Tables *t) {
    InsertTarget it{t->ins_slot, t->estate, t->rri};
    target_close(&it);
}

// Heap insert and index entries. The callers fill every column themselves
// (NOT NULL columns, the CHECKed state, the generated `ord`), so neither
// constraint checks nor generated-column expressions run here. A table with
// rules of its own (direct_rules.hpp) gets an INSERT through SQL instead;
// returns what sql_insert returns, or 0.
int64 insert_slot(Tables *t) {
    bool items = t->rri->ri_RelationDesc == t->items;
    if (items ? t->sql_items : t->sql_claims)
        return sql_insert(items ? Table::Items : Table::Claims, t->ins_slot);
    InsertTarget it{t->ins_slot, t->estate, t->rri};
    target_insert(&it);
    return 0;
}

}  // namespace

Tables *open(Mode mode) {
    load();
    // The SQL these paths replace read and wrote these tables: the same
    // privileges are required.
    const char *what = mode == Mode::Claim || mode == Mode::Loop ? "claim.claim_next()"
                       : mode == Mode::Complete                   ? "claim.complete()"
                                                                  : "claim.enqueue()";
    // Loop: both sets, before any lock.
    if (mode == Mode::Loop) require(cat.items, ACL_SELECT | ACL_DELETE);
    if (mode == Mode::Claim || mode == Mode::Loop) {
        if (mode == Mode::Claim) require(cat.items, ACL_SELECT);
        require(cat.claims, ACL_SELECT | ACL_INSERT | ACL_UPDATE | ACL_DELETE);
    } else if (mode == Mode::Complete) {
        require(cat.items, ACL_SELECT | ACL_DELETE);
        require(cat.claims, ACL_SELECT | ACL_DELETE);
    } else {
        require(cat.items, ACL_INSERT);
        require(cat.queues, ACL_SELECT);
    }
    PreventCommandIfReadOnly(what);
    PreventCommandIfParallelMode(what);

    Tables *t = (Tables *)palloc0(sizeof(Tables));
    t->mode = t->opened = mode;
    bool claim = mode == Mode::Claim || mode == Mode::Loop;
    if (mode == Mode::Enqueue) {
        // The lock on claim.items comes first: drop_queue locks the table
        // against writers, so the queue looked up afterwards cannot be
        // dropped before this transaction ends.
        // claim.queues is opened by queue_id(), when the producer's queue
        // id is not cached.
        t->items = table_open(cat.items, RowExclusiveLock);
        if (!cat.valid) load();  // as below
        open_insert(t, t->items);
        t->sql_items = needs_sql(t->items, Table::Items, true, t->rri->ri_IndexRelationDescs,
                                 t->rri->ri_NumIndices);
        return t;
    }
    t->items = table_open(cat.items, mode == Mode::Claim ? AccessShareLock : RowExclusiveLock);
    t->claims = table_open(cat.claims, RowExclusiveLock);
    // Taking the locks accepted the invalidations committed before them:
    // REINDEX CONCURRENTLY may have replaced an index (a new OID under the
    // old name). The indexes are resolved again by name, now that the
    // tables are locked: an index found now is not dropped before this
    // transaction ends (REINDEX CONCURRENTLY waits for the tables' lockers).
    if (!cat.valid) load();
    if (claim) {
        // The inserts open every index of claim.claims: probe through those.
        open_insert(t, t->claims);
        // By name: while REINDEX CONCURRENTLY runs, the table has two
        // indexes of the same columns, and the names follow the swap.
        for (int i = 0; i < t->rri->ri_NumIndices; ++i) {
            Relation idx = t->rri->ri_IndexRelationDescs[i];
            const char *name = RelationGetRelationName(idx);
            if (strcmp(name, "claims_pkey") == 0) t->claims_pkey = idx;
            if (strcmp(name, "claims_token") == 0) t->claims_token = idx;
        }
        if (t->claims_pkey == nullptr || t->claims_token == nullptr)
            missing_object("an index of claim.claims");
        t->sql_claims = needs_sql(t->claims, Table::Claims, true, t->rri->ri_IndexRelationDescs,
                                  t->rri->ri_NumIndices);
        // The completion deletes items, as Complete does.
        if (mode == Mode::Loop) t->sql_items = needs_sql(t->items, Table::Items, false, nullptr, 0);
    } else {
        t->claims_pkey = index_open(cat.claims_pkey, AccessShareLock);
        t->claims_token = index_open(cat.claims_token, AccessShareLock);
        t->sql_items = needs_sql(t->items, Table::Items, false, nullptr, 0);
        t->sql_claims = needs_sql(t->claims, Table::Claims, false, nullptr, 0);
    }
    t->rls_items = rls_applies(t->items);
    check_index(t->claims_pkey, {cat.c_item});
    check_index(t->claims_token, {cat.c_token});
    t->item_slot = table_slot_create(t->items, nullptr);
    t->claim_slot = table_slot_create(t->claims, nullptr);
    if (claim) {
        t->items_ready = index_open(cat.items_ready, AccessShareLock);
        check_index(t->items_ready, {cat.i_queue, cat.i_ord, cat.i_id});
        t->scan_slot = table_slot_create(t->items, nullptr);
        t->group_slot = table_slot_create(t->items, nullptr);
    }
    return t;
}

void use(Tables *t, Mode mode) {
    Assert(t->opened == Mode::Loop && (mode == Mode::Claim || mode == Mode::Complete));
    t->mode = mode;
}

void close(Tables *t) {
    if (t->mode == Mode::Enqueue) {
        close_insert(t);
        if (t->queues != nullptr) {
            ExecDropSingleTupleTableSlot(t->queue_slot);
            index_close(t->queues_name, NoLock);
            table_close(t->queues, NoLock);
        }
        table_close(t->items, NoLock);
        pfree(t);
        return;
    }
    bool claim = t->opened == Mode::Claim || t->opened == Mode::Loop;
    if (claim) {
        close_insert(t);
        ExecDropSingleTupleTableSlot(t->scan_slot);
        ExecDropSingleTupleTableSlot(t->group_slot);
        if (t->items_group != nullptr) index_close(t->items_group, NoLock);
        index_close(t->items_ready, NoLock);
    }
    ExecDropSingleTupleTableSlot(t->claim_slot);
    ExecDropSingleTupleTableSlot(t->item_slot);
    if (!claim) {  // in Claim mode they belong to the executor's list
        index_close(t->claims_token, NoLock);
        index_close(t->claims_pkey, NoLock);
    }
    table_close(t->claims, NoLock);
    if (t->items_pkey != nullptr) index_close(t->items_pkey, NoLock);
    table_close(t->items, NoLock);
    pfree(t);
}

// The tables are locked: an index found by name now is not dropped before
// the transaction ends (see open()).
Relation pkey_index(Tables *t) {
    if (t->items_pkey == nullptr) {
        if (!cat.valid) load();
        t->items_pkey = index_open(cat.items_pkey, AccessShareLock);
        check_index(t->items_pkey, {cat.i_id});
    }
    return t->items_pkey;
}

Relation group_index(Tables *t) {
    if (t->items_group == nullptr) {
        if (!cat.valid) load();
        t->items_group = index_open(cat.items_group, AccessShareLock);
        check_index(t->items_group, {cat.i_queue, cat.i_group, cat.i_id});
    }
    return t->items_group;
}

void require_rights(AclMode items, AclMode claims) {
    load();
    if (items != 0) require(cat.items, items);
    if (claims != 0) require(cat.claims, claims);
}

void lock_items(bool drop) {
    load();
    if (!drop) {
        LockRelationOid(cat.items, RowExclusiveLock);
        return;
    }
    // Claimers read claim.items in share mode and write claim.claims: the
    // drop also waits for the claimers in flight (and they for it), so that
    // no claim row outlives its queue and no item of a dropped queue is
    // handed out, whether or not the claimer promoted items on its way.
    // The calls lock the two tables in either order (complete: items, then
    // claims; fail: claims, then items), so the drop never waits for one
    // while it holds the other: it takes one, tries the other, and lets the
    // first go again when the other is busy.
    for (;;) {
        LockRelationOid(cat.items, ShareRowExclusiveLock);
        if (ConditionalLockRelationOid(cat.claims, ShareRowExclusiveLock)) return;
        UnlockRelationOid(cat.items, ShareRowExclusiveLock);
        LockRelationOid(cat.claims, ShareRowExclusiveLock);
        if (ConditionalLockRelationOid(cat.items, ShareRowExclusiveLock)) return;
        UnlockRelationOid(cat.claims, ShareRowExclusiveLock);
        CHECK_FOR_INTERRUPTS();
    }
}

int32 queue_id(Tables *t, Datum name, Snapshot snap) {
    if (t->queues == nullptr) {
        t->queues = table_open(cat.queues, AccessShareLock);
        t->queues_name = index_open(cat.queues_name, AccessShareLock);
        check_index(t->queues_name, {cat.q_name});
        t->queue_slot = table_slot_create(t->queues, nullptr);
    }
    ScanKeyData k;
    ScanKeyEntryInitialize(&k, 0, 1, BTEqualStrategyNumber, InvalidOid,
                           t->queues_name->rd_indcollation[0], F_TEXTEQ, name);
    IndexScanDesc scan = compat::begin_index_scan(t->queues, t->queues_name, snap, 1);
    index_rescan(scan, &k, 1, nullptr, 0);
    int32 id = -1;
    if (index_getnext_slot(scan, ForwardScanDirection, t->queue_slot)) {
        bool isnull;
        id = DatumGetInt32(get(t->queue_slot, cat.q_id, &isnull));
    }
    index_endscan(scan);
    ExecClearTuple(t->queue_slot);
    return id;
}

int64 item_insert(Tables *t, int32 queue_id, int32 priority, Datum run_at, bool run_at_null,
                  Datum group_key, bool group_null, Datum payload, int32 fair_key_id) {
    check_priority(priority);
    int64 id = fill_item(t->ins_slot, queue_id, priority, run_at, run_at_null, group_key,
                         group_null, payload);
    if (fair_key_id >= 0) set_fair_key(t->ins_slot, fair_key_id);
    int64 written = insert_slot(t);
    return t->sql_items ? written : id;
}

bool scheduled_due(Tables *t, int32 queue_id, TimestampTz now, Snapshot snap) {
    Relation idx = index_open(cat.items_scheduled, AccessShareLock);
    check_index(idx, {cat.i_queue, cat.i_run_at});
    ScanKeyData k[2];
    ScanKeyInit(&k[0], 1, BTEqualStrategyNumber, F_INT4EQ, Int32GetDatum(queue_id));
    ScanKeyInit(&k[1], 2, BTLessEqualStrategyNumber, F_TIMESTAMPTZ_LE, TimestampTzGetDatum(now));
    IndexScanDesc scan = compat::begin_index_scan(t->items, idx, snap, 2);
    index_rescan(scan, k, 2, nullptr, 0);
    bool found = index_getnext_slot(scan, ForwardScanDirection, t->group_slot);
    index_endscan(scan);
    ExecClearTuple(t->group_slot);
    index_close(idx, NoLock);
    return found;
}

namespace {
// claim.claims churns: a claim inserts a row, its completion deletes it. An
// insert looks for room only on the page it used last and in the free space
// map, which VACUUM fills; the room of completed claims comes back through
// pruning, which happens when a page is read. So without this every claimer
// would extend the table by a page for each page of claims, all of them
// waiting on its extension lock. The page the next insert targets is pruned
// first: only when it is nearly full and holds rows no snapshot can see,
// and never with a wait (heap_page_prune_opt skips a page someone else has
// pinned).
void prune_target(Relation rel) {
    BlockNumber blk = RelationGetTargetBlock(rel);
    if (blk == InvalidBlockNumber) return;
    Buffer buf = ReadBuffer(rel, blk);
    heap_page_prune_opt(rel, buf);
    ReleaseBuffer(buf);
}
}  // namespace

bool claim_insert(Tables *t, int64 item_id, int32 queue_id, int64 token, int32 attempt,
                  TimestampTz lease_until, TimestampTz claimed_at, Datum worker,
                  bool worker_null, const ItemPointerData *item_tid, ItemPointerData *claim_tid) {
    TupleTableSlot *slot = t->ins_slot;
    clear_slot(slot);
    ItemPointerData tid_copy = *item_tid;  // the slot points at it until the insert
    if (cat.c_item_tid != InvalidAttrNumber)
        set_att(slot, cat.c_item_tid, PointerGetDatum(&tid_copy), false);
    set_att(slot, cat.c_item, Int64GetDatum(item_id), false);
    set_att(slot, cat.c_queue, Int32GetDatum(queue_id), false);
    set_att(slot, cat.c_token, Int64GetDatum(token), false);
    set_att(slot, cat.c_attempt, Int32GetDatum(attempt), false);
    set_att(slot, cat.c_lease, TimestampTzGetDatum(lease_until), false);
    set_att(slot, cat.c_claimed, TimestampTzGetDatum(claimed_at), false);
    set_att(slot, cat.c_worker, worker, worker_null);
    prune_target(t->claims);
    if (t->sql_claims) {
        insert_slot(t);
        return false;
    }
    insert_slot(t);
    *claim_tid = slot->tts_tid;
    return true;
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

bool claim_delete(Tables *t, const ItemPointerData *tid) {
    return t->sql_claims ? sql_delete(Table::Claims, tid) : delete_tid(t->claims, tid);
}
bool item_delete(Tables *t, const ItemPointerData *tid) {
    return t->sql_items ? sql_delete(Table::Items, tid) : delete_tid(t->items, tid);
}

int64 next_token(Tables *) { return nextval_internal(cat.token_seq, true); }

}  // namespace pgclaim::pg::direct
