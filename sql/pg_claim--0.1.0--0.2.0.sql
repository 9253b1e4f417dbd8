-- pg_claim 0.1.0 -> 0.2.0.
--
-- A fresh CREATE EXTENSION pg_claim runs pg_claim--0.1.0.sql and then this
-- script, so an installed 0.2.0 is the same whichever way it was reached.
-- Security, as in the install script: every object is schema-qualified,
-- functions pin search_path (the hot-path functions pin it around the SQL
-- they run instead), nothing uses CREATE OR REPLACE on an object a user
-- could have created, and admin functions are revoked from PUBLIC.

\echo Use "ALTER EXTENSION pg_claim UPDATE TO '0.2.0'" to load this file. \quit

-- Refuse to update into a schema "claim" that another role owns or may
-- create objects in: what this script creates there could be shadowed or
-- replaced by them.
DO $pg_claim_update_guard$
BEGIN
    IF EXISTS (SELECT FROM pg_catalog.pg_namespace n
               WHERE n.nspname OPERATOR(pg_catalog.=) 'claim'
                 AND (pg_catalog.pg_get_userbyid(n.nspowner) OPERATOR(pg_catalog.<>) CURRENT_USER
                      OR EXISTS (SELECT FROM pg_catalog.aclexplode(n.nspacl) a
                                 WHERE a.privilege_type OPERATOR(pg_catalog.=) 'CREATE'
                                   AND a.grantee OPERATOR(pg_catalog.<>) n.nspowner))) THEN
        RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege',
            MESSAGE = 'schema "claim" is owned by another role, or other roles may create objects in it',
            HINT = 'Make the updating role the owner of schema claim and revoke CREATE on it from others, then update again.';
    END IF;
END
$pg_claim_update_guard$;

-- ---------------------------------------------------------------------------
-- Removed: claim._lock_item. It had no caller, and being executable by
-- PUBLIC it let any role with USAGE on the schema take item locks that
-- complete() then waited on. The library keeps the symbol, which raises
-- feature_not_supported, for a 0.1.0 catalog not yet updated.
-- ---------------------------------------------------------------------------
DROP FUNCTION claim._lock_item(bigint);

-- ===========================================================================
-- Job lifecycle: results and retention, item_state, cancel, pause,
-- dependencies, the one-statement worker loop.
-- ===========================================================================

-- Per-queue settings: how long finished items are kept (0: not kept), and
-- whether claiming is paused.
ALTER TABLE claim.queues
    ADD COLUMN retain interval NOT NULL DEFAULT '0',
    ADD COLUMN paused boolean NOT NULL DEFAULT false;

-- Flow control, enforced at the claim (docs/limits.md): live claims of the
-- queue at most (NULL: no limit), live claims per group key at most, and
-- claims per rate_per at most, for the queue or for each group key.
ALTER TABLE claim.queues
    ADD COLUMN max_active integer,
    ADD COLUMN group_limit integer NOT NULL DEFAULT 1,
    ADD COLUMN rate integer,
    ADD COLUMN rate_per interval NOT NULL DEFAULT '1 second',
    ADD COLUMN rate_per_group boolean NOT NULL DEFAULT false;

-- A third item state: 'w', waiting for the items listed in its `after`.
ALTER TABLE claim.items DROP CONSTRAINT items_state_check;
ALTER TABLE claim.items ADD CONSTRAINT items_state_check CHECK (state IN ('r', 'd', 'w'));

-- Dependencies of waiting items: one row per (child, unfinished parent).
-- A row is removed when its parent completes; the child becomes ready (or
-- scheduled) when its last row goes. A parent that ends dead or cancelled
-- ends its waiting children the same way.
CREATE TABLE claim.item_parents (
    parent_id  bigint NOT NULL,
    child_id   bigint NOT NULL,
    PRIMARY KEY (parent_id, child_id)
);
CREATE INDEX item_parents_child ON claim.item_parents (child_id);

