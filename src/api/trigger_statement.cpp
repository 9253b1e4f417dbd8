// The statement-level paths of claim.enqueue_trigger without coalescing:
// the transition tables are read directly, through a read pointer of our
// own, and the items written in multi-insert batches; with 'batch', the
// changed rows are packed into items per group key.
#include "api/caches.hpp"
#include "api/trigger_statement.hpp"
#include "api/fair.hpp"
#include "api/trigger_payload.hpp"
#include "pg/direct_batch.hpp"

#include "shmem/wakeup.hpp"
#include "shmem/metrics.hpp"

extern "C" {
#include "common/hashfn.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
}

namespace pgclaim::api::trigger {

namespace direct = pgclaim::pg::direct;

namespace {

// A transition table read from its start, through a read pointer of our own
// (other triggers of the statement may read the same table). The pointer
// stays selected while we read: switching read pointers of a tuplestore
// that spilled to disk costs a seek and a block read each time.
struct Transition {
    Tuplestorestate *store;
    int ptr;
    TupleTableSlot *slot;
};

void transition_begin(Transition *tr, Tuplestorestate *store, TupleDesc desc) {
    tr->store = store;
    tr->slot = nullptr;
    if (store == nullptr) return;
    tr->ptr = tuplestore_alloc_read_pointer(store, EXEC_FLAG_REWIND);
    tuplestore_select_read_pointer(store, tr->ptr);
    tuplestore_rescan(store);
    tr->slot = MakeSingleTupleTableSlot(desc, &TTSOpsMinimalTuple);
}

// The next row, or nullptr at the end.
TupleTableSlot *transition_next(Transition *tr) {
    if (tr->store == nullptr) return nullptr;
    return tuplestore_gettupleslot(tr->store, true, false, tr->slot) ? tr->slot : nullptr;
}

void transition_end(Transition *tr) {
    if (tr->store != nullptr) tuplestore_select_read_pointer(tr->store, 0);
    if (tr->slot != nullptr) ExecDropSingleTupleTableSlot(tr->slot);
}

// What both statement-level paths without coalescing read and write: the
// transition tables, the row converter, and a batch of new items.
struct StatementWrite {
    pg::RowJson *rj;
    Transition nt, ot;
    direct::Tables *t;
    int32 qid;
    int32 priority;
    direct::ItemBatch *b;
};

void statement_begin(StatementWrite *w, FunctionCallInfo fcinfo, TriggerData *td,
                     const Change &ch) {
    TupleDesc desc = RelationGetDescr(td->tg_relation);
    w->rj = row_converter(fcinfo, desc);
    transition_begin(&w->nt, td->tg_trigger->tgnewtable ? td->tg_newtable : nullptr, desc);
    transition_begin(&w->ot, td->tg_trigger->tgoldtable ? td->tg_oldtable : nullptr, desc);
    w->t = direct::open(direct::Mode::Enqueue);
    w->qid = change_queue(w->t, ch);
    // In a fair queue the items get the default fair key (docs/fairness.md).
    w->priority = ch.priority;
    w->b = direct::batch_begin(w->t, w->qid, ch.priority, api::fair_key_default(w->qid));
}

// The next changed row (either side may be missing); false at the end.
bool statement_next(StatementWrite *w, TupleTableSlot **nw, TupleTableSlot **old) {
    *nw = transition_next(&w->nt);
    *old = transition_next(&w->ot);
    return *nw != nullptr || *old != nullptr;
}

void statement_end(StatementWrite *w) {
    int64 n = direct::batch_end(w->b);
    direct::close(w->t);
    transition_end(&w->nt);
    transition_end(&w->ot);
    CommandCounterIncrement();
    shmem::count(w->qid, shmem::Metric::Enqueued, n);
    if (n > 0) {
        shmem::notify_ready(shmem::WaitKind::Queue, w->qid, n);
        api::enqueued_ready(w->qid, w->priority);
    }
}

// ---- 'batch': the statement's changed rows packed into items per group

// One group's changed rows waiting to be packed into an item.
struct PendingRows {
    uint64 hash;  // key in Packer::groups
    text *key;    // the group key; nullptr for rows without one
    int n, cap;
    Datum *rows;  // {"new", "old"} per changed row, in statement order
};

struct Packer {
    const Change *ch;
    direct::ItemBatch *b;
    HTAB *groups;            // by 64-bit hash of the key
    PendingRows nokey;       // rows without a group key
    PendingRows **order;     // groups in order of first appearance
    int norder, order_cap;
    MemoryContext keep;      // table, keys, row arrays: until the end
    MemoryContext rows;      // row values: reset after each full flush
    Size pending_bytes;
};

// Buffered row values beyond this are written out early (each group's
// items stay in order; some are just smaller). Each group remembered counts
// too (a table entry and a row array), so many groups also trigger it.
constexpr Size kMaxPendingBytes = 64 * 1024 * 1024;

// {"op", "schema", "table", "rows": [{"new", "old"}, ...]}
void pack_flush(Packer *p, PendingRows *g) {
    if (g->n == 0) return;
    MemoryContext prev = MemoryContextSwitchTo(direct::batch_memory(p->b));
    Datum payload = pg::rowjson_batch_payload(p->ch->op, p->ch->schema, p->ch->table, g->rows, g->n);
    MemoryContextSwitchTo(prev);
    direct::batch_add(p->b, g->key ? PointerGetDatum(g->key) : (Datum)0, g->key == nullptr,
                      payload);
    g->n = 0;
}

void pack_groups_init(Packer *p) {
    HASHCTL hc;
    memset(&hc, 0, sizeof hc);
    hc.keysize = sizeof(uint64);
    hc.entrysize = sizeof(PendingRows);
    hc.hcxt = p->keep;
    p->groups = hash_create("pg_claim trigger groups", 256, &hc,
                            HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
    p->order = nullptr;
    p->norder = p->order_cap = 0;
    p->nokey.n = p->nokey.cap = 0;
    p->nokey.rows = nullptr;
    p->nokey.key = nullptr;
}

// Write every group's pending rows. Unless it is the end of the statement,
// also forget the groups (the items written so far are flushed first: they
// point at the keys), so memory stays bounded however many groups a huge
// statement touches; a group's later rows go into later items.
void pack_flush_all(Packer *p, bool end) {
    for (int i = 0; i < p->norder; ++i) pack_flush(p, p->order[i]);
    pack_flush(p, &p->nokey);
    MemoryContextReset(p->rows);
    p->pending_bytes = 0;
    if (end) return;
    direct::batch_flush(p->b);
    MemoryContextReset(p->keep);
    pack_groups_init(p);
}

// Add one changed row (a jsonb object, any memory) to its group.
void pack_row(Packer *p, Datum group, Datum row) {
    PendingRows *g = &p->nokey;
    if (group != (Datum)0) {
        text *t = DatumGetTextPP(group);
        const char *k = VARDATA_ANY(t);
        int len = (int)VARSIZE_ANY_EXHDR(t);
        uint64 h = hash_bytes_extended((const unsigned char *)k, len, 0);
        bool found;
        g = (PendingRows *)hash_search(p->groups, &h, HASH_ENTER, &found);
        bool same = found && (int)VARSIZE_ANY_EXHDR(g->key) == len &&
                    memcmp(VARDATA_ANY(g->key), k, len) == 0;
        if (!same) {
            if (found) {
                pack_flush(p, g);  // another key with the same hash: its rows go first
            } else {
                g->n = g->cap = 0;
                g->rows = nullptr;
                if (p->norder == p->order_cap) {
                    p->order_cap = p->order_cap ? p->order_cap * 2 : 64;
                    p->order = (PendingRows **)(p->order
                                                    ? repalloc(p->order, sizeof(PendingRows *) *
                                                                             p->order_cap)
                                                    : MemoryContextAlloc(p->keep,
                                                                         sizeof(PendingRows *) *
                                                                             p->order_cap));
                }
                p->order[p->norder++] = g;
                p->pending_bytes += 64;  // the group's own bookkeeping
            }
            g->key = (text *)MemoryContextAlloc(p->keep, VARHDRSZ + len);
            SET_VARSIZE(g->key, VARHDRSZ + len);
            memcpy(VARDATA(g->key), k, len);
        }
    }
    if (g->n == g->cap) {
        g->cap = g->cap ? g->cap * 2 : 8;
        if (g->cap > p->ch->batch) g->cap = p->ch->batch;
        g->rows = (Datum *)(g->rows ? repalloc(g->rows, sizeof(Datum) * g->cap)
                                    : MemoryContextAlloc(p->keep, sizeof(Datum) * g->cap));
    }
    Size size = VARSIZE_ANY(DatumGetPointer(row));
    void *copy = MemoryContextAlloc(p->rows, size);
    memcpy(copy, DatumGetPointer(row), size);
    g->rows[g->n++] = PointerGetDatum(copy);
    p->pending_bytes += size;
    if (g->n == p->ch->batch) pack_flush(p, g);
    if (p->pending_bytes > kMaxPendingBytes) pack_flush_all(p, false);
}

}  // namespace

void statement_items(FunctionCallInfo fcinfo, TriggerData *td, const Change &ch, int group_att) {
    StatementWrite w;
    statement_begin(&w, fcinfo, td, ch);
    TupleTableSlot *nw, *old;
    while (statement_next(&w, &nw, &old)) {
        MemoryContext prev = MemoryContextSwitchTo(direct::batch_memory(w.b));
        Datum payload = build_payload(ch, w.rj, Side{nw, 0}, Side{old, 0});
        Datum group =
            group_att > 0 ? pg::rowjson_text(w.rj, nw ? nw : old, group_att) : (Datum)0;
        Datum fair =
            ch.fair_att > 0 ? pg::rowjson_text(w.rj, nw ? nw : old, ch.fair_att) : (Datum)0;
        MemoryContextSwitchTo(prev);
        int32 key = fair != (Datum)0 ? api::fair_key_text(w.qid, DatumGetTextPP(fair)) : -1;
        direct::batch_add(w.b, group, group == (Datum)0, payload, key);
        CHECK_FOR_INTERRUPTS();
    }
    statement_end(&w);
}

// 'batch': the changed rows of the statement in items of up to ch.batch
// rows per group key, each group's rows in statement order.
void statement_batches(FunctionCallInfo fcinfo, TriggerData *td, const Change &ch,
                       int group_att) {
    StatementWrite w;
    statement_begin(&w, fcinfo, td, ch);
    Packer p;
    memset(&p, 0, sizeof p);
    p.ch = &ch;
    p.b = w.b;
    p.keep = AllocSetContextCreate(CurrentMemoryContext, "pg_claim trigger groups",
                                   ALLOCSET_DEFAULT_SIZES);
    p.rows = AllocSetContextCreate(CurrentMemoryContext, "pg_claim trigger rows",
                                   ALLOCSET_DEFAULT_SIZES);
    MemoryContext tmp = AllocSetContextCreate(CurrentMemoryContext, "pg_claim trigger row",
                                              ALLOCSET_DEFAULT_SIZES);
    pack_groups_init(&p);
    TupleTableSlot *nw, *old;
    while (statement_next(&w, &nw, &old)) {
        MemoryContextReset(tmp);
        MemoryContext prev = MemoryContextSwitchTo(tmp);
        JsonbParseState *st = nullptr;
        pushJsonbValue(&st, WJB_BEGIN_OBJECT, nullptr);
        push_side(&st, "new", w.rj, Side{nw, 0});
        push_side(&st, "old", w.rj, Side{old, 0});
        Datum row =
            JsonbPGetDatum(JsonbValueToJsonb(pushJsonbValue(&st, WJB_END_OBJECT, nullptr)));
        Datum group =
            group_att > 0 ? pg::rowjson_text(w.rj, nw ? nw : old, group_att) : (Datum)0;
        MemoryContextSwitchTo(prev);
        pack_row(&p, group, row);
        CHECK_FOR_INTERRUPTS();
    }
    pack_flush_all(&p, true);
    statement_end(&w);
    MemoryContextDelete(tmp);
    MemoryContextDelete(p.rows);
    MemoryContextDelete(p.keep);
}

}  // namespace pgclaim::api::trigger
