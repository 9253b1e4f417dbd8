// SQL surface: trigger enqueue.
//   claim.enqueue_trigger
//
// An AFTER trigger that turns row changes into items of a queue, written in
// the transaction of the change (visible after its commit, gone with its
// rollback; waiters are told after the commit, no NOTIFY).
//
//  * FOR EACH ROW (INSERT, UPDATE, DELETE): one item per row.
//  * FOR EACH STATEMENT with transition tables (REFERENCING NEW TABLE AS ...
//    and/or OLD TABLE AS ...): the transition tables are read directly, one
//    item per row in statement order, written in multi-insert batches.
//    With 'batch': one item per group key carrying up to N rows
//    ({"op", "schema", "table", "rows": [{"new", "old"}, ...]}).
//    FOR EACH STATEMENT on TRUNCATE: one item {"op": "TRUNCATE", ...}.
//
// Payload: {"op", "schema", "table", "new", "old"}, rows as to_jsonb(row)
// writes them (pg/rowjson.hpp); the side that does not exist is left out.
// Coalescing at statement level still runs as SQL over the transition
// tables. The function is declared without SET search_path (its common
// paths run no SQL and look nothing up by name): the coalescing paths pin
// search_path = pg_catalog, pg_temp around their SQL (pg::pin_search_path).
//
// coalesce: the marker of an item's source is its payload's op, schema and
// table. When the newest pending item of the group has the same source, is
// ready (run_at NULL) and has no live claim, the change is merged into it in
// place ("new" replaced for INSERT/UPDATE, "old" for DELETE; an UPDATE keeps
// the "old" of the first change it absorbed) instead of adding an item. Only
// the newest item of the group qualifies, so changes are never reordered. The
// producer holds that item's lock (pg::lock_item) until it commits: claimers
// skip the item meanwhile, so nobody can be handed the payload it is about
// to replace. If the lock is busy, a new item is added instead.
#include "api/shared.hpp"
#include "pg/direct.hpp"
#include "pg/rowjson.hpp"
#include "core/trigger_args.hpp"
#include "shmem/wakeup.hpp"

extern "C" {
#include "commands/trigger.h"
#include "common/hashfn.h"
#include "lib/stringinfo.h"
#include "nodes/makefuncs.h"
#include "utils/fmgroids.h"
#include "utils/hsearch.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
}

using namespace pgclaim;
using pgclaim::pg::Stmt;
namespace direct = pgclaim::pg::direct;