-- Finished items of queues with retain > 0: completed and cancelled items
-- (dead items stay in claim.items, where redrive finds them). The history is
-- a ring of four partitions: finished items go to the current slot, and the
-- background worker moves the ring on by truncating the oldest partition once
-- everything in it is past every queue's retention. Removing history
-- therefore leaves no dead tuples for vacuum; the price is that a row can
-- outlive its retention by up to one slot period (the longest retain / 2)
-- before its partition is truncated. Reads filter on the retention, so an
-- expired row is never shown.
CREATE TABLE claim.finished (
    slot         smallint NOT NULL,
    queue_id     integer NOT NULL,
    id           bigint NOT NULL,
    group_key    text COLLATE "C",
    payload      jsonb NOT NULL,
    state        "char" NOT NULL,
    result       jsonb,
    error        text,
    attempts     integer NOT NULL,
    enqueued_at  timestamptz NOT NULL,
    finished_at  timestamptz NOT NULL,
    CONSTRAINT finished_state_check CHECK (state IN ('c', 'x'))
) PARTITION BY LIST (slot);
CREATE TABLE claim.finished_0 PARTITION OF claim.finished FOR VALUES IN (0);
CREATE TABLE claim.finished_1 PARTITION OF claim.finished FOR VALUES IN (1);
CREATE TABLE claim.finished_2 PARTITION OF claim.finished FOR VALUES IN (2);
CREATE TABLE claim.finished_3 PARTITION OF claim.finished FOR VALUES IN (3);
CREATE INDEX finished_id ON claim.finished (id);

-- The ring: which slot takes new rows, and since when each slot was written.
CREATE TABLE claim.finished_ring (
    slot       smallint PRIMARY KEY CHECK (slot BETWEEN 0 AND 3),
    current    boolean NOT NULL,
    opened_at  timestamptz,
    closed_at  timestamptz
);
INSERT INTO claim.finished_ring (slot, current, opened_at)
VALUES (0, true, pg_catalog.clock_timestamp()), (1, false, NULL), (2, false, NULL), (3, false, NULL);
CREATE UNIQUE INDEX finished_ring_current ON claim.finished_ring (current) WHERE current;

CREATE VIEW claim.finished_items AS
SELECT q.name AS queue, f.id, f.group_key, f.payload,
       CASE f.state WHEN 'c' THEN 'completed' ELSE 'cancelled' END AS state,
       f.result, f.error, f.attempts, f.enqueued_at, f.finished_at
FROM claim.finished f
JOIN claim.queues q ON q.queue_id = f.queue_id
WHERE f.finished_at OPERATOR(pg_catalog.+) q.retain > pg_catalog.clock_timestamp()
UNION ALL
SELECT q.name, i.id, i.group_key, i.payload, 'dead', NULL, i.last_error, i.failures,
       i.enqueued_at, i.died_at
FROM claim.items i
JOIN claim.queues q ON q.queue_id = i.queue_id
WHERE i.state = 'd';

-- What claim.item_state returns.
CREATE TYPE claim.item_status AS (
    state        text,
    attempt      integer,
    result       jsonb,
    error        text,
    finished_at  timestamptz
);

-- complete takes the item's result; the array form takes one per token.
-- The same C functions serve the 0.1.0 signatures, which this drops.
DROP FUNCTION claim.complete(bigint);
CREATE FUNCTION claim.complete(token bigint, result jsonb DEFAULT NULL)
RETURNS integer
LANGUAGE c VOLATILE PARALLEL UNSAFE
AS 'MODULE_PATHNAME', 'pgclaim_complete';

DROP FUNCTION claim.complete(bigint[], boolean);
CREATE FUNCTION claim.complete(tokens bigint[], skip_stale boolean DEFAULT false,
                               results jsonb[] DEFAULT NULL)
RETURNS integer
LANGUAGE c VOLATILE PARALLEL UNSAFE
AS 'MODULE_PATHNAME', 'pgclaim_complete_many';

-- claim_next completes the tokens in `done` first (all or nothing): one
-- statement per job for a worker loop.
DROP FUNCTION claim.claim_next(text, integer, interval, interval, text);
CREATE FUNCTION claim.claim_next(queue text,
                                 n integer DEFAULT 1,
                                 lease interval DEFAULT NULL,
                                 wait interval DEFAULT '0',
                                 worker text DEFAULT NULL,
                                 done bigint[] DEFAULT NULL)
