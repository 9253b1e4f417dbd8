// Many new items of one queue at once (see direct_batch.hpp): heap
// rows through table_multi_insert, then their index entries.
#include "pg/direct_batch.hpp"

#include "pg/direct_tables.hpp"
#include "pg/direct_fair.hpp"
#include "pg/direct_rules.hpp"
#include "pg/compat.hpp"

extern "C" {
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

namespace {
constexpr int kBatchRows = 1000;           // like COPY's multi-insert buffer
constexpr Size kBatchBytes = 256 * 1024;  // payload bytes per flush
// What one flush allocates besides the payloads: a heap tuple (the row's
// fixed columns, about 100 bytes, and its payload) per row.
constexpr Size kFlushBytes = kBatchBytes + kBatchRows * 128;
}  // namespace

struct ItemBatch {
    Tables *t;
    int32 queue_id;
    int32 priority;
    int32 fair_key_id;
    MemoryContext mcxt;   // payloads of the rows not yet written
    MemoryContext flush;  // the heap tuples of one flush
    int n;
    Size bytes;
    int64 written;
    CommandId cid;
    TupleTableSlot *slots[kBatchRows];
};

ItemBatch *batch_begin(Tables *t, int32 queue_id, int32 priority, int32 fair_key_id) {
    check_priority(priority);
    ItemBatch *b = (ItemBatch *)palloc0(sizeof(ItemBatch));
    b->t = t;
    b->queue_id = queue_id;
    b->priority = priority;
    b->fair_key_id = fair_key_id;
    // Both contexts keep a first block as large as one flush needs, so a
    // statement of many flushes reuses the same memory instead of faulting
    // in fresh pages for every batch.
    b->mcxt = AllocSetContextCreate(CurrentMemoryContext, "pg_claim item batch", kBatchBytes * 2,
                                    kBatchBytes * 2, ALLOCSET_DEFAULT_MAXSIZE);
    b->flush = AllocSetContextCreate(CurrentMemoryContext, "pg_claim item batch flush",
                                     kFlushBytes, kFlushBytes, ALLOCSET_DEFAULT_MAXSIZE);
    b->cid = GetCurrentCommandId(true);
    return b;
}

MemoryContext batch_memory(ItemBatch *b) { return b->mcxt; }

void batch_flush(ItemBatch *b) {
    if (b->n == 0) return;
    Tables *t = b->t;
    // table_multi_insert forms its heap tuples in the current context and
    // leaves them there: in a context of their own they go with the flush.
    MemoryContext prev = MemoryContextSwitchTo(b->flush);
    table_multi_insert(t->items, b->slots, b->n, b->cid, 0, nullptr);
    for (int i = 0; i < b->n; ++i) {
        if (t->rri->ri_NumIndices > 0)
            (void)compat::insert_index_entries(t->rri, b->slots[i], t->estate);
        ResetPerTupleExprContext(t->estate);
        ExecClearTuple(b->slots[i]);
    }
    MemoryContextSwitchTo(prev);
    b->written += b->n;
    b->n = 0;
    b->bytes = 0;
    MemoryContextReset(b->flush);
    MemoryContextReset(b->mcxt);
}

void batch_add(ItemBatch *b, Datum group_key, bool group_null, Datum payload, int32 fair_key_id) {
    Tables *t = b->t;
    if (b->slots[b->n] == nullptr)
        b->slots[b->n] = MakeSingleTupleTableSlot(RelationGetDescr(t->items), &TTSOpsVirtual);
    TupleTableSlot *slot = b->slots[b->n];
    (void)fill_item(slot, b->queue_id, b->priority, (Datum)0, true, group_key, group_null,
                    payload);
    if (fair_key_id < 0) fair_key_id = b->fair_key_id;
    if (fair_key_id >= 0) set_fair_key(slot, fair_key_id);
    if (t->sql_items) {  // rules of the table's own: one INSERT per row
        (void)sql_insert(Table::Items, slot);
        ++b->written;
        return;
    }
    ExecStoreVirtualTuple(slot);
    b->bytes += VARSIZE_ANY(DatumGetPointer(payload));
    if (++b->n == kBatchRows || b->bytes >= kBatchBytes) batch_flush(b);
}

int64 batch_end(ItemBatch *b) {
    batch_flush(b);
    for (int i = 0; i < kBatchRows && b->slots[i] != nullptr; ++i)
        ExecDropSingleTupleTableSlot(b->slots[i]);
    MemoryContextDelete(b->flush);
    MemoryContextDelete(b->mcxt);
    int64 n = b->written;
    pfree(b);
    return n;
}

}  // namespace pgclaim::pg::direct
