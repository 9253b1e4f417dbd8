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