RETURNS SETOF claim.item
LANGUAGE c VOLATILE PARALLEL UNSAFE ROWS 1
AS 'MODULE_PATHNAME', 'pgclaim_claim_next';

-- enqueue and enqueue_batch take `after`: the item waits until every listed
-- item has completed.
DROP FUNCTION claim.enqueue(text, jsonb, text, timestamptz, integer, text);
CREATE FUNCTION claim.enqueue(queue text,
                              payload jsonb DEFAULT '{}',
                              group_key text DEFAULT NULL,
                              run_at timestamptz DEFAULT NULL,
                              priority integer DEFAULT 0,
                              dedup_key text DEFAULT NULL,
                              after bigint[] DEFAULT NULL)
RETURNS bigint
LANGUAGE c VOLATILE PARALLEL UNSAFE
AS 'MODULE_PATHNAME', 'pgclaim_enqueue';

DROP FUNCTION claim.enqueue_batch(text, jsonb[], text[], timestamptz, integer);
CREATE FUNCTION claim.enqueue_batch(queue text,
                                    payloads jsonb[],
                                    group_keys text[] DEFAULT NULL,
                                    run_at timestamptz DEFAULT NULL,
                                    priority integer DEFAULT 0,
                                    after bigint[] DEFAULT NULL)
RETURNS SETOF bigint
LANGUAGE c VOLATILE PARALLEL UNSAFE ROWS 1000
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'pgclaim_enqueue_batch';

DROP FUNCTION claim.create_queue(text, interval, integer, interval);
CREATE FUNCTION claim.create_queue(queue text,
                                   lease interval DEFAULT '30 seconds',
                                   max_attempts integer DEFAULT 5,
                                   backoff interval DEFAULT '1 second',
                                   retain interval DEFAULT '0',
                                   max_active integer DEFAULT NULL,
                                   group_limit integer DEFAULT 1,
                                   rate integer DEFAULT NULL,
                                   rate_per interval DEFAULT '1 second',
                                   rate_per_group boolean DEFAULT false)
RETURNS void
LANGUAGE c VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'pgclaim_create_queue';

-- Changes a queue's settings; a NULL argument leaves that setting as it is
-- (0 removes a max_active or rate limit).
CREATE FUNCTION claim.alter_queue(queue text,
                                  lease interval DEFAULT NULL,
                                  max_attempts integer DEFAULT NULL,
                                  backoff interval DEFAULT NULL,
                                  retain interval DEFAULT NULL,
                                  max_active integer DEFAULT NULL,
                                  group_limit integer DEFAULT NULL,
                                  rate integer DEFAULT NULL,
                                  rate_per interval DEFAULT NULL,
                                  rate_per_group boolean DEFAULT NULL)
RETURNS void
LANGUAGE c VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'pgclaim_alter_queue';

CREATE FUNCTION claim.pause(queue text)
RETURNS void
LANGUAGE c VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'pgclaim_pause';

CREATE FUNCTION claim.resume(queue text)
RETURNS void
LANGUAGE c VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'pgclaim_resume';

CREATE FUNCTION claim.cancel(queue text, ids bigint[])
RETURNS integer
LANGUAGE c VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'pgclaim_cancel';

CREATE FUNCTION claim.item_state(queue text, id bigint, wait interval DEFAULT '0')
RETURNS claim.item_status
LANGUAGE c VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'pgclaim_item_state';

-- queue_stats gains the queue's paused flag and its waiting items.
DROP VIEW claim.queue_stats;
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
             AND (c.item_id IS NULL OR c.lease_until <= pg_catalog.clock_timestamp())) AS oldest_ready_age,
       count(*) FILTER (WHERE i.state = 'w') AS waiting,
       q.paused
FROM claim.queues q
LEFT JOIN claim.items i ON i.queue_id = q.queue_id
LEFT JOIN claim.claims c ON c.item_id = i.id
GROUP BY q.queue_id, q.name, q.paused;

REVOKE ALL ON claim.item_parents, claim.finished, claim.finished_0, claim.finished_1,
              claim.finished_2, claim.finished_3, claim.finished_ring FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION claim.create_queue(text, interval, integer, interval, interval,
                                               integer, integer, integer, interval, boolean) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION claim.alter_queue(text, interval, integer, interval, interval,
                                              integer, integer, integer, interval, boolean) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION claim.pause(text) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION claim.resume(text) FROM PUBLIC;

