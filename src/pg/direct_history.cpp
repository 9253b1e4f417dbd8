// Server layer: see direct_history.hpp.
#include "pg/direct_history.hpp"
#include "pg/direct_rules.hpp"
#include "pg/direct_tables.hpp"

extern "C" {
#include "access/heapam.h"
#include "access/table.h"
#include "access/tableam.h"
#include "catalog/namespace.h"
#include "catalog/partition.h"
#include "executor/executor.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
}

namespace pgclaim::pg::direct {

namespace {

// The history row's columns, as the SQL path names them.
enum Col { kSlot, kQueue, kId, kGroup, kPayload, kState, kResult, kAttempts, kEnq, kFinished, kCols };
const char *const kColNames[kCols] = {"slot",    "queue_id", "id",       "group_key",   "payload",
                                      "state",   "result",   "attempts", "enqueued_at", "finished_at"};
constexpr int kSlots = 4;

// Resolved once per backend, forgotten on an invalidation of any of them.
struct HistoryCatalog {
    bool valid;
    bool usable;  // the slots are the partitions of claim.finished
    Oid finished, ring, part[kSlots];
    AttrNumber r_slot, r_current;
    AttrNumber col[kSlots][kCols];  // per slot: a partition's columns may be numbered apart
};
HistoryCatalog hc;

void on_relcache_inval(Datum, Oid relid) {
    if (!hc.valid) return;
    bool ours = !OidIsValid(relid) || relid == hc.finished || relid == hc.ring;
    for (int i = 0; i < kSlots; ++i) ours = ours || relid == hc.part[i];
    if (ours) hc.valid = false;
}

void load() {
    if (hc.valid) return;
    register_relcache_callback(on_relcache_inval);
    Oid nsp = get_namespace_oid("claim", false);
    hc.finished = rel_oid(nsp, "finished");
    hc.ring = rel_oid(nsp, "finished_ring");
    hc.r_slot = att(hc.ring, "slot");
    hc.r_current = att(hc.ring, "current");
    hc.usable = true;
    for (int s = 0; s < kSlots; ++s) {
        char name[NAMEDATALEN];
        snprintf(name, sizeof name, "finished_%d", s);
        Oid o = get_relname_relid(name, nsp);
        hc.part[s] = o;
        // The ring truncates the slots by these names; a slot that is not
        // (or no longer) a partition of claim.finished is left to SQL.
        if (!OidIsValid(o) || !get_rel_relispartition(o) ||
            get_partition_parent(o, true) != hc.finished) {
            hc.usable = false;
            continue;
        }
        for (int c = 0; c < kCols; ++c) hc.col[s][c] = att(o, kColNames[c]);
    }
    hc.valid = true;
}

// Would the write into the slot `part` (through claim.finished `parent`)
// miss a rule of either: a trigger, a policy, a CHECK, a filled column?
bool history_needs_sql(Relation parent, Relation part, int s, InsertTarget *it) {
    if (needs_sql(parent, Table::History, true, nullptr, 0) ||
        needs_sql(part, Table::History, true, it->rri->ri_IndexRelationDescs,
                  it->rri->ri_NumIndices))
        return true;
    // Every column the write leaves NULL (error, and any a user added) must
    // be one a plain INSERT leaves NULL.
    TupleDesc d = RelationGetDescr(part);
    for (int i = 0; i < d->natts; ++i) {
        Form_pg_attribute a = TupleDescAttr(d, i);
        if (a->attisdropped) continue;
        bool filled = false;
        for (int c = 0; c < kCols && !filled; ++c) filled = hc.col[s][c] == a->attnum;
        if (!filled && (a->atthasdef || a->attgenerated || a->attnotnull)) return true;
    }
    return false;
}

// The ring's current slot under `snap`, or -1.
int current_slot(Snapshot snap) {
    Relation ring = table_open(hc.ring, AccessShareLock);
    TableScanDesc scan = table_beginscan(ring, snap, 0, nullptr);
    TupleTableSlot *row = table_slot_create(ring, nullptr);
    int slot = -1;
    while (slot < 0 && table_scan_getnextslot(scan, ForwardScanDirection, row)) {
        bool isnull;
        Datum cur = slot_getattr(row, hc.r_current, &isnull);
        if (isnull || !DatumGetBool(cur)) continue;
        Datum v = slot_getattr(row, hc.r_slot, &isnull);
        if (!isnull) slot = DatumGetInt16(v);
    }
    table_endscan(scan);
    ExecDropSingleTupleTableSlot(row);
    table_close(ring, NoLock);
    return slot >= 0 && slot < kSlots ? slot : -1;
}

}  // namespace

Moved finish_to_history(Tables *t, Snapshot snap, Datum result, bool result_null,
                        int32 attempt, TimestampTz now) {
    load();
    // The SQL path's privileges, checked before the locks: INSERT into
    // claim.finished (the slot is reached through it), SELECT of the ring.
    require(hc.finished, ACL_INSERT);
    require(hc.ring, ACL_SELECT);
    if (!hc.usable) return Moved::UseSql;
    int s = current_slot(snap);
    if (s < 0) return Moved::UseSql;
    // The locks an INSERT routed through claim.finished takes.
    Relation parent = table_open(hc.finished, RowExclusiveLock);
    Relation part = table_open(hc.part[s], RowExclusiveLock);
    InsertTarget it;
    target_open(&it, part);
    Moved m = Moved::Done;
    if (!hc.valid || history_needs_sql(parent, part, s, &it)) {
        m = Moved::UseSql;
    } else {
        // The item's values, kept before its deletion (the payload's toast
        // stays readable to this transaction: the insert reads it as the
        // SQL path's INSERT reads the DELETE's RETURNING row).
        TupleTableSlot *item = t->item_slot;
        ExecMaterializeSlot(item);
        ItemPointerData tid = item->tts_tid;
        if (!item_delete(t, &tid)) {
            m = Moved::Gone;
        } else {
            const AttrNumber *col = hc.col[s];
            TupleTableSlot *row = it.slot;
            clear_slot(row);
            bool isnull;
            set_att(row, col[kSlot], Int16GetDatum((int16)s), false);
            Datum v = get(item, cat.i_queue, &isnull);
            set_att(row, col[kQueue], v, isnull);
            v = get(item, cat.i_id, &isnull);
            set_att(row, col[kId], v, isnull);
            v = get(item, cat.i_group, &isnull);
            set_att(row, col[kGroup], v, isnull);
            v = get(item, cat.i_payload, &isnull);
            set_att(row, col[kPayload], v, isnull);
            set_att(row, col[kState], CharGetDatum('c'), false);
            set_att(row, col[kResult], result, result_null);
            set_att(row, col[kAttempts], Int32GetDatum(attempt), false);
            v = get(item, cat.i_enq, &isnull);
            set_att(row, col[kEnq], v, isnull);
            set_att(row, col[kFinished], TimestampTzGetDatum(now), false);
            target_insert(&it);
        }
    }
    target_close(&it);
    table_close(part, NoLock);
    table_close(parent, NoLock);
    return m;
}

}  // namespace pgclaim::pg::direct
