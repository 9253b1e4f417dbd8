// Server layer: see direct_rules.hpp.
#include "pg/direct_rules.hpp"

#include "pg/direct_fair.hpp"

extern "C" {
#include "access/tupdesc.h"
#include "catalog/pg_trigger.h"
#include "catalog/pg_type_d.h"
#include "commands/trigger.h"
#include "executor/spi.h"
#include "utils/rls.h"
#include "utils/snapmgr.h"
}

namespace pgclaim::pg::direct {

namespace {

// The columns of claim.items the direct insert fills (fill_item,
// set_fair_key); every other column must be one a plain INSERT leaves NULL.
bool item_filled(AttrNumber a) {
    return a == cat.i_id || a == cat.i_queue || a == cat.i_priority || a == cat.i_ord ||
           a == cat.i_state || a == cat.i_run_at || a == cat.i_enq || a == cat.i_failures ||
           a == cat.i_group || a == cat.i_payload || a == fair_key_att();
}

bool columns_need_sql(Relation rel, Table which) {
    TupleDesc d = RelationGetDescr(rel);
    for (int i = 0; i < d->natts; ++i) {
        Form_pg_attribute a = TupleDescAttr(d, i);
        if (a->attisdropped) continue;
        // claim.claims: claim_insert fills every column of the extension's.
        bool filled = which == Table::Items
                          ? item_filled(a->attnum)
                          : (a->attnum == cat.c_item || a->attnum == cat.c_queue ||
                             a->attnum == cat.c_token || a->attnum == cat.c_attempt ||
                             a->attnum == cat.c_lease || a->attnum == cat.c_claimed ||
                             a->attnum == cat.c_worker);
        if (!filled && (a->atthasdef || a->attgenerated || a->attnotnull)) return true;
    }
    return false;
}

// The statements of the SQL path. They name the extension's columns only:
// the executor fills the others (defaults, generated columns) and checks
// every constraint, fires every trigger and applies row-level security.
Stmt s_item_insert = {
    "INSERT INTO claim.items (id, queue_id, priority, state, run_at, enqueued_at, failures, "
    "group_key, payload) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) RETURNING id",
    9,
    {INT8OID, INT4OID, INT4OID, CHAROID, TIMESTAMPTZOID, TIMESTAMPTZOID, INT4OID, TEXTOID,
     JSONBOID},
    nullptr};
Stmt s_item_insert_fair = {
    "INSERT INTO claim.items (id, queue_id, priority, state, run_at, enqueued_at, failures, "
    "group_key, payload, fair_key_id) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) "
    "RETURNING id",
    10,
    {INT8OID, INT4OID, INT4OID, CHAROID, TIMESTAMPTZOID, TIMESTAMPTZOID, INT4OID, TEXTOID,
     JSONBOID, INT4OID},
    nullptr};
Stmt s_claim_insert = {
    "INSERT INTO claim.claims (item_id, queue_id, token, attempt, lease_until, claimed_at, "
    "worker) VALUES ($1, $2, $3, $4, $5, $6, $7)",
    7,
    {INT8OID, INT4OID, INT8OID, INT4OID, TIMESTAMPTZOID, TIMESTAMPTZOID, TEXTOID},
    nullptr};
Stmt s_item_delete = {"DELETE FROM claim.items WHERE ctid OPERATOR(pg_catalog.=) $1", 1,
                      {TIDOID}, nullptr};
Stmt s_claim_delete = {"DELETE FROM claim.claims WHERE ctid OPERATOR(pg_catalog.=) $1", 1,
                       {TIDOID}, nullptr};
Stmt s_item_visible = {"SELECT 1 FROM claim.items WHERE id OPERATOR(pg_catalog.=) $1", 1,
                       {INT8OID}, nullptr};

// One statement in a SPI connection of its own (the callers may or may not
// be connected), with the latest snapshot as pg::run, but under the
// caller's search_path: the statements name everything with its schema,
// and the triggers they fire run as they would under the caller's own
// INSERT or DELETE. The first column of the first row, if any, in *first.
uint64 run_alone(Stmt &s, Datum *v, const char *nulls, int64 *first = nullptr) {
    SPI_connect();
    if (s.plan == nullptr) {
        SPIPlanPtr p = SPI_prepare(s.sql, s.nargs, s.types);
        if (p == nullptr || SPI_keepplan(p) != 0)
            error({ERRCODE_INTERNAL_ERROR}, "pg_claim: SPI_prepare failed (%s) for: %s",
                  SPI_result_code_string(SPI_result), s.sql);
        s.plan = p;
    }
    int rc = SPI_execute_snapshot(s.plan, v, nulls, GetLatestSnapshot(), InvalidSnapshot, false,
                                  true, 0);
    if (rc < 0)
        error({ERRCODE_INTERNAL_ERROR}, "pg_claim: SPI failed (%s) for: %s",
              SPI_result_code_string(rc), s.sql);
    uint64 n = SPI_processed;
    if (n > 0 && first != nullptr && SPI_tuptable != nullptr) {
        bool isnull;
        Datum d = col(0, 1, &isnull);
        if (!isnull) *first = DatumGetInt64(d);
    }
    SPI_finish();
    return n;
}

// Would one of the table's triggers fire in this session (by its ENABLE
// state and session_replication_role, as the executor decides)?
bool triggers_fire(Relation rel) {
    TriggerDesc *td = rel->trigdesc;
    if (td == nullptr) return false;
    bool replica = SessionReplicationRole == SESSION_REPLICATION_ROLE_REPLICA;
    for (int i = 0; i < td->numtriggers; ++i) {
        char e = td->triggers[i].tgenabled;
        if (e == TRIGGER_DISABLED) continue;
        if (replica ? e == TRIGGER_FIRES_ON_ORIGIN : e == TRIGGER_FIRES_ON_REPLICA) continue;
        return true;
    }
    return false;
}

}  // namespace

uint64 sql_run(Stmt &s, Datum *values, const char *nulls) { return run_alone(s, values, nulls); }

bool rls_applies(Relation rel) {
    return rel->rd_rel->relrowsecurity &&
           check_enable_rls(RelationGetRelid(rel), InvalidOid, false) == RLS_ENABLED;
}

bool needs_sql(Relation rel, Table which, bool insert, Relation *idx, int n) {
    if (triggers_fire(rel) || rls_applies(rel)) return true;
    if (!insert) return false;
    // The extension's own CHECK: items_state_check on claim.items,
    // finished_state_check on claim.finished and its slots.
    TupleConstr *c = RelationGetDescr(rel)->constr;
    const char *own = which == Table::Items     ? "items_state_check"
                      : which == Table::History ? "finished_state_check"
                                                : nullptr;
    for (int i = 0; c != nullptr && i < c->num_check; ++i)
        if (own == nullptr || strcmp(c->check[i].ccname, own) != 0) return true;
    if ((which == Table::Items || which == Table::Claims) && columns_need_sql(rel, which))
        return true;
    for (int i = 0; i < n; ++i)
        if (!idx[i]->rd_index->indimmediate || idx[i]->rd_index->indisexclusion) return true;
    return false;
}

int64 sql_insert(Table which, TupleTableSlot *slot) {
    Datum *v = slot->tts_values;
    bool *isn = slot->tts_isnull;
    if (which == Table::Claims) {
        AttrNumber cols[7] = {cat.c_item, cat.c_queue,   cat.c_token, cat.c_attempt,
                              cat.c_lease, cat.c_claimed, cat.c_worker};
        Datum vals[7];
        char nulls[7];
        for (int i = 0; i < 7; ++i) {
            vals[i] = v[cols[i] - 1];
            nulls[i] = isn[cols[i] - 1] ? 'n' : ' ';
        }
        run_alone(s_claim_insert, vals, nulls);
        return DatumGetInt64(v[cat.c_item - 1]);
    }
    AttrNumber fair = fair_key_att();
    AttrNumber cols[10] = {cat.i_id,  cat.i_queue,    cat.i_priority, cat.i_state, cat.i_run_at,
                           cat.i_enq, cat.i_failures, cat.i_group,    cat.i_payload, fair};
    int ncols = fair != InvalidAttrNumber ? 10 : 9;
    Datum vals[10];
    char nulls[10];
    for (int i = 0; i < ncols; ++i) {
        vals[i] = v[cols[i] - 1];
        nulls[i] = isn[cols[i] - 1] ? 'n' : ' ';
    }
    int64 id = DatumGetInt64(v[cat.i_id - 1]);
    run_alone(ncols == 10 ? s_item_insert_fair : s_item_insert, vals, nulls, &id);
    return id;
}

bool sql_delete(Table which, const ItemPointerData *tid) {
    ItemPointerData copy = *tid;
    Datum v[1] = {PointerGetDatum(&copy)};
    return run_alone(which == Table::Items ? s_item_delete : s_claim_delete, v, nullptr) > 0;
}

bool sql_item_visible(int64 id) {
    Datum v[1] = {Int64GetDatum(id)};
    return run_alone(s_item_visible, v, nullptr) > 0;
}

}  // namespace pgclaim::pg::direct