-- Tokens that know their partition (docs/partitions.md). A token is
-- partition * 2^53 + a value of claim.token_seq, the partition being
-- pg_claim.partition of the database (0 by default: the token is the
-- sequence value, as in 0.1.0). The sequence stops where its values would
-- reach the partition bits.
ALTER SEQUENCE claim.token_seq MAXVALUE 9007199254740991;

CREATE FUNCTION claim.token_partition(token bigint)
RETURNS integer
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE
AS 'MODULE_PATHNAME', 'pgclaim_token_partition';

-- ===========================================================================
-- Roles: claim_producer, claim_worker, claim_admin (NOLOGIN; docs/roles.md).
-- Roles belong to the cluster, not to a database: DROP EXTENSION leaves them
-- (with no privileges left in that database), and a second database's
-- install reuses them. A role of one of these names that already exists is
-- reused only if it could have been made by this script: it must not log
-- in, must have none of SUPERUSER, CREATEROLE, CREATEDB, REPLICATION and
-- BYPASSRLS, and must not be a member of any role (everyone granted it would
-- get that role's rights too). Anything else is refused, so the install
-- never hands the extension's tables to an account someone prepared. (A role
-- with CREATEROLE can, in PostgreSQL 15, grant itself any non-superuser role
-- later anyway, these included: such roles must be trusted like admins.)
-- The functions run with the caller's rights, so each role gets the table
-- and sequence privileges its functions use, and no more.
-- ===========================================================================
DO $roles$
DECLARE
    rname text;
    r record;
BEGIN
    FOREACH rname IN ARRAY ARRAY['claim_producer', 'claim_worker', 'claim_admin'] LOOP
        SELECT a.oid, a.rolcanlogin, a.rolsuper, a.rolcreaterole, a.rolcreatedb,
               a.rolreplication, a.rolbypassrls
          INTO r
          FROM pg_catalog.pg_roles a
         WHERE a.rolname OPERATOR(pg_catalog.=) rname;
        IF NOT FOUND THEN
            EXECUTE pg_catalog.format('CREATE ROLE %I NOLOGIN', rname);
        ELSIF r.rolcanlogin OR r.rolsuper OR r.rolcreaterole OR r.rolcreatedb
              OR r.rolreplication OR r.rolbypassrls THEN
            RAISE EXCEPTION 'pg_claim: role "%" already exists and can log in or has role attributes', rname
                USING ERRCODE = 'duplicate_object',
                      HINT = pg_catalog.format('pg_claim grants its tables to %I: it must be NOLOGIN with no '
                                               'attributes. Fix it (ALTER ROLE %I NOLOGIN NOSUPERUSER NOCREATEROLE '
                                               'NOCREATEDB NOREPLICATION NOBYPASSRLS) or drop it, then retry.',
                                               rname, rname);
        ELSIF EXISTS (SELECT FROM pg_catalog.pg_auth_members m
                       WHERE m.member OPERATOR(pg_catalog.=) r.oid) THEN
            RAISE EXCEPTION 'pg_claim: role "%" already exists and is a member of other roles', rname
                USING ERRCODE = 'duplicate_object',
                      HINT = pg_catalog.format('Everyone granted %I would get those roles too. Revoke its '
                                               'memberships or drop it, then retry.', rname);
        END IF;
    END LOOP;
END
$roles$;

GRANT USAGE ON SCHEMA claim TO claim_producer, claim_worker, claim_admin;

-- Producers: add items (also through enqueue_trigger on their own tables)
-- and follow them. No cancel: items do not record who enqueued them.
GRANT SELECT ON claim.queues TO claim_producer;
GRANT SELECT, INSERT ON claim.items TO claim_producer;
GRANT SELECT, INSERT ON claim.item_parents TO claim_producer;
GRANT SELECT ON claim.claims, claim.finished, claim.finished_ring TO claim_producer;
GRANT USAGE ON SEQUENCE claim.item_id_seq TO claim_producer;
GRANT SELECT ON claim.queue_stats TO claim_producer;
GRANT EXECUTE ON FUNCTION
    claim.enqueue(text, jsonb, text, timestamptz, integer, text, bigint[]),
    claim.enqueue_batch(text, jsonb[], text[], timestamptz, integer, bigint[]),
    claim.item_state(text, bigint, interval),
    claim.enqueue_trigger()
  TO claim_producer;