namespace {

// The newest pending item of the group, if it is a coalescing target.
Stmt s_co_find = {
    "SELECT t.id FROM ("
    "  SELECT id, run_at, payload FROM claim.items"
    "  WHERE queue_id = $1 AND group_key = $2 AND state = 'r'"
    "  ORDER BY id DESC LIMIT 1) t "
    "WHERE t.run_at IS NULL AND t.payload->>'op' = $3 AND t.payload->>'schema' = $4"
    "  AND t.payload->>'table' = $5"
    "  AND NOT EXISTS (SELECT 1 FROM claim.claims c WHERE c.item_id = t.id"
    "                    AND c.lease_until > $6)",
    6, {INT4OID, TEXTOID, TEXTOID, TEXTOID, TEXTOID, TIMESTAMPTZOID}, nullptr};

// Merge the change into the target, re-checked under its lock.
Stmt s_co_update = {
    "UPDATE claim.items i SET payload = i.payload ||"
    "  CASE WHEN $3 IS NULL THEN '{}'::jsonb ELSE jsonb_build_object($2::text, $3::jsonb) END "
    "WHERE i.id = $1 AND i.state = 'r' AND i.run_at IS NULL"
    "  AND NOT EXISTS (SELECT 1 FROM claim.claims c WHERE c.item_id = i.id"
    "                    AND c.lease_until > $4)"
    "  AND NOT EXISTS (SELECT 1 FROM claim.items e WHERE e.queue_id = i.queue_id"
    "                    AND e.group_key = i.group_key AND e.state = 'r' AND e.id > i.id)",
    4, {INT8OID, TEXTOID, JSONBOID, TIMESTAMPTZOID}, nullptr};

struct Change {
    const char *queue;  // name
    int32 priority;
    bool coalesce;
    int32 batch;        // rows per item ('batch'), 0 for one item per row
    const char *op;
    const char *schema;
    const char *table;
};

// The row converter of this trigger call site (fn_extra lives as long as
// the query that fires the trigger).
pg::RowJson *row_converter(FunctionCallInfo fcinfo, TupleDesc desc) {
    pg::RowJson *rj = (pg::RowJson *)fcinfo->flinfo->fn_extra;
    if (rj == nullptr || !pg::rowjson_matches(rj, desc)) {
        rj = pg::rowjson_prepare(desc, fcinfo->flinfo->fn_mcxt);
        fcinfo->flinfo->fn_extra = rj;
    }
    return rj;
}

// One row as a jsonb datum (what to_jsonb(row) returns).
Datum row_jsonb(pg::RowJson *rj, TupleTableSlot *slot) {
    JsonbParseState *st = nullptr;
    return JsonbPGetDatum(JsonbValueToJsonb(pg::rowjson_push(rj, &st, slot)));
}

void push_key(JsonbParseState **st, const char *key) {
    JsonbValue k;
    k.type = jbvString;
    k.val.string.val = (char *)key;
    k.val.string.len = (int)strlen(key);
    pushJsonbValue(st, WJB_KEY, &k);
}

void push_string(JsonbParseState **st, const char *key, const char *value) {
    push_key(st, key);
    JsonbValue v;
    v.type = jbvString;
    v.val.string.val = (char *)value;
    v.val.string.len = (int)strlen(value);
    pushJsonbValue(st, WJB_VALUE, &v);
}

// One side of the change: the row from its slot, or an already built
// jsonb row; nothing when neither is given.
struct Side {
    TupleTableSlot *slot;
    Datum jsonb;
};

void push_side(JsonbParseState **st, const char *key, pg::RowJson *rj, Side side) {
    if (side.slot != nullptr) {
        push_key(st, key);
        pg::rowjson_push(rj, st, side.slot);
    } else if (side.jsonb != (Datum)0) {
        push_key(st, key);
        Jsonb *jb = DatumGetJsonbP(side.jsonb);
        JsonbValue v;
        v.type = jbvBinary;
        v.val.binary.data = &jb->root;
        v.val.binary.len = (int)(VARSIZE(jb) - VARHDRSZ);
        pushJsonbValue(st, WJB_VALUE, &v);
    }
}

// {"op", "schema", "table", "new", "old"}, built in place in one pass.
Datum build_payload(const Change &ch, pg::RowJson *rj, Side nw, Side old) {
    JsonbParseState *st = nullptr;
    pushJsonbValue(&st, WJB_BEGIN_OBJECT, nullptr);
    push_string(&st, "op", ch.op);
    push_string(&st, "schema", ch.schema);
    push_string(&st, "table", ch.table);
    push_side(&st, "new", rj, nw);
    push_side(&st, "old", rj, old);
    JsonbValue *res = pushJsonbValue(&st, WJB_END_OBJECT, nullptr);
    return JsonbPGetDatum(JsonbValueToJsonb(res));
}

// The queue of the change (cached, see api::producer_queue); raises when
// it does not exist.
int32 change_queue(direct::Tables *t, const Change &ch) {
    return api::producer_queue(t, CStringGetTextDatum(ch.queue), ch.queue);
}

// One new item, without SQL (see pg/direct.hpp). group: text or (Datum)0.
void insert_direct(const Change &ch, Datum payload, Datum group) {
    direct::Tables *t = direct::open(direct::Mode::Enqueue);
    int32 qid = change_queue(t, ch);
    direct::item_insert(t, qid, ch.priority, (Datum)0, true, group, group == (Datum)0, payload);
    direct::close(t);
    CommandCounterIncrement();
    shmem::notify_ready(shmem::WaitKind::Queue, qid);
}

// Add one item (or merge it into the newest item of its group). SPI is
// connected. nj/oj: jsonb rows, 0 when absent. group: NULL for none.
void enqueue_change(const Change &ch, Datum nj, Datum oj, const char *group) {
    if (ch.coalesce && group != nullptr) {
        api::QueueInfo q = api::lookup_queue(ch.queue);
        TimestampTz now = pg::clock_now();
        Datum fv[6] = {Int32GetDatum(q.queue_id), CStringGetTextDatum(group),
                       CStringGetTextDatum(ch.op), CStringGetTextDatum(ch.schema),
                       CStringGetTextDatum(ch.table), TimestampTzGetDatum(now)};
        if (pg::run(s_co_find, fv, nullptr) > 0) {
            int64 target = pg::col_int64(0, 1);
            if (pg::lock_item(target, false)) {
                bool is_delete = strcmp(ch.op, "DELETE") == 0;
                Datum uv[4] = {Int64GetDatum(target),
                               CStringGetTextDatum(is_delete ? "old" : "new"),
                               is_delete ? oj : nj, TimestampTzGetDatum(now)};
                char un[5] = {' ', ' ', (is_delete ? oj : nj) ? ' ' : 'n', ' ', '\0'};
                if (pg::run(s_co_update, uv, un) > 0) return;  // keep the lock
                pg::unlock_item(target);
            }
        }
    }
    Datum payload = build_payload(ch, nullptr, Side{nullptr, nj}, Side{nullptr, oj});
    insert_direct(ch, payload, group ? CStringGetTextDatum(group) : (Datum)0);
}

[[noreturn]] void bad_use(const char *trigger, const char *table, const char *what,
                          const char *hint) {
    pg::error({ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED, hint}, "trigger \"%s\" on table \"%s\": %s",
              trigger, table, what);
}

const char *kStatementHint =
    "Use FOR EACH ROW, or FOR EACH STATEMENT with transition tables: CREATE TRIGGER ... AFTER "
    "INSERT ON t REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION "
    "claim.enqueue_trigger(...) (OLD TABLE for DELETE, either or both for UPDATE).";

void row_level(FunctionCallInfo fcinfo, TriggerData *td, const Change &ch, int group_att) {
    pg::RowJson *rj = row_converter(fcinfo, RelationGetDescr(td->tg_relation));
    TupleTableSlot *nw = nullptr, *old = nullptr;
    if (TRIGGER_FIRED_BY_INSERT(td->tg_event)) {
        nw = td->tg_trigslot;
    } else if (TRIGGER_FIRED_BY_UPDATE(td->tg_event)) {
        old = td->tg_trigslot;
        nw = td->tg_newslot;
    } else {
        old = td->tg_trigslot;
    }
    Datum group = group_att > 0 ? pg::rowjson_text(rj, nw ? nw : old, group_att) : (Datum)0;
    if (!ch.coalesce || group == (Datum)0) {
        insert_direct(ch, build_payload(ch, rj, Side{nw, 0}, Side{old, 0}), group);
        return;
    }
    Datum nj = nw ? row_jsonb(rj, nw) : (Datum)0;
    Datum oj = old ? row_jsonb(rj, old) : (Datum)0;
    int pin = pg::pin_search_path();
    SPI_connect();
    enqueue_change(ch, nj, oj, TextDatumGetCString(group));
    SPI_finish();
    pg::unpin_search_path(pin);
}

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
    w->b = direct::batch_begin(w->t, w->qid, ch.priority);
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
    if (n > 0) shmem::notify_ready(shmem::WaitKind::Queue, w->qid, n);
}

