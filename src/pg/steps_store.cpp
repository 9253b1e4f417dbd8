// Durable steps: the worker's purge (steps_store.hpp).
#include "pg/steps_store.hpp"

extern "C" {
#include "catalog/namespace.h"
#include "utils/lsyscache.h"
}

namespace pgclaim::pg {

namespace {

// The checkpoints of items neither in claim.items (unfinished, waiting or
// dead: redrive resumes them) nor in the retained history; then events
// older than their retention ($2), and waits whose item is gone.
Stmt s_purge = {
    "WITH gone AS ("
    "  SELECT s.ctid FROM claim.steps s"
    "  WHERE NOT EXISTS (SELECT 1 FROM claim.items i WHERE i.id = s.item_id)"
    "    AND NOT EXISTS (SELECT 1 FROM claim.finished f JOIN claim.queues q"
    "                      ON q.queue_id = f.queue_id"
    "                    WHERE f.id = s.item_id AND f.finished_at + q.retain > $1)"
    "  LIMIT $3"
    "), s AS (DELETE FROM claim.steps s USING gone WHERE s.ctid = gone.ctid RETURNING 1),"
    " e AS (DELETE FROM claim.events e WHERE e.ctid IN ("
    "         SELECT e2.ctid FROM claim.events e2 WHERE e2.emitted_at < $2 LIMIT $3) RETURNING 1),"
    " w AS (DELETE FROM claim.event_waits w WHERE w.ctid IN ("
    "         SELECT w2.ctid FROM claim.event_waits w2"
    "         WHERE NOT EXISTS (SELECT 1 FROM claim.items i WHERE i.id = w2.item_id) LIMIT $3)"
    "       RETURNING 1) "
    "SELECT (SELECT count(*) FROM s) + (SELECT count(*) FROM e) + (SELECT count(*) FROM w)",
    3, {TIMESTAMPTZOID, TIMESTAMPTZOID, INT8OID}, nullptr};

}  // namespace

bool steps_catalog() {
    Oid nsp = get_namespace_oid("claim", true);
    return OidIsValid(nsp) && OidIsValid(get_relname_relid("steps", nsp)) &&
           OidIsValid(get_relname_relid("event_waits", nsp));
}

int64 purge_steps(TimestampTz now) {
    Datum v[3] = {TimestampTzGetDatum(now), TimestampTzGetDatum(now - kEventRetentionUs),
                  Int64GetDatum(kStepsPurgeBatch)};
    run(s_purge, v, nullptr);
    bool isnull;
    Datum d = col(0, 1, &isnull);
    int64 n = isnull ? 0 : DatumGetInt64(d);
    free_result();
    return n;
}

}  // namespace pgclaim::pg
