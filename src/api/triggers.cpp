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
// coalesce: see trigger_coalesce.cpp. The parts live in trigger_payload.cpp,
// trigger_statement.cpp and trigger_coalesce.cpp (api/trigger_change.hpp).
#include "api/trigger_payload.hpp"
#include "api/trigger_statement.hpp"
#include "api/trigger_coalesce.hpp"

#include "core/trigger_args.hpp"

extern "C" {
#include "utils/lsyscache.h"
#include "utils/rel.h"
}

using namespace pgclaim;
using namespace pgclaim::api::trigger;

namespace {

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
        Datum fair =
            ch.fair_att > 0 ? pg::rowjson_text(rj, nw ? nw : old, ch.fair_att) : (Datum)0;
        insert_direct(ch, build_payload(ch, rj, Side{nw, 0}, Side{old, 0}), group, fair);
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
    statement_coalesced(td, ch, group_col);
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
    pg::call_core([&] { opts = parse_trigger_args(tg->tgname, tg->tgnargs, tg->tgargs); });

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

    int fair_att = 0;
    if (opts.fair_column[0] != '\0') {
        fair_att = SPI_fnumber(RelationGetDescr(rel), opts.fair_column);
        if (fair_att <= 0)
            pg::error({ERRCODE_UNDEFINED_COLUMN,
                       "Option fair_key=column names a column of the table (case-sensitive, "
                       "not quoted)."},
                      "trigger \"%s\" on table \"%s\": fair_key column \"%s\" does not exist",
                      tg->tgname, table, opts.fair_column);
    }

    Change ch;
    ch.fair_att = fair_att;
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
