// Coalescing in claim.enqueue_trigger: the marker of an item's source is its
// payload's op, schema and table. When the newest pending item of the
// group has the same source, is ready (run_at NULL) and has no live claim,
// the change is merged into it in place ("new" replaced for INSERT/UPDATE,
// "old" for DELETE; an UPDATE keeps the "old" of the first change it
// absorbed) instead of adding an item. Only the newest item of the group
// qualifies, so changes are never reordered. The producer holds that
// item's lock (pg::lock_item) until it commits: claimers skip the item
// meanwhile, so nobody can be handed the payload it is about to replace.
// If the lock is busy, a new item is added instead.
//
// At statement level the changes are collapsed per group key in SQL over
// the transition tables; that SQL runs with search_path pinned
// (pg::pin_search_path).
#include "api/trigger_coalesce.hpp"
#include "api/trigger_payload.hpp"

#include "api/queue_lookup.hpp"
#include "pg/item_locks.hpp"

extern "C" {
#include "lib/stringinfo.h"
#include "utils/builtins.h"
}

namespace pgclaim::api::trigger {

using pg::Stmt;

namespace {

// The newest pending item of the group, if it is a coalescing target.
Stmt s_coalesce_target = {
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
Stmt s_coalesce_merge = {
    "UPDATE claim.items i SET payload = i.payload ||"
    "  CASE WHEN $3 IS NULL THEN '{}'::jsonb ELSE jsonb_build_object($2::text, $3::jsonb) END "
    "WHERE i.id = $1 AND i.state = 'r' AND i.run_at IS NULL"
    "  AND NOT EXISTS (SELECT 1 FROM claim.claims c WHERE c.item_id = i.id"
    "                    AND c.lease_until > $4)"
    "  AND NOT EXISTS (SELECT 1 FROM claim.items e WHERE e.queue_id = i.queue_id"
    "                    AND e.group_key = i.group_key AND e.state = 'r' AND e.id > i.id)",
    4, {INT8OID, TEXTOID, JSONBOID, TIMESTAMPTZOID}, nullptr};

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

}  // namespace

void enqueue_change(const Change &ch, Datum nj, Datum oj, const char *group) {
    if (ch.coalesce && group != nullptr) {
        api::QueueInfo q = api::lookup_queue(ch.queue);
        TimestampTz now = pg::clock_now();
        Datum fv[6] = {Int32GetDatum(q.queue_id), CStringGetTextDatum(group),
                       CStringGetTextDatum(ch.op), CStringGetTextDatum(ch.schema),
                       CStringGetTextDatum(ch.table), TimestampTzGetDatum(now)};
        if (pg::run(s_coalesce_target, fv, nullptr) > 0) {
            int64 target = pg::col_int64(0, 1);
            if (pg::lock_item(target, false)) {
                bool is_delete = strcmp(ch.op, "DELETE") == 0;
                Datum uv[4] = {Int64GetDatum(target),
                               CStringGetTextDatum(is_delete ? "old" : "new"),
                               is_delete ? oj : nj, TimestampTzGetDatum(now)};
                char un[5] = {' ', ' ', (is_delete ? oj : nj) ? ' ' : 'n', ' ', '\0'};
                if (pg::run(s_coalesce_merge, uv, un) > 0) return;  // keep the lock
                pg::unlock_item(target);
            }
        }
    }
    Datum payload = build_payload(ch, nullptr, Side{nullptr, nj}, Side{nullptr, oj});
    insert_direct(ch, payload, group ? CStringGetTextDatum(group) : (Datum)0);
}

void statement_coalesced(TriggerData *td, const Change &ch, const char *group_col) {
    const char *newtab = td->tg_trigger->tgnewtable;
    const char *oldtab = td->tg_trigger->tgoldtable;
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

}  // namespace pgclaim::api::trigger
