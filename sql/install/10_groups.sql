-- pg_claim 0.1.0: group claims, blocked groups, trigger enqueue (issue 3).
-- Part of the install script (assembled from sql/install/*.sql in name order).

-- ---------------------------------------------------------------------------
-- Group claims
-- ---------------------------------------------------------------------------

-- Claims, under one token, the head of the ready group whose head comes first
-- in delivery order (or of the group named by group_key) and the ready items
-- that follow it in the group, up to max_items. See docs/groups.md.
CREATE FUNCTION claim.group_claim(queue text,
                                  max_items integer DEFAULT 1000,
                                  lease interval DEFAULT NULL,
                                  wait interval DEFAULT '0',
                                  worker text DEFAULT NULL,
                                  group_key text DEFAULT NULL)
RETURNS SETOF claim.item
LANGUAGE c VOLATILE PARALLEL UNSAFE ROWS 10
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'pgclaim_group_claim';

-- Groups held back by their head item:
--   'delayed'  the head is scheduled for later (run_at in the future) and has
--              never failed; since = when it was enqueued, until = its run_at
--   'backoff'  the head failed and waits for its retry; since = when it was
--              enqueued (the time of the failure is not kept), until = run_at
--   'claimed'  the head has held a live claim for longer than the queue's
--              lease (its holder keeps extending it); since = claimed_at,
--              until = lease_until
-- waiting counts the pending items behind the head. Only items with a group
-- key are listed (an item without one holds nothing back).
CREATE VIEW claim.blocked_groups AS
SELECT q.name AS queue,
       h.group_key,
       h.id AS head_id,
       CASE WHEN h.run_at IS NULL THEN 'claimed'
            WHEN h.failures > 0 THEN 'backoff'
            ELSE 'delayed' END AS reason,
       CASE WHEN h.run_at IS NULL THEN c.claimed_at ELSE h.enqueued_at END AS since,
       CASE WHEN h.run_at IS NULL THEN c.lease_until ELSE h.run_at END AS until,
       (SELECT count(*) FROM claim.items f
         WHERE f.queue_id = h.queue_id AND f.group_key = h.group_key
           AND f.state = 'r' AND f.id > h.id) AS waiting
FROM (SELECT DISTINCT ON (i.queue_id, i.group_key)
             i.id, i.queue_id, i.group_key, i.run_at, i.failures, i.enqueued_at
      FROM claim.items i
      WHERE i.group_key IS NOT NULL AND i.state = 'r'
      ORDER BY i.queue_id, i.group_key, i.id) h
JOIN claim.queues q ON q.queue_id = h.queue_id
LEFT JOIN claim.claims c ON c.item_id = h.id
WHERE (h.run_at IS NOT NULL AND h.run_at > pg_catalog.clock_timestamp())
   OR (h.run_at IS NULL AND c.lease_until > pg_catalog.clock_timestamp()
       AND c.claimed_at <= pg_catalog.clock_timestamp() - q.lease);

-- ---------------------------------------------------------------------------
-- Trigger enqueue
-- ---------------------------------------------------------------------------

-- AFTER trigger for any table: each changed row becomes an item
-- {"op", "schema", "table", "new", "old"} in the same transaction.
--   FOR EACH ROW ... EXECUTE FUNCTION claim.enqueue_trigger('queue' [, 'group_column' [, options]])
--   FOR EACH STATEMENT with REFERENCING NEW TABLE / OLD TABLE: one item per row
--   options: 'coalesce', 'priority=N', 'batch[=N]'. See docs/groups.md.
-- It runs with the privileges of the role that changes the table: that role
-- needs INSERT (and, with coalesce, UPDATE) on claim.items.
-- Declared without SET search_path, like claim_next and complete: it runs
-- for every changed row, its common paths run no SQL and look nothing up by
-- name, and setting a GUC on each call costs more than the rest of a
-- single-row trigger call. The SQL it runs (coalescing) pins
-- search_path = pg_catalog, pg_temp itself, for exactly that SQL.
CREATE FUNCTION claim.enqueue_trigger()
RETURNS trigger
LANGUAGE c VOLATILE PARALLEL UNSAFE
AS 'MODULE_PATHNAME', 'pgclaim_enqueue_trigger';

