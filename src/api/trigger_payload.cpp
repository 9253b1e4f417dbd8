// The payload of a trigger's item: {"op", "schema", "table", "new", "old"},
// rows as to_jsonb(row) writes them (pg/rowjson.hpp); the side that does
// not exist is left out. Also the direct insert of one such item.
#include "api/caches.hpp"
#include "api/trigger_payload.hpp"

#include "api/queue_lookup.hpp"
#include "api/fair.hpp"
#include "shmem/wakeup.hpp"
#include "shmem/metrics.hpp"

namespace pgclaim::api::trigger {

namespace direct = pgclaim::pg::direct;

namespace {

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



}  // namespace

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

pg::RowJson *row_converter(FunctionCallInfo fcinfo, TupleDesc desc) {
    pg::RowJson *rj = (pg::RowJson *)fcinfo->flinfo->fn_extra;
    if (rj == nullptr || !pg::rowjson_matches(rj, desc)) {
        rj = pg::rowjson_prepare(desc, fcinfo->flinfo->fn_mcxt);
        fcinfo->flinfo->fn_extra = rj;
    }
    return rj;
}

Datum row_jsonb(pg::RowJson *rj, TupleTableSlot *slot) {
    JsonbParseState *st = nullptr;
    return JsonbPGetDatum(JsonbValueToJsonb(pg::rowjson_push(rj, &st, slot)));
}

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

int32 change_queue(direct::Tables *t, const Change &ch) {
    return api::producer_queue(t, CStringGetTextDatum(ch.queue), ch.queue);
}

void insert_direct(const Change &ch, Datum payload, Datum group, Datum fair_key) {
    direct::Tables *t = direct::open(direct::Mode::Enqueue);
    int32 qid = change_queue(t, ch);
    // Without a key of its own the item gets the queue's default fair key
    // when the queue is fair (docs/fairness.md).
    int32 key = fair_key != (Datum)0 ? api::fair_key_text(qid, DatumGetTextPP(fair_key))
                                     : api::fair_key_default(qid);
    direct::item_insert(t, qid, ch.priority, (Datum)0, true, group, group == (Datum)0, payload,
                        key);
    direct::close(t);
    CommandCounterIncrement();
    shmem::count(qid, shmem::Metric::Enqueued);
    shmem::notify_ready(shmem::WaitKind::Queue, qid);
    api::enqueued_ready(qid, ch.priority);
}

}  // namespace pgclaim::api::trigger
