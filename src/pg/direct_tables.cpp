// The insides of direct access: see direct_tables.hpp.
#include "pg/direct_tables.hpp"

#include "pg/compat.hpp"

extern "C" {
#include "access/relscan.h"
#include "access/stratnum.h"
#include "commands/sequence.h"
#include "utils/fmgroids.h"
#include "utils/acl.h"
#include "utils/lsyscache.h"
#include "miscadmin.h"
}

namespace pgclaim::pg::direct {

Catalog cat;

Oid rel_oid(Oid nsp, const char *name) {
    Oid o = get_relname_relid(name, nsp);
    if (!OidIsValid(o)) missing_object(psprintf("relation claim.%s", name));
    return o;
}

AttrNumber att(Oid rel, const char *name) {
    AttrNumber a = get_attnum(rel, name);
    if (a == InvalidAttrNumber) missing_object(psprintf("column %s", name));
    return a;
}

void require(Oid rel, AclMode mode) {
    AclResult r = pg_class_aclcheck(rel, GetUserId(), mode);
    if (r != ACLCHECK_OK) aclcheck_error(r, OBJECT_TABLE, get_rel_name(rel));
}

bool probe_int8(Relation heap, Relation idx, int64 key, Snapshot snap, TupleTableSlot *slot) {
    ScanKeyData k;
    ScanKeyInit(&k, 1, BTEqualStrategyNumber, F_INT8EQ, Int64GetDatum(key));
    IndexScanDesc scan = compat::begin_index_scan(heap, idx, snap, 1);
    index_rescan(scan, &k, 1, nullptr, 0);
    bool found = index_getnext_slot(scan, ForwardScanDirection, slot);
    index_endscan(scan);
    return found;
}

void register_relcache_callback(RelcacheCallbackFunction fn) {
    static RelcacheCallbackFunction registered[8];
    static int n = 0;
    for (int i = 0; i < n; ++i)
        if (registered[i] == fn) return;
    CacheRegisterRelcacheCallback(fn, (Datum)0);
    if (n < (int)lengthof(registered)) registered[n++] = fn;
}

void copy_values(TupleTableSlot *dst, TupleTableSlot *src) {
    ExecClearTuple(dst);
    slot_getallattrs(src);
    for (int i = 0; i < dst->tts_tupleDescriptor->natts; ++i) {
        dst->tts_values[i] = src->tts_values[i];
        dst->tts_isnull[i] = src->tts_isnull[i];
    }
}

void clear_slot(TupleTableSlot *slot) {
    ExecClearTuple(slot);
    for (int i = 0; i < slot->tts_tupleDescriptor->natts; ++i) {
        slot->tts_values[i] = (Datum)0;
        slot->tts_isnull[i] = true;
    }
}

void set_att(TupleTableSlot *slot, AttrNumber a, Datum v, bool isnull) {
    slot->tts_values[a - 1] = v;
    slot->tts_isnull[a - 1] = isnull;
}

// ord is GENERATED ALWAYS AS (-priority) STORED: computed here as the
// expression would (which raises for the one value it cannot negate).
void check_priority(int32 priority) {
    if (priority == PG_INT32_MIN)
        error({ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE}, "integer out of range");
}

// A new item's row in `slot`'s values (defaults filled in, ord computed, the
// id drawn); returns the id. The caller checked the priority.
int64 fill_item(TupleTableSlot *slot, int32 queue_id, int32 priority, Datum run_at,
                bool run_at_null, Datum group_key, bool group_null, Datum payload) {
    clear_slot(slot);
    int64 id = nextval_internal(cat.item_id_seq, true);
    set_att(slot, cat.i_id, Int64GetDatum(id), false);
    set_att(slot, cat.i_queue, Int32GetDatum(queue_id), false);
    set_att(slot, cat.i_priority, Int32GetDatum(priority), false);
    set_att(slot, cat.i_ord, Int32GetDatum(-priority), false);
    set_att(slot, cat.i_state, CharGetDatum('r'), false);
    set_att(slot, cat.i_run_at, run_at, run_at_null);
    set_att(slot, cat.i_enq, TimestampTzGetDatum(GetCurrentTimestamp()), false);
    set_att(slot, cat.i_failures, Int32GetDatum(0), false);
    set_att(slot, cat.i_group, group_key, group_null);
    set_att(slot, cat.i_payload, payload, false);
    return id;
}

}  // namespace pgclaim::pg::direct
