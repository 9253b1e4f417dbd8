// History of finished items and dependencies between items; see lineage.hpp.
#include "pg/lineage.hpp"
#include "pg/item_locks.hpp"

#include <algorithm>

#include "pg/direct.hpp"
#include "pg/duties.hpp"

extern "C" {
#include "access/table.h"
#include "catalog/namespace.h"
#include "storage/bufmgr.h"
#include "utils/rel.h"
#include "storage/lmgr.h"
#include "utils/lsyscache.h"
}

namespace pgclaim::pg {

namespace {

Stmt s_finish_retained = {
    "WITH d AS (DELETE FROM claim.items WHERE id = $1"
    "           RETURNING queue_id, id, group_key, payload, enqueued_at) "
    "INSERT INTO claim.finished (slot, queue_id, id, group_key, payload, state, result,"
    "                            attempts, enqueued_at, finished_at) "
    "SELECT r.slot, d.queue_id, d.id, d.group_key, d.payload, 'c', $2, $3, d.enqueued_at, $4 "
    "FROM d, claim.finished_ring r WHERE r.current",
    4, {INT8OID, JSONBOID, INT4OID, TIMESTAMPTZOID}, nullptr};

Stmt s_drop_edges = {
    "DELETE FROM claim.item_parents WHERE parent_id = ANY ($1) RETURNING child_id", 1,
    {INT8ARRAYOID}, nullptr};

Stmt s_release = {
    "WITH r AS ("
    "  UPDATE claim.items i SET state = 'r',"
    "    run_at = CASE WHEN i.run_at > $2 THEN i.run_at END"
    "  WHERE i.id = ANY ($1) AND i.state = 'w'"
    "    AND NOT EXISTS (SELECT 1 FROM claim.item_parents p WHERE p.child_id = i.id)"
    "  RETURNING i.queue_id, i.run_at IS NULL AS ready) "
    "SELECT queue_id, count(*)::int8 FROM r WHERE ready GROUP BY queue_id",
    2, {INT8ARRAYOID, TIMESTAMPTZOID}, nullptr};

// Every waiting descendant, with the ended parent it descends from (edges
// always point from an older item to a newer one, so there are no cycles).
Stmt s_descendants = {
    "WITH RECURSIVE t(id, root) AS ("
    "  SELECT p.child_id, p.parent_id FROM claim.item_parents p WHERE p.parent_id = ANY ($1)"
    "  UNION"
    "  SELECT p.child_id, t.root FROM claim.item_parents p JOIN t ON p.parent_id = t.id) "
    "SELECT id, min(root) FROM t GROUP BY id ORDER BY id",
    1, {INT8ARRAYOID}, nullptr};

Stmt s_end_dead = {
    "WITH e AS (DELETE FROM claim.item_parents WHERE child_id = ANY ($1)), "
    "u AS (UPDATE claim.items i SET state = 'd', died_at = $3,"
    "        last_error = 'parent item ' || x.root || ' ended dead'"
    "      FROM unnest($1::bigint[], $2::bigint[]) AS x(id, root)"
    "      WHERE i.id = x.id AND i.state = 'w' RETURNING 1) "
    "SELECT count(*)::int8 FROM u",
    3, {INT8ARRAYOID, INT8ARRAYOID, TIMESTAMPTZOID}, nullptr};

Stmt s_end_cancelled = {
    "WITH e AS (DELETE FROM claim.item_parents WHERE child_id = ANY ($1)), "
    "d AS (DELETE FROM claim.items i WHERE i.id = ANY ($1) AND i.state = 'w'"
    "      RETURNING i.queue_id, i.id, i.group_key, i.payload, i.failures, i.enqueued_at), "
    "h AS (INSERT INTO claim.finished (slot, queue_id, id, group_key, payload, state, attempts,"
    "                                  enqueued_at, finished_at)"
    "      SELECT r.slot, d.queue_id, d.id, d.group_key, d.payload, 'x', d.failures,"
    "             d.enqueued_at, $2"
    "      FROM d JOIN claim.queues q ON q.queue_id = d.queue_id, claim.finished_ring r"
    "      WHERE r.current AND q.retain > interval '0') "
    "SELECT count(*)::int8 FROM d",
    2, {INT8ARRAYOID, TIMESTAMPTZOID}, nullptr};

// The state of each parent: 'u' unfinished, 'd' dead, 'x' cancelled (and
// still retained), NULL: completed, or unknown.
Stmt s_parent_states = {
    "SELECT p.id,"
    "  CASE WHEN i.state IN ('r', 'w') THEN 'u' WHEN i.state = 'd' THEN 'd'"
    "       WHEN EXISTS (SELECT 1 FROM claim.finished f JOIN claim.queues q"
    "                      ON q.queue_id = f.queue_id"
    "                    WHERE f.id = p.id AND f.state = 'x'"
    "                      AND f.finished_at + q.retain > $2) THEN 'x' END "
    "FROM unnest($1::bigint[]) AS p(id) LEFT JOIN claim.items i ON i.id = p.id",
    2, {INT8ARRAYOID, TIMESTAMPTZOID}, nullptr};

Stmt s_add_parents = {
    "INSERT INTO claim.item_parents (parent_id, child_id) "
    "SELECT DISTINCT p.id, $1 FROM unnest($2::bigint[]) AS p(id)"
    "  JOIN claim.items i ON i.id = p.id AND i.state IN ('r', 'w') "
    "ON CONFLICT DO NOTHING",
    2, {INT8OID, INT8ARRAYOID}, nullptr};

// The slot to truncate and make current, when the ring is due to move.
Stmt s_ring_due = {
    "WITH cfg AS (SELECT max(retain) AS r FROM claim.queues WHERE retain > interval '0'),"
    "     cur AS (SELECT slot, opened_at FROM claim.finished_ring WHERE current) "
    "SELECT n.slot FROM cfg, cur, claim.finished_ring n "
    "WHERE cfg.r IS NOT NULL AND n.slot = (cur.slot + 1) % 4"
    "  AND $1 >= cur.opened_at + greatest(cfg.r / 3, interval '1 second')"
    "  AND (n.closed_at IS NULL OR n.closed_at + cfg.r <= $1)",
    1, {TIMESTAMPTZOID}, nullptr};
Stmt s_ring_close = {
    "UPDATE claim.finished_ring SET current = false, closed_at = $1 WHERE current", 1,
    {TIMESTAMPTZOID}, nullptr};
Stmt s_ring_open = {
    "UPDATE claim.finished_ring SET current = true, opened_at = $1, closed_at = NULL "
    "WHERE slot = $2",
    2, {TIMESTAMPTZOID, INT2OID}, nullptr};

Stmt s_purge_dead = {
    "DELETE FROM claim.items WHERE id IN ("
    "  SELECT i.id FROM claim.queues q JOIN claim.items i ON i.queue_id = q.queue_id"
    "  WHERE q.retain > interval '0' AND i.state = 'd' AND i.died_at + q.retain <= $1"
    "  LIMIT " CppAsString2(PGCLAIM_DUTY_BATCH) ")",
    1, {TIMESTAMPTZOID}, nullptr};

// Sorted copy without duplicates; returns the count.
int sorted_unique(const int64 *in, int n, int64 **out) {
    int64 *v = (int64 *)palloc(sizeof(int64) * (n > 0 ? n : 1));
    for (int i = 0; i < n; ++i) v[i] = in[i];
    std::sort(v, v + n);
    *out = v;
    return (int)(std::unique(v, v + n) - v);
}

}  // namespace

bool lifecycle_catalog() {
    Oid nsp = get_namespace_oid("claim", true);
    return OidIsValid(nsp) && OidIsValid(get_relname_relid("finished_ring", nsp));
}

bool finish_retained(int64 item_id, Datum result, bool result_null, int32 attempt,
                     TimestampTz now) {
    Datum v[4] = {Int64GetDatum(item_id), result, Int32GetDatum(attempt),
                  TimestampTzGetDatum(now)};
    char nulls[4] = {' ', result_null ? 'n' : ' ', ' ', ' '};
    bool done = run(s_finish_retained, v, nulls) > 0;
    free_result();
    return done;
}

bool dependencies_possible() {
    // Resolved once while the table exists; looked up again while it does
    // not (an update may create it).
    Oid relid = direct::item_parents_relid();
    if (!OidIsValid(relid)) {
        Oid nsp = get_namespace_oid("claim", true);
        relid = OidIsValid(nsp) ? get_relname_relid("item_parents", nsp) : InvalidOid;
    }
    if (!OidIsValid(relid)) return false;
    Relation rel = table_open(relid, AccessShareLock);
    bool possible = RelationGetNumberOfBlocks(rel) > 0;
    table_close(rel, AccessShareLock);
    return possible;
}

uint64 release_children(const int64 *parents, int n, TimestampTz now) {
    Datum v[2] = {int8_array(parents, n), TimestampTzGetDatum(now)};
    uint64 nchildren = run(s_drop_edges, v, nullptr);
    if (nchildren == 0) {
        free_result();
        return 0;
    }
    int64 *raw = (int64 *)palloc(sizeof(int64) * nchildren);
    for (uint64 i = 0; i < nchildren; ++i) {
        bool isnull;
        raw[i] = DatumGetInt64(col(i, 1, &isnull));
    }
    free_result();
    int64 *children;
    int nc = sorted_unique(raw, (int)nchildren, &children);
    // A child's other parents may be completing at the same moment: whoever
    // locks the child second sees the first one's edge gone, so exactly one
    // of them releases it.
    for (int i = 0; i < nc; ++i) lock_item(children[i], true);
    v[0] = int8_array(children, nc);
    return run(s_release, v, nullptr);
}

int64 end_descendants(const int64 *parents, int n, char how, TimestampTz now) {
    if (!lifecycle_catalog()) return 0;  // a 0.1.0 catalog has no dependencies
    Datum v[3] = {int8_array(parents, n), (Datum)0, (Datum)0};
    uint64 nd = run(s_descendants, v, nullptr);
    if (nd == 0) {
        free_result();
        return 0;
    }
    int64 *ids = (int64 *)palloc(sizeof(int64) * nd);
    int64 *roots = (int64 *)palloc(sizeof(int64) * nd);
    for (uint64 i = 0; i < nd; ++i) {
        bool isnull;
        ids[i] = DatumGetInt64(col(i, 1, &isnull));
        roots[i] = DatumGetInt64(col(i, 2, &isnull));
    }
    free_result();
    for (uint64 i = 0; i < nd; ++i) lock_item(ids[i], true);
    return end_waiting(ids, roots, (int)nd, how, now);
}

int64 end_waiting(const int64 *ids, const int64 *roots, int n, char how, TimestampTz now) {
    if (how == 'd') {
        Datum w[3] = {int8_array(ids, n), int8_array(roots, n), TimestampTzGetDatum(now)};
        run(s_end_dead, w, nullptr);
    } else {
        Datum w[2] = {int8_array(ids, n), TimestampTzGetDatum(now)};
        run(s_end_cancelled, w, nullptr);
    }
    bool isnull;
    int64 ended = DatumGetInt64(col(0, 1, &isnull));
    free_result();
    return ended;
}

AfterState check_parents(const int64 *parents, int n) {
    AfterState st{0, 0, 0};
    int64 *ids;
    int np = sorted_unique(parents, n, &ids);
    for (int i = 0; i < np; ++i) lock_item(ids[i], true);
    Datum v[2] = {int8_array(ids, np), TimestampTzGetDatum(clock_now())};
    uint64 rows = run(s_parent_states, v, nullptr);
    for (uint64 r = 0; r < rows; ++r) {
        bool isnull;
        int64 id = DatumGetInt64(col(r, 1, &isnull));
        Datum s = col(r, 2, &isnull);
        if (isnull) continue;
        char c = *VARDATA_ANY(DatumGetTextPP(s));
        if (c == 'u')
            ++st.unfinished;
        else if (c == 'd' && st.dead_parent == 0)
            st.dead_parent = id;
        else if (c == 'x' && st.cancelled_parent == 0)
            st.cancelled_parent = id;
    }
    free_result();
    return st;
}

void add_parents(int64 child, const int64 *parents, int n) {
    Datum v[2] = {Int64GetDatum(child), int8_array(parents, n)};
    run(s_add_parents, v, nullptr);
    free_result();
}

bool rotate_history(TimestampTz now) {
    if (!lifecycle_catalog()) return false;
    Datum v[2] = {TimestampTzGetDatum(now), (Datum)0};
    if (run(s_ring_due, v, nullptr) == 0) {
        free_result();
        return false;
    }
    bool isnull;
    int16 slot = DatumGetInt16(col(0, 1, &isnull));
    free_result();
    char name[NAMEDATALEN];
    snprintf(name, sizeof name, "finished_%d", (int)slot);
    Oid relid = get_relname_relid(name, get_namespace_oid("claim", false));
    if (!OidIsValid(relid)) missing_object("table claim.finished_N");
    // Readers of the history hold the slot's lock briefly; never queue
    // behind them (and make completions queue behind us): try again later.
    if (!ConditionalLockRelationOid(relid, AccessExclusiveLock)) return false;
    char sql[64];
    snprintf(sql, sizeof sql, "TRUNCATE claim.%s", name);
    int pin = search_path_pinned() ? -1 : pin_search_path();
    int rc = SPI_execute(sql, false, 0);
    if (pin >= 0) unpin_search_path(pin);
    if (rc != SPI_OK_UTILITY)
        error({ERRCODE_INTERNAL_ERROR}, "pg_claim: %s failed (%s)", sql,
              SPI_result_code_string(rc));
    run(s_ring_close, v, nullptr);
    v[1] = Int16GetDatum(slot);
    run(s_ring_open, v, nullptr);
    free_result();
    return true;
}

int64 purge_expired_dead(TimestampTz now) {
    if (!lifecycle_catalog()) return 0;
    Datum v[1] = {TimestampTzGetDatum(now)};
    int64 n = (int64)run(s_purge_dead, v, nullptr);
    free_result();
    return n;
}

}  // namespace pgclaim::pg