// Without coalescing: one item per changed row, in statement order, built
// straight from the transition tables and written in batches.
void statement_items(FunctionCallInfo fcinfo, TriggerData *td, const Change &ch, int group_att) {
    StatementWrite w;
    statement_begin(&w, fcinfo, td, ch);
    TupleTableSlot *nw, *old;
    while (statement_next(&w, &nw, &old)) {
        MemoryContext prev = MemoryContextSwitchTo(direct::batch_memory(w.b));
        Datum payload = build_payload(ch, w.rj, Side{nw, 0}, Side{old, 0});
        Datum group =
            group_att > 0 ? pg::rowjson_text(w.rj, nw ? nw : old, group_att) : (Datum)0;
        MemoryContextSwitchTo(prev);
        direct::batch_add(w.b, group, group == (Datum)0, payload);
        CHECK_FOR_INTERRUPTS();
    }
    statement_end(&w);
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

// The group key of a transition-table row in SQL: the column's text output
// (what the row level and the direct statement paths use, through the
// type's output function), NULL when the column is. `col` is quoted.
const char *group_expr(const char *col, const char *alias) {
    if (col == nullptr) return "NULL::text";
    StringInfoData e;
    initStringInfo(&e);
    appendStringInfo(&e, "CASE WHEN %s.%s IS NULL THEN NULL ELSE pg_catalog.format(", alias, col);
    appendStringInfoString(&e, "'%s'");
    appendStringInfo(&e, ", %s.%s) END", alias, col);
    return e.data;
}

void statement_level(FunctionCallInfo fcinfo, TriggerData *td, const Change &ch, int group_att,
                     const char *group_col) {
    const char *trig = td->tg_trigger->tgname;
    const char *newtab = td->tg_trigger->tgnewtable;
    const char *oldtab = td->tg_trigger->tgoldtable;
    bool ins = TRIGGER_FIRED_BY_INSERT(td->tg_event);
    bool del = TRIGGER_FIRED_BY_DELETE(td->tg_event);
    bool truncate = TRIGGER_FIRED_BY_TRUNCATE(td->tg_event);

    if (truncate) {
        insert_direct(ch, build_payload(ch, nullptr, Side{nullptr, 0}, Side{nullptr, 0}),
                      (Datum)0);
        return;
    }
    if ((ins && !newtab) || (del && !oldtab) || (!newtab && !oldtab))
        bad_use(trig, ch.table,
                ins ? "a statement-level INSERT trigger needs REFERENCING NEW TABLE"
                    : del ? "a statement-level DELETE trigger needs REFERENCING OLD TABLE"
                          : "a statement-level UPDATE trigger needs REFERENCING NEW TABLE "
                            "and/or OLD TABLE",
                kStatementHint);
    if (ch.batch != 0) {
        statement_batches(fcinfo, td, ch, group_att);
        return;
    }
    if (!ch.coalesce) {
        statement_items(fcinfo, td, ch, group_att);
        return;
    }

    // coalesce: rows(rn, nj, oj, g), the changed rows in statement order.
    StringInfoData rows;
    initStringInfo(&rows);
    const char *gcol = group_col ? quote_identifier(group_col) : nullptr;
    if (newtab && oldtab) {
        appendStringInfo(&rows,
                         "SELECT a.rn, a.nj, b.oj, a.g FROM "
                         "(SELECT row_number() OVER () AS rn, to_jsonb(n) AS nj, %s AS g "
                         " FROM %s n) a JOIN "
                         "(SELECT row_number() OVER () AS rn, to_jsonb(o) AS oj FROM %s o) b "
                         "ON a.rn = b.rn",
                         group_expr(gcol, "n"), quote_identifier(newtab),
                         quote_identifier(oldtab));
    } else {
        bool is_new = newtab != nullptr;
        appendStringInfo(&rows,
                         "SELECT row_number() OVER () AS rn, %s AS nj, %s AS oj, %s AS g "
                         "FROM %s r",
                         is_new ? "to_jsonb(r)" : "NULL::jsonb",
                         is_new ? "NULL::jsonb" : "to_jsonb(r)", group_expr(gcol, "r"),
                         quote_identifier(is_new ? newtab : oldtab));
    }

    StringInfoData sql;
    initStringInfo(&sql);
    int pin = pg::pin_search_path();
    SPI_connect();
    SPI_register_trigger_data(td);

    // coalesce: first collapse the statement's rows per group key (first
    // "old", last "new"), then coalesce or insert each collapsed change.
    appendStringInfo(&sql,
                     "WITH r AS (%s) "
                     "SELECT x.nj, x.oj, x.g FROM ("
                     "  SELECT r.rn, r.nj, r.oj, r.g FROM r WHERE r.g IS NULL"
                     "  UNION ALL"
                     "  SELECT min(r.rn), (array_agg(r.nj ORDER BY r.rn DESC))[1],"
                     "         (array_agg(r.oj ORDER BY r.rn))[1], r.g"
                     "  FROM r WHERE r.g IS NOT NULL GROUP BY r.g) x "
                     "ORDER BY x.rn",
                     rows.data);
    int rc = SPI_execute(sql.data, true, 0);
    if (rc != SPI_OK_SELECT)
        pg::error({ERRCODE_INTERNAL_ERROR}, "pg_claim: trigger enqueue failed (%s)",
                  SPI_result_code_string(rc));
    uint64 n = SPI_processed;
    SPITupleTable *t = SPI_tuptable;
    SPI_tuptable = nullptr;  // ours now: pg::run must not free it
    for (uint64 r = 0; r < n; ++r) {
        bool nj_null, oj_null, g_null;
        Datum nj = SPI_getbinval(t->vals[r], t->tupdesc, 1, &nj_null);
        Datum oj = SPI_getbinval(t->vals[r], t->tupdesc, 2, &oj_null);
        Datum g = SPI_getbinval(t->vals[r], t->tupdesc, 3, &g_null);
        enqueue_change(ch, nj_null ? (Datum)0 : nj, oj_null ? (Datum)0 : oj,
                       g_null ? nullptr : TextDatumGetCString(g));
        CHECK_FOR_INTERRUPTS();
    }
    SPI_freetuptable(t);
    SPI_finish();
    pg::unpin_search_path(pin);
}

}  // namespace

