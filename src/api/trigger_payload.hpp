// The payload of a trigger's change and its one-row insert (see
// trigger_payload.cpp).
#pragma once

#include "api/trigger_change.hpp"
#include "pg/direct.hpp"
#include "pg/rowjson.hpp"

namespace pgclaim::api::trigger {

// The row converter of this trigger call site (fn_extra lives as long as
// the query that fires the trigger).
pg::RowJson *row_converter(FunctionCallInfo fcinfo, TupleDesc desc);
// One row as a jsonb datum (what to_jsonb(row) returns).
Datum row_jsonb(pg::RowJson *rj, TupleTableSlot *slot);
// Push `key` and the side's row (nothing when the side has none).
void push_side(JsonbParseState **st, const char *key, pg::RowJson *rj, Side side);
// {"op", "schema", "table", "new", "old"}, built in place in one pass.
Datum build_payload(const Change &ch, pg::RowJson *rj, Side nw, Side old);
// The queue of the change (cached, see api::producer_queue); raises when
// it does not exist.
int32 change_queue(pg::direct::Tables *t, const Change &ch);
// One new item, without SQL (see pg/direct.hpp). group: text or (Datum)0.
// fair_key: the item's fair key (text), or 0 for the queue's default.
void insert_direct(const Change &ch, Datum payload, Datum group, Datum fair_key = (Datum)0);

}  // namespace pgclaim::api::trigger