-- Workers: claim and finish items, groups, leases, once-only guards, cancel.
GRANT SELECT ON claim.queues TO claim_worker;
GRANT SELECT, UPDATE, DELETE ON claim.items TO claim_worker;
GRANT SELECT, INSERT, UPDATE, DELETE ON claim.claims TO claim_worker;
GRANT SELECT, DELETE ON claim.item_parents TO claim_worker;
GRANT SELECT, INSERT ON claim.finished TO claim_worker;
GRANT SELECT ON claim.finished_ring TO claim_worker;
GRANT SELECT, INSERT, UPDATE, DELETE ON claim.lease_holders, claim.lease_released,
                                        claim.once_keys, claim.guards TO claim_worker;
GRANT USAGE, UPDATE ON SEQUENCE claim.token_seq TO claim_worker;
GRANT SELECT ON claim.queue_stats, claim.claimed_items, claim.dead_items, claim.finished_items,
                claim.blocked_groups, claim.leases TO claim_worker;
GRANT EXECUTE ON FUNCTION
    claim.claim_next(text, integer, interval, interval, text, bigint[]),
    claim.complete(bigint, jsonb),
    claim.complete(bigint[], boolean, jsonb[]),
    claim.fail(bigint, text, interval),
    claim.extend(bigint, interval),
    claim.release(bigint),
    claim.assert_token(bigint),
    claim.group_claim(text, integer, interval, interval, text, text),
    claim.cancel(text, bigint[]),
    claim.item_state(text, bigint, interval),
    claim.lease_acquire(text, interval, text, integer, interval),
    claim.lease_renew(text, bigint, interval),
    claim.lease_release(text, bigint),
    claim.lease_assert(text, bigint),
    claim.once(text, interval),
    claim.guard_begin(text, interval),
    claim.guard_finish(text, bigint, jsonb),
    claim.guard_abandon(text, bigint),
    claim.guard_result(text)
  TO claim_worker;

-- Admins: everything in the schema that exists at this point of the script
-- (objects created further down grant their own rights to claim_admin).
GRANT SELECT, INSERT, UPDATE, DELETE, TRUNCATE ON ALL TABLES IN SCHEMA claim TO claim_admin;
GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA claim TO claim_admin;
GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA claim TO claim_admin;

-- ===========================================================================
-- Recurring schedules (docs/schedules.md): claim.schedule, claim.unschedule,
-- claim.cron_next, view claim.schedules. The database's worker enqueues one
-- item per due schedule and moves next_run on, in one transaction.
-- ===========================================================================

CREATE TABLE claim.schedule_defs (
    schedule_id  bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name         text COLLATE "C" NOT NULL UNIQUE,
    cron         text NOT NULL,
    -- The zone's name as PostgreSQL spells it (pg_tzset).
    timezone     text NOT NULL,
    -- Dropping the queue drops its schedules.
    queue_id     integer NOT NULL REFERENCES claim.queues (queue_id) ON DELETE CASCADE,
    payload      jsonb NOT NULL DEFAULT '{}',
    group_key    text COLLATE "C",
    priority     integer NOT NULL DEFAULT 0,
    -- The next tick to fire ('infinity' when the zone is no longer known).
    next_run     timestamptz NOT NULL,
    last_run     timestamptz,
    last_item    bigint,
    created_at   timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp()
);
-- The worker's look for due schedules.
CREATE INDEX schedule_defs_next_run ON claim.schedule_defs (next_run);

CREATE VIEW claim.schedules AS
SELECT s.name, s.cron, s.timezone, q.name AS queue, s.next_run, s.last_run, s.last_item,
       s.payload, s.group_key, s.priority
FROM claim.schedule_defs s
JOIN claim.queues q ON q.queue_id = s.queue_id;

CREATE FUNCTION claim.schedule(name text,
                               cron text,
                               queue text,
                               payload jsonb DEFAULT '{}',
                               group_key text DEFAULT NULL,
                               priority integer DEFAULT 0,
                               timezone text DEFAULT 'UTC')