PGCLAIM_FUNCTION(pgclaim_enqueue_trigger) {
    if (!CALLED_AS_TRIGGER(fcinfo))
        pg::error({ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED,
                   "CREATE TRIGGER ... AFTER INSERT OR UPDATE OR DELETE ON t FOR EACH ROW "
                   "EXECUTE FUNCTION claim.enqueue_trigger('queue');"},
                  "claim.enqueue_trigger() must be called as a trigger");
    TriggerData *td = (TriggerData *)fcinfo->context;
    Trigger *tg = td->tg_trigger;
    Relation rel = td->tg_relation;
    const char *table = RelationGetRelationName(rel);

    if (!TRIGGER_FIRED_AFTER(td->tg_event))
        bad_use(tg->tgname, table, "claim.enqueue_trigger() must be fired AFTER the change",
                "Create it as AFTER INSERT OR UPDATE OR DELETE: a BEFORE or INSTEAD OF trigger "
                "would enqueue changes that a later trigger or constraint can still cancel.");

    TriggerOptions opts;
    pg::pure([&] { opts = parse_trigger_args(tg->tgname, tg->tgnargs, tg->tgargs); });

    int group_att = 0;
    if (opts.group_column[0] != '\0') {
        group_att = SPI_fnumber(RelationGetDescr(rel), opts.group_column);
        if (group_att <= 0) {
            pg::error({ERRCODE_UNDEFINED_COLUMN,
                       "The second argument of claim.enqueue_trigger names a column of the table "
                       "(case-sensitive, not quoted); pass '' for no group."},
                      "trigger \"%s\" on table \"%s\": group column \"%s\" does not exist",
                      tg->tgname, table, opts.group_column);
        }
    }

    Change ch;
    ch.queue = opts.queue;
    ch.priority = opts.priority;
    ch.coalesce = opts.coalesce;
    ch.batch = opts.batch;
    ch.schema = get_namespace_name(RelationGetNamespace(rel));
    ch.table = table;
    ch.op = TRIGGER_FIRED_BY_INSERT(td->tg_event)   ? "INSERT"
            : TRIGGER_FIRED_BY_UPDATE(td->tg_event) ? "UPDATE"
            : TRIGGER_FIRED_BY_DELETE(td->tg_event) ? "DELETE"
                                                    : "TRUNCATE";

    if (ch.batch != 0 && TRIGGER_FIRED_FOR_ROW(td->tg_event))
        bad_use(tg->tgname, table, "option batch needs a statement-level trigger",
                "Create the trigger FOR EACH STATEMENT with transition tables (REFERENCING NEW "
                "TABLE AS ...), or drop the option.");

    pg::direct::lock_items(false);
    if (TRIGGER_FIRED_FOR_ROW(td->tg_event))
        row_level(fcinfo, td, ch, group_att);
    else
        statement_level(fcinfo, td, ch, group_att, group_att > 0 ? opts.group_column : nullptr);
    return PointerGetDatum(nullptr);
}
