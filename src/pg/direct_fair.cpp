// Direct reads of fair queues; see direct_fair.hpp.
#include "pg/direct_fair.hpp"

#include "pg/compat.hpp"
#include "pg/direct_tables.hpp"
#include "pg/direct_read.hpp"

extern "C" {
#include "access/genam.h"
#include "access/relscan.h"
#include "access/stratnum.h"
#include "catalog/namespace.h"
#include "utils/fmgroids.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
}

namespace pgclaim::pg::direct {

namespace {
struct FairCatalog {
    uint64 generation;  // of the catalog (direct_tables.hpp) these were resolved with
    Oid items;  // the claim.items these were resolved for
    Oid index;  // claim.items_fair, InvalidOid without it
    AttrNumber att;
};
FairCatalog fc;

const FairCatalog &resolve() {
    // Resolved again whenever direct.cpp's catalog was: an update of the
    // extension (ALTER TABLE claim.items ADD COLUMN fair_key_id) or a
    // REINDEX CONCURRENTLY of items_fair invalidates claim.items.
    Oid items = items_relid();
    if (fc.items != items || !OidIsValid(items) || fc.generation != cat.generation) {
        fc.items = items;
        fc.generation = cat.generation;
        fc.index = InvalidOid;
        fc.att = InvalidAttrNumber;
        if (OidIsValid(items)) {
            Oid nsp = get_namespace_oid("claim", true);
            fc.att = get_attnum(items, "fair_key_id");
            if (OidIsValid(nsp)) fc.index = get_relname_relid("items_fair", nsp);
            if (!OidIsValid(fc.index)) fc.att = InvalidAttrNumber;
        }
    }
    return fc;
}
}  // namespace

bool fair_catalog() { return resolve().att != InvalidAttrNumber; }

AttrNumber fair_key_att() { return resolve().att; }

struct FairScan {
    Tables *t;
    Relation index;
    IndexScanDesc scan;
    ScanKeyData keys[2];
};

namespace {
Relation open_index() {
    const FairCatalog &c = resolve();
    if (!OidIsValid(c.index))
        error({ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE, "Run ALTER EXTENSION pg_claim UPDATE."},
              "pg_claim: fair queues need the index claim.items_fair");
    return index_open(c.index, AccessShareLock);
}
}  // namespace

FairScan *fair_scan_begin(Tables *t, int32 queue_id, int32 key_id, Snapshot snap) {
    FairScan *s = (FairScan *)palloc0(sizeof(FairScan));
    s->t = t;
    s->index = open_index();
    ScanKeyInit(&s->keys[0], 1, BTEqualStrategyNumber, F_INT4EQ, Int32GetDatum(queue_id));
    ScanKeyInit(&s->keys[1], 2, BTEqualStrategyNumber, F_INT4EQ, Int32GetDatum(key_id));
    s->scan = compat::begin_index_scan(t->items, s->index, snap, 2);
    index_rescan(s->scan, s->keys, 2, nullptr, 0);
    return s;
}

bool fair_scan_next(FairScan *s, int64 *id, int32 *ord, Datum *group_key, bool *group_null,
                    ItemPointerData *tid) {
    return next_ready_item(s->t, s->scan, id, ord, group_key, group_null, tid);
}

void fair_scan_end(FairScan *s) {
    end_item_scan(s->t, s->scan);
    index_close(s->index, NoLock);
    pfree(s);
}

int fair_keys_ready(Tables *t, int32 queue_id, Snapshot snap, int32 *out, int max) {
    Relation index = open_index();
    const FairCatalog &c = resolve();
    int n = 0;
    int32 after = -1;  // key ids are 0 (the default key) or above
    TupleTableSlot *slot = t->scan_slot;
    while (n < max) {
        ScanKeyData k[2];
        ScanKeyInit(&k[0], 1, BTEqualStrategyNumber, F_INT4EQ, Int32GetDatum(queue_id));
        ScanKeyInit(&k[1], 2, BTGreaterStrategyNumber, F_INT4GT, Int32GetDatum(after));
        IndexScanDesc scan = compat::begin_index_scan(t->items, index, snap, 2);
        index_rescan(scan, k, 2, nullptr, 0);
        bool found = index_getnext_slot(scan, ForwardScanDirection, slot);
        if (found) {
            bool isnull;
            after = DatumGetInt32(get(slot, c.att, &isnull));
            out[n++] = after;
            ExecClearTuple(slot);
        }
        index_endscan(scan);
        if (!found) break;
        CHECK_FOR_INTERRUPTS();
    }
    index_close(index, NoLock);
    return n;
}

void set_fair_key(TupleTableSlot *slot, int32 key_id) {
    const FairCatalog &c = resolve();
    if (c.att == InvalidAttrNumber || key_id < 0) return;
    slot->tts_values[c.att - 1] = Int32GetDatum(key_id);
    slot->tts_isnull[c.att - 1] = false;
}

}  // namespace pgclaim::pg::direct