RETURNS void
LANGUAGE c VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'pgclaim_schedule';

CREATE FUNCTION claim.unschedule(name text)
RETURNS boolean
LANGUAGE c VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'pgclaim_unschedule';

-- The first tick of a cron expression in a zone strictly after `after`.
CREATE FUNCTION claim.cron_next(cron text,
                                after timestamptz DEFAULT pg_catalog.clock_timestamp(),
                                timezone text DEFAULT 'UTC')
RETURNS timestamptz
LANGUAGE c STABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'pgclaim_cron_next';

REVOKE ALL ON claim.schedule_defs, claim.schedules FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION claim.schedule(text, text, text, jsonb, text, integer, text) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION claim.unschedule(text) FROM PUBLIC;
GRANT SELECT, INSERT, UPDATE, DELETE, TRUNCATE ON claim.schedule_defs TO claim_admin;
GRANT SELECT ON claim.schedules TO claim_admin;
GRANT EXECUTE ON FUNCTION claim.schedule(text, text, text, jsonb, text, integer, text),
                          claim.unschedule(text) TO claim_admin;

-- ===========================================================================
-- Metrics: per-queue counters since server start, kept in shared memory
-- (no table write), with the gauges of claim.queue_stats and the number of
-- backends waiting for items (docs/metrics.md).
-- ===========================================================================
-- The counters of one queue of this database: NULL when the queue has no
-- slot in the shared table (no preload, or the table was full).
CREATE FUNCTION claim.queue_counters(queue_id integer,
                                     OUT enqueued bigint, OUT claimed bigint,
                                     OUT completed bigint, OUT failed bigint,
                                     OUT dead bigint, OUT expired bigint,
                                     OUT cancelled bigint, OUT waiters integer)
RETURNS record
LANGUAGE c VOLATILE STRICT PARALLEL RESTRICTED
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'pgclaim_queue_counters';

CREATE FUNCTION claim.metrics(OUT queue text,
                              OUT enqueued bigint, OUT claimed bigint, OUT completed bigint,
                              OUT failed bigint, OUT dead bigint, OUT expired bigint,
                              OUT cancelled bigint,
                              OUT ready bigint, OUT scheduled bigint, OUT in_flight bigint,
                              OUT dead_items bigint, OUT waiting bigint,
                              OUT oldest_ready_age interval, OUT paused boolean,
                              OUT waiters integer)
RETURNS SETOF record
LANGUAGE sql VOLATILE PARALLEL RESTRICTED
SET search_path = pg_catalog, pg_temp
AS $$
SELECT s.queue, c.enqueued, c.claimed, c.completed, c.failed, c.dead, c.expired, c.cancelled,
       s.ready, s.scheduled, s.claimed, s.dead, s.waiting, s.oldest_ready_age, s.paused,
       c.waiters
FROM claim.queue_stats s
JOIN claim.queues q ON q.name OPERATOR(pg_catalog.=) s.queue
CROSS JOIN LATERAL claim.queue_counters(q.queue_id) c
ORDER BY s.queue
$$;

-- Monitoring roles (pg_monitor, which postgres_exporter uses) and admins.
REVOKE EXECUTE ON FUNCTION claim.queue_counters(integer), claim.metrics() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION claim.queue_counters(integer), claim.metrics() TO claim_admin, pg_monitor;
GRANT USAGE ON SCHEMA claim TO pg_monitor;
GRANT SELECT ON claim.queues, claim.queue_stats TO pg_monitor;

