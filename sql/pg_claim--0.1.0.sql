-- pg_claim 0.1.0: queue core.
-- Part of the install script; sql/pg_claim--0.1.0.sql is assembled from
-- sql/install/*.sql in file-name order by the Makefile.
--
-- Security: every object is schema-qualified, every function pins
-- search_path (enqueue, claim_next, complete and enqueue_trigger pin it
-- around the SQL they run instead, see below), nothing uses CREATE OR REPLACE, and
-- admin functions are revoked from PUBLIC at the end of the script.

\echo Use "CREATE EXTENSION pg_claim" to load this file. \quit

-- Fencing tokens for claims (and later leases): one sequence for the whole
-- database. NO CYCLE: a token is never handed out twice. The C code makes
-- sure the WAL record covering a handed-out value is flushed before the
-- claim returns, so a crash cannot hand the same value out again.
CREATE SEQUENCE claim.token_seq AS bigint NO CYCLE;

CREATE SEQUENCE claim.item_id_seq AS bigint NO CYCLE;

CREATE TABLE claim.queues (
    queue_id      integer GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name          text NOT NULL UNIQUE,
    lease         interval NOT NULL,
    max_attempts  integer NOT NULL,
    backoff       interval NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp()
);

-- One row per unfinished item (ready, scheduled, claimed) or dead item.
-- Completed items are deleted: a job costs one durable INSERT and one durable
-- DELETE. Claims live in claim.claims (UNLOGGED), so claiming writes no WAL.
--   state 'r': pending. run_at IS NULL means ready now; a non-NULL run_at
--              means scheduled (delayed or backing off); it is promoted to
--              NULL when due.
--   state 'd': dead (max_attempts reached); see claim.dead_items.
CREATE TABLE claim.items (
    id            bigint PRIMARY KEY DEFAULT pg_catalog.nextval('claim.item_id_seq'),
    -- No foreign key: its KEY SHARE lock on the queue row would make every
    -- concurrent enqueue of a queue share one multixact. drop_queue removes
    -- the items itself, holding a lock on this table that conflicts with
    -- the producers' row-exclusive lock.
    queue_id      integer NOT NULL,
    priority      integer NOT NULL DEFAULT 0,
    ord           integer NOT NULL GENERATED ALWAYS AS (-priority) STORED,
    state         "char" NOT NULL DEFAULT 'r',
    run_at        timestamptz,
    enqueued_at   timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp(),
    failures      integer NOT NULL DEFAULT 0,
    -- Keys are compared byte-wise (COLLATE "C"): cheaper than the database
    -- collation in the indexes, and what an identifier wants anyway.
    group_key     text COLLATE "C",
    dedup_key     text COLLATE "C",
    payload       jsonb NOT NULL DEFAULT '{}',
    last_error    text,
    died_at       timestamptz,
    CONSTRAINT items_state_check CHECK (state IN ('r', 'd'))
);

-- The claim scan: ready items in delivery order (priority first, then age).
CREATE INDEX items_ready ON claim.items (queue_id, ord, id)
    WHERE state = 'r' AND run_at IS NULL;
-- Scheduled items by due time (promotion of due items).
CREATE INDEX items_scheduled ON claim.items (queue_id, run_at)
    WHERE state = 'r' AND run_at IS NOT NULL;
-- Group order: earlier unfinished items of a group.
CREATE INDEX items_group ON claim.items (queue_id, group_key, id)
    WHERE group_key IS NOT NULL AND state = 'r';
-- Dedup: one unfinished item per key and queue.
CREATE UNIQUE INDEX items_dedup ON claim.items (queue_id, dedup_key)
    WHERE dedup_key IS NOT NULL AND state = 'r';
CREATE INDEX items_dead ON claim.items (queue_id, id) WHERE state = 'd';

-- Payloads larger than about 2 kB (trigger items with 'batch', big jobs) are
-- compressed: with lz4 where the server was built with it (Debian's and most
-- packages are), several times cheaper to write and read than pglz.
DO $$
BEGIN
    ALTER TABLE claim.items ALTER COLUMN payload SET COMPRESSION lz4;
EXCEPTION WHEN feature_not_supported THEN
    NULL;  -- built without lz4: the default (pglz) stays
END $$;

-- Live and past claims. UNLOGGED: claiming, extending and releasing write no
-- WAL and need no fsync. After a crash this table is empty: every item that
-- was claimed is ready again at once (its holder's token is refused, because
-- no claim row carries it any more). A standby cannot read it.
CREATE UNLOGGED TABLE claim.claims (
    item_id       bigint PRIMARY KEY,
    queue_id      integer NOT NULL,
    token         bigint NOT NULL,
    attempt       integer NOT NULL,
    lease_until   timestamptz NOT NULL,
    claimed_at    timestamptz NOT NULL,
    worker        text
);
CREATE INDEX claims_token ON claim.claims (token);

CREATE TYPE claim.item AS (
    queue        text,
    id           bigint,
    token        bigint,
    group_key    text,
    payload      jsonb,
    attempt      integer,
    enqueued_at  timestamptz,
    lease_until  timestamptz
);

-- ---------------------------------------------------------------------------
-- Queue administration
-- ---------------------------------------------------------------------------

CREATE FUNCTION claim.create_queue(queue text,
                                   lease interval DEFAULT '30 seconds',
                                   max_attempts integer DEFAULT 5,
                                   backoff interval DEFAULT '1 second')
RETURNS void
LANGUAGE c VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'pgclaim_create_queue';

CREATE FUNCTION claim.drop_queue(queue text)
RETURNS void
LANGUAGE c VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'pgclaim_drop_queue';

-- ---------------------------------------------------------------------------
-- Producers
-- ---------------------------------------------------------------------------

-- Declared without SET search_path, like claim_next and complete (see
-- there): it runs once per job, and only its dedup path runs SQL, pinned.
CREATE FUNCTION claim.enqueue(queue text,
                              payload jsonb DEFAULT '{}',
                              group_key text DEFAULT NULL,
                              run_at timestamptz DEFAULT NULL,
                              priority integer DEFAULT 0,
                              dedup_key text DEFAULT NULL)
RETURNS bigint
LANGUAGE c VOLATILE PARALLEL UNSAFE
AS 'MODULE_PATHNAME', 'pgclaim_enqueue';

CREATE FUNCTION claim.enqueue_batch(queue text,
                                    payloads jsonb[],
                                    group_keys text[] DEFAULT NULL,
                                    run_at timestamptz DEFAULT NULL,
                                    priority integer DEFAULT 0)
RETURNS SETOF bigint
LANGUAGE c VOLATILE PARALLEL UNSAFE ROWS 1000
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'pgclaim_enqueue_batch';

-- ---------------------------------------------------------------------------
-- Workers
-- ---------------------------------------------------------------------------

-- claim_next and complete run once per job: they are declared without SET
-- search_path (a GUC set per call costs a few percent of a job). Their
-- common path runs no SQL and looks nothing up by name; every statement
-- they run on rarer paths is prepared and executed with search_path =
-- pg_catalog, pg_temp pinned (src/pg/pg.cpp, run()).
CREATE FUNCTION claim.claim_next(queue text,
                                 n integer DEFAULT 1,
                                 lease interval DEFAULT NULL,
                                 wait interval DEFAULT '0',
                                 worker text DEFAULT NULL)
RETURNS SETOF claim.item
LANGUAGE c VOLATILE PARALLEL UNSAFE ROWS 1
AS 'MODULE_PATHNAME', 'pgclaim_claim_next';

CREATE FUNCTION claim.complete(token bigint)
RETURNS integer
LANGUAGE c VOLATILE PARALLEL UNSAFE
AS 'MODULE_PATHNAME', 'pgclaim_complete';

CREATE FUNCTION claim.complete(tokens bigint[], skip_stale boolean DEFAULT false)
RETURNS integer
LANGUAGE c VOLATILE PARALLEL UNSAFE
AS 'MODULE_PATHNAME', 'pgclaim_complete_many';

CREATE FUNCTION claim.fail(token bigint,
                           error text DEFAULT NULL,
                           retry_in interval DEFAULT NULL)
RETURNS integer
LANGUAGE c VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'pgclaim_fail';

CREATE FUNCTION claim.extend(token bigint, lease interval DEFAULT NULL)
RETURNS timestamptz
LANGUAGE c VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'pgclaim_extend';

CREATE FUNCTION claim.release(token bigint)
RETURNS integer
LANGUAGE c VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'pgclaim_release';

CREATE FUNCTION claim.assert_token(token bigint)
RETURNS void
LANGUAGE c VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'pgclaim_assert_token';

-- Internal: waits for and takes pg_claim's transaction-level lock on an item
-- (see "How claiming works" in the README). complete() calls it inside its
-- DELETE so that finding, locking and finishing a claim is one statement.
-- Taking it only delays other sessions' work on that item until the
-- caller's transaction ends.
-- COST: evaluated after every other condition of a WHERE clause, so it locks
-- only rows that already matched.
CREATE FUNCTION claim._lock_item(item_id bigint)
RETURNS boolean
LANGUAGE c VOLATILE STRICT PARALLEL UNSAFE COST 100000
AS 'MODULE_PATHNAME', 'pgclaim_lock_item';

CREATE FUNCTION claim.redrive(queue text, ids bigint[] DEFAULT NULL)
RETURNS integer
LANGUAGE c VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'pgclaim_redrive';

-- ---------------------------------------------------------------------------
-- Observability
-- ---------------------------------------------------------------------------

CREATE VIEW claim.queue_stats AS
SELECT q.name AS queue,
       count(*) FILTER (WHERE i.state = 'r' AND i.run_at IS NULL
                          AND (c.item_id IS NULL OR c.lease_until <= pg_catalog.clock_timestamp())) AS ready,
       count(*) FILTER (WHERE i.state = 'r' AND i.run_at IS NOT NULL) AS scheduled,
       count(*) FILTER (WHERE i.state = 'r' AND i.run_at IS NULL
                          AND c.lease_until > pg_catalog.clock_timestamp()) AS claimed,
       count(*) FILTER (WHERE i.state = 'd') AS dead,
       pg_catalog.clock_timestamp() - min(i.enqueued_at) FILTER (
           WHERE i.state = 'r' AND i.run_at IS NULL
             AND (c.item_id IS NULL OR c.lease_until <= pg_catalog.clock_timestamp())) AS oldest_ready_age
FROM claim.queues q
LEFT JOIN claim.items i ON i.queue_id = q.queue_id
LEFT JOIN claim.claims c ON c.item_id = i.id
GROUP BY q.queue_id, q.name;

CREATE VIEW claim.dead_items AS
SELECT q.name AS queue, i.id, i.group_key, i.payload, i.failures AS attempts,
       i.last_error, i.enqueued_at, i.died_at
FROM claim.items i
JOIN claim.queues q ON q.queue_id = i.queue_id
WHERE i.state = 'd';

CREATE VIEW claim.claimed_items AS
SELECT q.name AS queue, c.item_id AS id, c.token, c.attempt, c.worker,
       c.claimed_at, c.lease_until,
       c.lease_until > pg_catalog.clock_timestamp() AS live
FROM claim.claims c
JOIN claim.queues q ON q.queue_id = c.queue_id;
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

-- pg_claim 0.1.0: named leases, counting semaphores and once-only guards.
-- Part of the install script (see 00_core.sql). README: docs/leases.md.

-- ---------------------------------------------------------------------------
-- Leases
-- ---------------------------------------------------------------------------

-- One row per slot of a named lease that has been granted (slot 0 .. permits-1).
-- A slot is held while expires_at is in the future (server clock) and its
-- token has not been released. The next grant of a free slot updates the row
-- in place: grants change no indexed column, so they are HOT updates (hence
-- the fillfactor). claim.lease_purge() deletes rows that nobody reused.
-- Logged: grants survive a crash and a restart, and tokens keep growing
-- across both (they come from claim.token_seq, flushed before a token leaves
-- the server).
CREATE TABLE claim.lease_holders (
    name         text NOT NULL,
    slot         integer NOT NULL,
    token        bigint NOT NULL,
    holder       text,
    permits      integer NOT NULL,
    acquired_at  timestamptz NOT NULL,
    expires_at   timestamptz NOT NULL,
    -- slot is in 0 .. permits-1 (the C code keeps it so; no CHECK constraint,
    -- whose expression every grant would have to load again)
    PRIMARY KEY (name, slot)
) WITH (fillfactor = 70);

CREATE FUNCTION claim.lease_acquire(name text,
                                    ttl interval,
                                    holder text DEFAULT NULL,
                                    permits integer DEFAULT 1,
                                    wait interval DEFAULT '0')
RETURNS bigint
LANGUAGE c VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'pgclaim_lease_acquire';

CREATE FUNCTION claim.lease_renew(name text, token bigint, ttl interval)
RETURNS timestamptz
LANGUAGE c VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'pgclaim_lease_renew';

CREATE FUNCTION claim.lease_release(name text, token bigint)
RETURNS boolean
LANGUAGE c VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'pgclaim_lease_release';

CREATE FUNCTION claim.lease_assert(name text, token bigint)
RETURNS void
LANGUAGE c VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'pgclaim_lease_assert';

-- Releases: the last released token of each slot. UNLOGGED, so a release
-- writes no WAL and its commit does not wait for a disk flush. After a crash
-- this table is empty: a lease released shortly before the crash counts as
-- held again until its ttl ends (the same as a holder that crashed). A
-- standby cannot read it.
CREATE UNLOGGED TABLE claim.lease_released (
    name   text NOT NULL,
    slot   integer NOT NULL,
    token  bigint NOT NULL,
    PRIMARY KEY (name, slot)
) WITH (fillfactor = 70);

-- Deletes the rows of leases released or expired more than `older_than` ago
-- (never a live holder); returns how many. For a maintenance job when lease
-- names are many and short-lived (for example one per customer).
CREATE FUNCTION claim.lease_purge(older_than interval DEFAULT '1 hour')
RETURNS bigint
LANGUAGE sql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
    WITH cutoff AS (
        SELECT LEAST(pg_catalog.clock_timestamp(),
                     pg_catalog.clock_timestamp() - older_than) AS t
    ), d AS (
        DELETE FROM claim.lease_holders h USING cutoff
        WHERE h.expires_at < cutoff.t
           OR (h.acquired_at < cutoff.t AND EXISTS (
                SELECT 1 FROM claim.lease_released r
                WHERE r.name = h.name AND r.slot = h.slot AND r.token = h.token))
        RETURNING h.name, h.slot
    ), r AS (
        DELETE FROM claim.lease_released r USING d
        WHERE r.name = d.name AND r.slot = d.slot
    )
    SELECT pg_catalog.count(*) FROM d
$$;

-- Live holders only.
CREATE VIEW claim.leases AS
SELECT h.name, h.token, h.holder, h.acquired_at, h.expires_at, h.permits
FROM claim.lease_holders h
WHERE h.expires_at > pg_catalog.clock_timestamp()
  AND NOT EXISTS (SELECT 1 FROM claim.lease_released r
                  WHERE r.name = h.name AND r.slot = h.slot AND r.token = h.token);

-- ---------------------------------------------------------------------------
-- Guards
-- ---------------------------------------------------------------------------

-- claim.once: one row per key taken. expires_at NULL means taken for good.
CREATE TABLE claim.once_keys (
    key         text PRIMARY KEY,
    taken_at    timestamptz NOT NULL,
    expires_at  timestamptz
);

-- The guard ledger: one row per key.
--   state 'r': an attempt is running under `token` until lease_until; once
--              that passes the key is free for a new attempt (the old token
--              may still finish or abandon until a new attempt begins);
--   state 'f': finished for good with `result`;
--   state 'a': abandoned; the key is free for a new attempt.
CREATE TABLE claim.guards (
    key          text PRIMARY KEY,
    token        bigint NOT NULL,
    state        "char" NOT NULL,
    attempts     integer NOT NULL,
    started_at   timestamptz NOT NULL,
    lease_until  timestamptz NOT NULL,
    finished_at  timestamptz,
    result       jsonb,
    CONSTRAINT guards_state_check CHECK (state IN ('r', 'f', 'a'))
);

CREATE FUNCTION claim.once(key text, ttl interval DEFAULT NULL)
RETURNS boolean
LANGUAGE c VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'pgclaim_once';

CREATE FUNCTION claim.guard_begin(key text, lease interval)
RETURNS bigint
LANGUAGE c VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'pgclaim_guard_begin';

CREATE FUNCTION claim.guard_finish(key text, token bigint, result jsonb DEFAULT NULL)
RETURNS void
LANGUAGE c VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'pgclaim_guard_finish';

CREATE FUNCTION claim.guard_abandon(key text, token bigint)
RETURNS void
LANGUAGE c VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'pgclaim_guard_abandon';

-- The recorded result of a finished key: SQL NULL while the key is not
-- finished, JSON null when it finished without a result. VOLATILE: it reads
-- the latest committed state, not the statement's snapshot.
CREATE FUNCTION claim.guard_result(key text)
RETURNS jsonb
LANGUAGE c VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'pgclaim_guard_result';

-- Privileges (99_privileges.sql revokes table access from PUBLIC): the
-- maintenance function is for the extension owner and whom it grants it to.
REVOKE EXECUTE ON FUNCTION claim.lease_purge(interval) FROM PUBLIC;
-- The background worker's view of the databases it serves (docs/worker.md).
CREATE FUNCTION claim.worker_status(OUT datid oid, OUT pid integer, OUT state text,
                                    OUT rounds bigint, OUT promoted bigint,
                                    OUT expired bigint, OUT killed bigint,
                                    OUT notifies bigint, OUT purged bigint)
RETURNS SETOF record
LANGUAGE c VOLATILE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'pgclaim_worker_status';

REVOKE EXECUTE ON FUNCTION claim.worker_status() FROM PUBLIC;
-- Privileges. Nothing in schema claim is usable by PUBLIC except what is
-- granted here; administrative functions are for the extension owner and
-- whoever it grants them to.
REVOKE ALL ON ALL TABLES IN SCHEMA claim FROM PUBLIC;
REVOKE ALL ON ALL SEQUENCES IN SCHEMA claim FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION claim.create_queue(text, interval, integer, interval) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION claim.drop_queue(text) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION claim.redrive(text, bigint[]) FROM PUBLIC;
