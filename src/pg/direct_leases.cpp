// Server layer: see direct_leases.hpp.
#include "pg/direct_leases.hpp"
#include "pg/direct_tables.hpp"
#include "pg/direct_rules.hpp"
#include "pg/compat.hpp"

extern "C" {
#include "access/genam.h"
#include "access/relscan.h"
#include "access/stratnum.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/namespace.h"
#include "commands/sequence.h"
#include "executor/executor.h"
#include "executor/tuptable.h"
#include "miscadmin.h"
#include "nodes/execnodes.h"
#include "tcop/utility.h"
#include "utils/acl.h"
#include "utils/fmgroids.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
}

namespace pgclaim::pg::direct {

namespace {

// Relation OIDs and attribute numbers, resolved once per installation and
// forgotten when one of the relations is invalidated.
struct LeaseCatalog {
    bool valid;
    Oid holders, holders_pkey, released, released_pkey, token_seq;
    AttrNumber h_name, h_slot, h_token, h_holder, h_permits, h_acquired, h_expires;
    AttrNumber r_name, r_slot, r_token;
};
LeaseCatalog lc;

void on_relcache_inval(Datum, Oid relid) {
    if (!lc.valid) return;
    if (!OidIsValid(relid) || relid == lc.holders || relid == lc.holders_pkey ||
        relid == lc.released || relid == lc.released_pkey || relid == lc.token_seq)
        lc.valid = false;
}

void load() {
    if (lc.valid) return;
    register_relcache_callback(on_relcache_inval);
    Oid nsp = get_namespace_oid("claim", false);
    lc.holders = rel_oid(nsp, "lease_holders");
    lc.holders_pkey = rel_oid(nsp, "lease_holders_pkey");
    lc.released = rel_oid(nsp, "lease_released");
    lc.released_pkey = rel_oid(nsp, "lease_released_pkey");
    lc.token_seq = rel_oid(nsp, "token_seq");
    lc.h_name = att(lc.holders, "name");
    lc.h_slot = att(lc.holders, "slot");
    lc.h_token = att(lc.holders, "token");
    lc.h_holder = att(lc.holders, "holder");
    lc.h_permits = att(lc.holders, "permits");
    lc.h_acquired = att(lc.holders, "acquired_at");
    lc.h_expires = att(lc.holders, "expires_at");
    lc.r_name = att(lc.released, "name");
    lc.r_slot = att(lc.released, "slot");
    lc.r_token = att(lc.released, "token");
    lc.valid = true;
}

// Both primary keys are (name, slot): a clear error rather than a wrong
// scan if the installed objects were altered.
void check_pkey(Relation idx, AttrNumber name, AttrNumber slot) {
    if (idx->rd_index->indnkeyatts != 2 || idx->rd_index->indkey.values[0] != name ||
        idx->rd_index->indkey.values[1] != slot)
        error({ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
               "The extension's objects were altered; re-create the extension."},
              "pg_claim: index %s does not have the expected columns",
              RelationGetRelationName(idx));
}

int32 get_int32(TupleTableSlot *s, AttrNumber a) {
    bool isnull;
    return DatumGetInt32(slot_getattr(s, a, &isnull));
}
int64 get_int64(TupleTableSlot *s, AttrNumber a) {
    bool isnull;
    return DatumGetInt64(slot_getattr(s, a, &isnull));
}
TimestampTz get_ts(TupleTableSlot *s, AttrNumber a) {
    bool isnull;
    return DatumGetTimestampTz(slot_getattr(s, a, &isnull));
}

}  // namespace

struct LeaseTables {
    LeaseMode mode;
    Relation holders, holders_pkey, released, released_pkey;
    TupleTableSlot *h_slot, *r_slot;  // rows read
    TupleTableSlot *new_slot;         // the new version of a row being updated
    // The updates of this call go through SQL (direct_rules.hpp).
    bool sql_holders, sql_released;
};

LeaseTables *lease_open(LeaseMode mode) {
    load();
    const char *what =
        mode == LeaseMode::Acquire ? "claim.lease_acquire()" : "claim.lease_release()";
    // The statements these paths replace read and wrote these tables.
    if (mode == LeaseMode::Acquire) {
        require(lc.holders, ACL_SELECT | ACL_UPDATE);
        require(lc.released, ACL_SELECT);
    } else {
        require(lc.holders, ACL_SELECT);
        require(lc.released, ACL_SELECT | ACL_INSERT | ACL_UPDATE);
    }
    PreventCommandIfReadOnly(what);
    PreventCommandIfParallelMode(what);
    LeaseTables *t = (LeaseTables *)palloc0(sizeof(LeaseTables));
    t->mode = mode;
    t->holders =
        table_open(lc.holders, mode == LeaseMode::Acquire ? RowExclusiveLock : AccessShareLock);
    t->released =
        table_open(lc.released, mode == LeaseMode::Release ? RowExclusiveLock : AccessShareLock);
    // The indexes by name again after the tables' locks (as direct.cpp's
    // open(): REINDEX CONCURRENTLY replaces an index under its name).
    load();
    t->holders_pkey = index_open(lc.holders_pkey, AccessShareLock);
    t->released_pkey = index_open(lc.released_pkey, AccessShareLock);
    // An update writes index entries when it is not HOT: the insert rules.
    t->sql_holders = needs_sql(t->holders, Table::Other, true, nullptr, 0);
    t->sql_released = needs_sql(t->released, Table::Other, true, nullptr, 0);
    check_pkey(t->holders_pkey, lc.h_name, lc.h_slot);
    check_pkey(t->released_pkey, lc.r_name, lc.r_slot);
    t->h_slot = table_slot_create(t->holders, nullptr);
    t->r_slot = table_slot_create(t->released, nullptr);
    t->new_slot = MakeSingleTupleTableSlot(
        RelationGetDescr(mode == LeaseMode::Acquire ? t->holders : t->released), &TTSOpsVirtual);
    return t;
}

void lease_close(LeaseTables *t) {
    ExecDropSingleTupleTableSlot(t->new_slot);
    ExecDropSingleTupleTableSlot(t->r_slot);
    ExecDropSingleTupleTableSlot(t->h_slot);
    index_close(t->released_pkey, NoLock);
    table_close(t->released, NoLock);
    index_close(t->holders_pkey, NoLock);
    table_close(t->holders, NoLock);
    pfree(t);
}

namespace {

// An index scan of a (name, slot) primary key: every slot of `name`, or
// only `slot` when it is not negative.
IndexScanDesc scan_name(Relation heap, Relation idx, Datum name, int32 slot, Snapshot snap) {
    ScanKeyData k[2];
    ScanKeyEntryInitialize(&k[0], 0, 1, BTEqualStrategyNumber, InvalidOid,
                           idx->rd_indcollation[0], F_TEXTEQ, name);
    int nkeys = 1;
    if (slot >= 0) {
        ScanKeyInit(&k[1], 2, BTEqualStrategyNumber, F_INT4EQ, Int32GetDatum(slot));
        nkeys = 2;
    }
    IndexScanDesc scan = compat::begin_index_scan(heap, idx, snap, nkeys);
    index_rescan(scan, k, nkeys, nullptr, 0);
    return scan;
}

// The row of (name, slot) in `slot_out`, if one is visible.
bool probe(Relation heap, Relation idx, Datum name, int32 slot, Snapshot snap,
           TupleTableSlot *slot_out) {
    IndexScanDesc scan = scan_name(heap, idx, name, slot, snap);
    bool found = index_getnext_slot(scan, ForwardScanDirection, slot_out);
    index_endscan(scan);
    return found;
}

// The token of the released holder of (name, slot), or 0.
int64 released_token(LeaseTables *t, Datum name, int32 slot, Snapshot snap) {
    if (!probe(t->released, t->released_pkey, name, slot, snap, t->r_slot)) return 0;
    int64 tok = get_int64(t->r_slot, lc.r_token);
    ExecClearTuple(t->r_slot);
    return tok;
}

enum class Update { Done, Changed, Gone };

// The updates of the SQL path: the columns the direct updates change.
Stmt s_holder_update = {
    "UPDATE claim.lease_holders SET token = $2, holder = $3, permits = $4, acquired_at = $5, "
    "expires_at = $6 WHERE ctid OPERATOR(pg_catalog.=) $1",
    6,
    {TIDOID, INT8OID, TEXTOID, INT4OID, TIMESTAMPTZOID, TIMESTAMPTZOID},
    nullptr};
Stmt s_released_update = {
    "UPDATE claim.lease_released SET token = $2 WHERE ctid OPERATOR(pg_catalog.=) $1", 2,
    {TIDOID, INT8OID}, nullptr};

// update_row through SQL: the row at `tid` gets the new values of `nw`.
// Nothing updated: Changed when the version at `tid` is no longer the
// latest (read it again), Gone when it still is (a policy or a trigger
// kept the row as it was: the caller takes it as gone).
Update update_sql(Relation rel, bool holders, ItemPointer tid, TupleTableSlot *nw) {
    ItemPointerData copy = *tid;
    uint64 n;
    if (holders) {
        Datum v[6] = {PointerGetDatum(&copy), nw->tts_values[lc.h_token - 1],
                      nw->tts_values[lc.h_holder - 1], nw->tts_values[lc.h_permits - 1],
                      nw->tts_values[lc.h_acquired - 1], nw->tts_values[lc.h_expires - 1]};
        char nulls[6] = {' ', ' ', nw->tts_isnull[lc.h_holder - 1] ? 'n' : ' ', ' ', ' ', ' '};
        n = sql_run(s_holder_update, v, nulls);
    } else {
        Datum v[2] = {PointerGetDatum(&copy), nw->tts_values[lc.r_token - 1]};
        n = sql_run(s_released_update, v, nullptr);
    }
    CommandCounterIncrement();
    if (n > 0) return Update::Done;
    Snapshot snap = RegisterSnapshot(GetLatestSnapshot());
    TupleTableSlot *probe = table_slot_create(rel, nullptr);
    copy = *tid;
    bool still = table_tuple_fetch_row_version(rel, &copy, snap, probe);
    ExecDropSingleTupleTableSlot(probe);
    UnregisterSnapshot(snap);
    return still ? Update::Gone : Update::Changed;
}

// Replaces the row at `tid` by the row in `nw`, waiting for a concurrent
// writer of it to end. Changed: the row was updated since it was read (read
// it again); Gone: deleted.
Update update_row(Relation rel, ItemPointer tid, TupleTableSlot *nw, Snapshot snap) {
    ExecMaterializeSlot(nw);
    TM_FailureData tmfd;
    bool index_entries = false, only_summarizing = false;
    TM_Result r = compat::update_tuple(rel, tid, nw, GetCurrentCommandId(true), snap, &tmfd,
                                       &index_entries, &only_summarizing);
    switch (r) {
    case TM_Ok:
        break;
    case TM_Updated:
        return Update::Changed;
    case TM_Deleted:
        return Update::Gone;
    default:
        // TM_SelfModified: only a later command of this same statement
        // could have changed it; TM_Invisible cannot happen to a row read
        // with a current snapshot.
        error({ERRCODE_T_R_SERIALIZATION_FAILURE,
               "Run the call again in a transaction of its own."},
              "row of %s was changed by the same statement", RelationGetRelationName(rel));
    }
    if (index_entries) {
        // Not a HOT update (the page was full): the new version needs its
        // index entries.
        EState *estate = CreateExecutorState();
        ResultRelInfo *rri = makeNode(ResultRelInfo);
        InitResultRelInfo(rri, rel, 0, nullptr, 0);
        ExecOpenIndices(rri, false);
        (void)compat::update_index_entries(rri, nw, estate, only_summarizing);
        ExecCloseIndices(rri);
        FreeExecutorState(estate);
    }
    // Later reads of this statement see the new version.
    CommandCounterIncrement();
    return Update::Done;
}

}  // namespace

int lease_holders(LeaseTables *t, Datum name, LeaseHolderRow **out, int *cap) {
    Snapshot snap = RegisterSnapshot(GetLatestSnapshot());
    IndexScanDesc scan = scan_name(t->holders, t->holders_pkey, name, -1, snap);
    int n = 0;
    while (index_getnext_slot(scan, ForwardScanDirection, t->h_slot)) {
        if (n == *cap) {
            *cap = *cap * 2 + 4;
            *out = (LeaseHolderRow *)repalloc(*out, sizeof(LeaseHolderRow) * *cap);
        }
        LeaseHolderRow &r = (*out)[n++];
        r.slot = get_int32(t->h_slot, lc.h_slot);
        r.permits = get_int32(t->h_slot, lc.h_permits);
        r.expires_at = get_ts(t->h_slot, lc.h_expires);
        r.token = get_int64(t->h_slot, lc.h_token);
        r.acquired_at = get_ts(t->h_slot, lc.h_acquired);
    }
    index_endscan(scan);
    ExecClearTuple(t->h_slot);
    for (int i = 0; i < n; ++i) {
        LeaseHolderRow &r = (*out)[i];
        if (released_token(t, name, r.slot, snap) == r.token) r.expires_at = DT_NOBEGIN;
    }
    UnregisterSnapshot(snap);
    return n;
}

bool lease_take(LeaseTables *t, Datum name, int32 slot, int64 old_token, bool only_expired,
                TimestampTz now, TimestampTz until, Datum holder, bool holder_null,
                int32 permits, int64 *token) {
    for (;;) {
        CHECK_FOR_INTERRUPTS();
        Snapshot snap = RegisterSnapshot(GetLatestSnapshot());
        bool found = probe(t->holders, t->holders_pkey, name, slot, snap, t->h_slot);
        bool ok = found && get_int64(t->h_slot, lc.h_token) == old_token &&
                  (!only_expired || get_ts(t->h_slot, lc.h_expires) <= now);
        if (!ok) {
            ExecClearTuple(t->h_slot);
            UnregisterSnapshot(snap);
            return false;
        }
        int64 tok = nextval_internal(lc.token_seq, true);
        TupleTableSlot *nw = t->new_slot;
        copy_values(nw, t->h_slot);
        nw->tts_values[lc.h_token - 1] = Int64GetDatum(tok);
        nw->tts_values[lc.h_holder - 1] = holder;
        nw->tts_isnull[lc.h_holder - 1] = holder_null;
        nw->tts_values[lc.h_permits - 1] = Int32GetDatum(permits);
        nw->tts_values[lc.h_acquired - 1] = TimestampTzGetDatum(now);
        nw->tts_values[lc.h_expires - 1] = TimestampTzGetDatum(until);
        ExecStoreVirtualTuple(nw);
        ItemPointerData tid = t->h_slot->tts_tid;
        Update u = t->sql_holders ? update_sql(t->holders, true, &tid, nw)
                                  : update_row(t->holders, &tid, nw, snap);
        ExecClearTuple(t->h_slot);
        ExecClearTuple(nw);
        UnregisterSnapshot(snap);
        if (u == Update::Done) {
            *token = tok;
            return true;
        }
        if (u == Update::Gone) return false;
        // Changed by a transaction that committed meanwhile: check again on
        // the version it left (the token drawn is not used; tokens only
        // need to grow).
    }
}

ReleaseResult lease_release(LeaseTables *t, Datum name, int64 token, TimestampTz now) {
    for (;;) {
        CHECK_FOR_INTERRUPTS();
        Snapshot snap = RegisterSnapshot(GetLatestSnapshot());
        int32 slot = -1;
        IndexScanDesc scan = scan_name(t->holders, t->holders_pkey, name, -1, snap);
        while (index_getnext_slot(scan, ForwardScanDirection, t->h_slot)) {
            if (get_int64(t->h_slot, lc.h_token) == token &&
                get_ts(t->h_slot, lc.h_expires) > now) {
                slot = get_int32(t->h_slot, lc.h_slot);
                break;
            }
        }
        index_endscan(scan);
        ExecClearTuple(t->h_slot);
        if (slot < 0) {
            UnregisterSnapshot(snap);
            return ReleaseResult::NotLive;
        }
        if (!probe(t->released, t->released_pkey, name, slot, snap, t->r_slot)) {
            UnregisterSnapshot(snap);
            return ReleaseResult::NoRow;
        }
        if (get_int64(t->r_slot, lc.r_token) == token) {  // released already
            ExecClearTuple(t->r_slot);
            UnregisterSnapshot(snap);
            return ReleaseResult::NotLive;
        }
        TupleTableSlot *nw = t->new_slot;
        copy_values(nw, t->r_slot);
        nw->tts_values[lc.r_token - 1] = Int64GetDatum(token);
        ExecStoreVirtualTuple(nw);
        ItemPointerData tid = t->r_slot->tts_tid;
        Update u = t->sql_released ? update_sql(t->released, false, &tid, nw)
                                   : update_row(t->released, &tid, nw, snap);
        ExecClearTuple(t->r_slot);
        ExecClearTuple(nw);
        UnregisterSnapshot(snap);
        if (u == Update::Done) return ReleaseResult::Released;
        if (u == Update::Gone) return ReleaseResult::NoRow;  // purged: insert it again
        // Changed meanwhile: look again.
    }
}

}  // namespace pgclaim::pg::direct