-- ===========================================================================
-- Hot standbys (docs/standby.md). Claims live in the unlogged claim.claims,
-- which a standby does not have: PostgreSQL refuses even to plan a query that
-- names it during recovery. The views read claims through the two functions
-- below, which look at them only on a primary. On a standby, queue_stats
-- shows the counts that need claims as NULL (unknown), and claimed_items and
-- blocked_groups raise 55000 (object_not_in_prerequisite_state) naming the
-- primary. Both functions raise that error, on a standby, when given the
-- name of the view that asks.
-- ===========================================================================
-- When each claim was taken and until when it holds: what queue_stats and
-- blocked_groups need, and no token or worker. SECURITY DEFINER, so that a
-- role that may read those views needs no right on claim.claims.
CREATE FUNCTION claim._claim_times(view text DEFAULT NULL)
RETURNS TABLE (item_id bigint, claimed_at timestamptz, lease_until timestamptz)
LANGUAGE plpgsql STABLE PARALLEL RESTRICTED SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF pg_catalog.pg_is_in_recovery() THEN
        IF view IS NULL THEN
            RETURN;
        END IF;
        RAISE EXCEPTION USING ERRCODE = 'object_not_in_prerequisite_state',
            MESSAGE = pg_catalog.format('claims are not replicated: %s cannot be shown on a hot standby', view),
            HINT = 'Read it on the primary. On a standby, claim.queue_stats shows ready, claimed and oldest_ready_age as NULL.';
    END IF;
    RETURN QUERY SELECT c.item_id, c.claimed_at, c.lease_until FROM claim.claims c;
END
$$;

-- Every column of the claims, with the caller's rights on claim.claims.
CREATE FUNCTION claim._claim_rows(view text DEFAULT NULL)
RETURNS SETOF claim.claims
LANGUAGE plpgsql STABLE PARALLEL RESTRICTED
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF pg_catalog.pg_is_in_recovery() THEN
        IF view IS NULL THEN
            RETURN;
        END IF;
        RAISE EXCEPTION USING ERRCODE = 'object_not_in_prerequisite_state',
            MESSAGE = pg_catalog.format('claims are not replicated: %s cannot be shown on a hot standby', view),
            HINT = 'Read it on the primary. On a standby, claim.queue_stats shows ready, claimed and oldest_ready_age as NULL.';
    END IF;
    RETURN QUERY SELECT c.* FROM claim.claims c;
END
$$;
GRANT EXECUTE ON FUNCTION claim._claim_times(text), claim._claim_rows(text) TO claim_admin;

-- The same columns as before, and the same grants.
DROP VIEW claim.queue_stats;
CREATE VIEW claim.queue_stats AS
SELECT q.name AS queue,
       CASE WHEN NOT pg_catalog.pg_is_in_recovery() THEN
       count(*) FILTER (WHERE i.state = 'r' AND i.run_at IS NULL
                          AND (c.item_id IS NULL OR c.lease_until <= pg_catalog.clock_timestamp())) END AS ready,
       count(*) FILTER (WHERE i.state = 'r' AND i.run_at IS NOT NULL) AS scheduled,
       CASE WHEN NOT pg_catalog.pg_is_in_recovery() THEN
       count(*) FILTER (WHERE i.state = 'r' AND i.run_at IS NULL
                          AND c.lease_until > pg_catalog.clock_timestamp()) END AS claimed,
       count(*) FILTER (WHERE i.state = 'd') AS dead,
       CASE WHEN NOT pg_catalog.pg_is_in_recovery() THEN
       pg_catalog.clock_timestamp() - min(i.enqueued_at) FILTER (
           WHERE i.state = 'r' AND i.run_at IS NULL
             AND (c.item_id IS NULL OR c.lease_until <= pg_catalog.clock_timestamp())) END AS oldest_ready_age,
       count(*) FILTER (WHERE i.state = 'w') AS waiting,
       q.paused
FROM claim.queues q
LEFT JOIN claim.items i ON i.queue_id = q.queue_id
LEFT JOIN claim._claim_times() c ON c.item_id = i.id
GROUP BY q.queue_id, q.name, q.paused;
COMMENT ON VIEW claim.queue_stats IS
    'Items per queue. On a hot standby ready, claimed and oldest_ready_age are NULL: claims are not replicated (read them on the primary).';
GRANT SELECT ON claim.queue_stats TO claim_producer, claim_worker, pg_monitor;
GRANT SELECT, INSERT, UPDATE, DELETE, TRUNCATE ON claim.queue_stats TO claim_admin;

DROP VIEW claim.claimed_items;
CREATE VIEW claim.claimed_items AS
SELECT q.name AS queue, c.item_id AS id, c.token, c.attempt, c.worker,
       c.claimed_at, c.lease_until,
       c.lease_until > pg_catalog.clock_timestamp() AS live
