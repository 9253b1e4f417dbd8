// The parts of claim.enqueue_trigger (see triggers.cpp for what it does):
// the change a trigger call describes, its payload (trigger_payload.cpp),
// the statement-level paths over transition tables
// (trigger_statement.cpp) and coalescing (trigger_coalesce.cpp).
#pragma once

#include "pg/direct.hpp"
#include "pg/rowjson.hpp"

extern "C" {
#include "commands/trigger.h"
}

namespace pgclaim::api::trigger {

struct Change {
    const char *queue;  // name
    int32 priority;
    bool coalesce;
    int32 batch;        // rows per item ('batch'), 0 for one item per row
    const char *op;
    const char *schema;
    const char *table;
};

// One side of the change: the row from its slot, or an already built
// jsonb row; nothing when neither is given.
struct Side {
    TupleTableSlot *slot;
    Datum jsonb;
};

// --- trigger_payload.cpp

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
void insert_direct(const Change &ch, Datum payload, Datum group);

// --- trigger_statement.cpp

// Without coalescing: one item per changed row, in statement order, built
// straight from the transition tables and written in batches.
void statement_items(FunctionCallInfo fcinfo, TriggerData *td, const Change &ch, int group_att);
// 'batch': the statement's changed rows packed into items per group.
void statement_batches(FunctionCallInfo fcinfo, TriggerData *td, const Change &ch,
                       int group_att);

// --- trigger_coalesce.cpp

// Add one item (or merge it into the newest item of its group). SPI is
// connected. nj/oj: jsonb rows, 0 when absent. group: NULL for none.
void enqueue_change(const Change &ch, Datum nj, Datum oj, const char *group);
// A statement's changes with coalescing: collapsed per group key in SQL
// over the transition tables, then coalesced or inserted one by one.
// group_col: the group column's name, or NULL.
void statement_coalesced(TriggerData *td, const Change &ch, const char *group_col);

}  // namespace pgclaim::api::trigger