FROM claim._claim_rows('claim.claimed_items') c
JOIN claim.queues q ON q.queue_id = c.queue_id;
COMMENT ON VIEW claim.claimed_items IS
    'Live and expired claims. Not on a hot standby (55000): claims are not replicated (read them on the primary).';
GRANT SELECT ON claim.claimed_items TO claim_worker;
GRANT SELECT, INSERT, UPDATE, DELETE, TRUNCATE ON claim.claimed_items TO claim_admin;

DROP VIEW claim.blocked_groups;
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
LEFT JOIN claim._claim_times('claim.blocked_groups') c ON c.item_id = h.id
WHERE (h.run_at IS NOT NULL AND h.run_at > pg_catalog.clock_timestamp())
   OR (h.run_at IS NULL AND c.lease_until > pg_catalog.clock_timestamp()
       AND c.claimed_at <= pg_catalog.clock_timestamp() - q.lease);
COMMENT ON VIEW claim.blocked_groups IS
    'Groups held back by their head item. Not on a hot standby (55000): whether a head is claimed is not replicated (read it on the primary).';
GRANT SELECT ON claim.blocked_groups TO claim_worker;
GRANT SELECT, INSERT, UPDATE, DELETE, TRUNCATE ON claim.blocked_groups TO claim_admin;

-- lease_purge reads claim.lease_released (unlogged): on a standby it refuses
-- as every function that writes does (25006), before any query names it.
DROP FUNCTION claim.lease_purge(interval);
CREATE FUNCTION claim.lease_purge(older_than interval DEFAULT '1 hour')
RETURNS bigint
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    purged bigint;
BEGIN
    IF pg_catalog.pg_is_in_recovery() THEN
        RAISE EXCEPTION USING ERRCODE = 'read_only_sql_transaction',
            MESSAGE = 'cannot call claim.lease_purge on a hot standby',
            HINT = 'Connect to the primary: claims, tokens and leases are written there.';
    END IF;
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
    SELECT pg_catalog.count(*) INTO purged FROM d;
    RETURN purged;
END
$$;
REVOKE EXECUTE ON FUNCTION claim.lease_purge(interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION claim.lease_purge(interval) TO claim_admin;

-- Hot standbys, continued: claim.leases hides released holders, and which
-- were released is in claim.lease_released (unlogged). The view reads it
-- through claim._lease_releases, which raises 55000 on a standby when given
-- the name of the view that asks (no rows when given NULL). SECURITY
-- DEFINER, so that a role that may read claim.leases needs no right on
-- claim.lease_released; it shows released tokens only, which are stale.
CREATE FUNCTION claim._lease_releases(view text DEFAULT NULL)
RETURNS TABLE (name text, slot integer, token bigint)
LANGUAGE plpgsql STABLE PARALLEL RESTRICTED SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF pg_catalog.pg_is_in_recovery() THEN
        IF view IS NULL THEN
            RETURN;
        END IF;
        RAISE EXCEPTION USING ERRCODE = 'object_not_in_prerequisite_state',
            MESSAGE = pg_catalog.format('lease releases are not replicated: %s cannot be shown on a hot standby', view),
            HINT = 'Read it on the primary; claim.lease_holders can be read here, released holders included.';
    END IF;
    RETURN QUERY SELECT r.name, r.slot, r.token FROM claim.lease_released r;
END
$$;
GRANT EXECUTE ON FUNCTION claim._lease_releases(text) TO claim_admin;

DROP VIEW claim.leases;
CREATE VIEW claim.leases AS
SELECT h.name, h.token, h.holder, h.acquired_at, h.expires_at, h.permits
FROM claim.lease_holders h
WHERE h.expires_at > pg_catalog.clock_timestamp()
  AND NOT EXISTS (SELECT 1 FROM claim._lease_releases('claim.leases') r
                  WHERE r.name = h.name AND r.slot = h.slot AND r.token = h.token);
COMMENT ON VIEW claim.leases IS
    'Live lease holders. Not on a hot standby (55000): releases are not replicated (read it on the primary).';
GRANT SELECT ON claim.leases TO claim_worker;
GRANT SELECT, INSERT, UPDATE, DELETE, TRUNCATE ON claim.leases TO claim_admin;
