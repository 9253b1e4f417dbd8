-- pg_claim_proxy 0.3.0: the front of a partitioned pg_claim (docs/partitions.md).
--
-- Every claim.* function of pg_claim 0.3.0, with the same name, arguments
-- and result type, as a PL/Proxy function over the cluster 'claim_cluster'
-- (a SQL/MED server of the plproxy wrapper: options p0..pN, one connection
-- string per partition, a power of two of them, and a user mapping).
-- Each call runs on one partition in its own transaction there:
--   * queue functions by claim.route_hash(queue),
--   * leases by claim.route_hash(name), once and guards by claim.route_hash(key),
--   * token functions by claim.token_partition(token),
--   * views, worker_status and lease_purge on all partitions, combined.
-- PL/Proxy maps a hash h to partition h & (P - 1).

\echo Use "CREATE EXTENSION pg_claim_proxy" to load this file. \quit

-- ---------------------------------------------------------------- routing

-- FNV-1a, 32 bits, over the UTF-8 bytes of the key, as a signed int4:
-- defined here so that routing never depends on a hash function of the
-- server that may change between PostgreSQL versions. NULL hashes to 0 (the
-- partition then reports the NULL argument with its own error).
CREATE FUNCTION claim.route_hash(key text)
RETURNS integer
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    b bytea;
    h bigint := 2166136261;
    i integer;
BEGIN
    IF key IS NULL THEN
        RETURN 0;
    END IF;
    b := pg_catalog.convert_to(key, 'UTF8');
    FOR i IN 0 .. pg_catalog.length(b) - 1 LOOP
        h := ((h # pg_catalog.get_byte(b, i)) * 16777619) & 4294967295;
    END LOOP;
    IF h >= 2147483648 THEN
        h := h - 4294967296;
    END IF;
    RETURN h::integer;
END
$$;

-- The partition of a token: bits 52..47 (every token is at most 2^53 - 1),
-- or bits 62..53 for a token of pg_claim 0.2.0 (above 2^53 - 1).
-- pg_claim's src/core/token.hpp defines the layout, and claim.token_partition
-- of pg_claim gives the same values. -1 for a negative value, never a token.
CREATE FUNCTION claim.token_partition(token bigint)
RETURNS integer
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
SELECT CASE WHEN token OPERATOR(pg_catalog.<) 0 THEN -1
            WHEN token OPERATOR(pg_catalog.>) 9007199254740991 THEN (token OPERATOR(pg_catalog.>>) 53)::integer
            ELSE (token OPERATOR(pg_catalog.>>) 47)::integer END
$$;

-- The partition a token call runs on: that of the token, and partition 0
-- for a NULL token (which the partition then reports as a NULL argument).
CREATE FUNCTION claim.route_token(token bigint)
RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
SELECT COALESCE(claim.token_partition(token), 0)
$$;

-- The partition a batch of tokens runs on: that of its first non-NULL
-- token (0 when there is none; the partition then reports the empty or NULL
-- batch). The whole batch is completed there in one transaction, and a
-- token of another partition is unknown there, like any unknown token:
-- stale (PC001, nothing completed), or skipped with skip_stale. A batch from
-- one claim_next or group_claim is always from one partition.
CREATE FUNCTION claim.tokens_partition(tokens bigint[])
RETURNS integer
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    t bigint;
BEGIN
    IF tokens IS NOT NULL THEN
        FOREACH t IN ARRAY tokens LOOP
            IF t IS NOT NULL THEN
                RETURN claim.route_token(t);
            END IF;
        END LOOP;
    END IF;
    RETURN 0;
END
$$;

-- ------------------------------------------------------------------ types

CREATE TYPE claim.item AS (
    queue text,
    id bigint,
    token bigint,
    group_key text,
    payload jsonb,
    attempt integer,
    enqueued_at timestamptz,
    lease_until timestamptz
);

CREATE TYPE claim.item_status AS (
    state text,
    attempt integer,
    result jsonb,
    error text,
    finished_at timestamptz
);

-- ----------------------------------------------------------------- queues

CREATE FUNCTION claim.create_queue(queue text, lease interval DEFAULT '30 s',
                                   max_attempts integer DEFAULT 5, backoff interval DEFAULT '1 s',
                                   retain interval DEFAULT '0', max_active integer DEFAULT NULL,
                                   group_limit integer DEFAULT 1, rate integer DEFAULT NULL,
                                   rate_per interval DEFAULT '1 s',
                                   rate_per_group boolean DEFAULT false)
RETURNS void LANGUAGE plproxy AS $$
    CLUSTER 'claim_cluster';
    RUN ON claim.route_hash(queue);
$$;

CREATE FUNCTION claim.alter_queue(queue text, lease interval DEFAULT NULL,
                                  max_attempts integer DEFAULT NULL,
                                  backoff interval DEFAULT NULL, retain interval DEFAULT NULL,
                                  max_active integer DEFAULT NULL, group_limit integer DEFAULT NULL,
                                  rate integer DEFAULT NULL, rate_per interval DEFAULT NULL,
                                  rate_per_group boolean DEFAULT NULL)
RETURNS void LANGUAGE plproxy AS $$
    CLUSTER 'claim_cluster';
    RUN ON claim.route_hash(queue);
$$;

CREATE FUNCTION claim.drop_queue(queue text)
RETURNS void LANGUAGE plproxy AS $$
    CLUSTER 'claim_cluster';
    RUN ON claim.route_hash(queue);
$$;

CREATE FUNCTION claim.pause(queue text)
RETURNS void LANGUAGE plproxy AS $$
    CLUSTER 'claim_cluster';
    RUN ON claim.route_hash(queue);
$$;

CREATE FUNCTION claim.resume(queue text)
RETURNS void LANGUAGE plproxy AS $$
    CLUSTER 'claim_cluster';
    RUN ON claim.route_hash(queue);
$$;

CREATE FUNCTION claim.redrive(queue text, ids bigint[] DEFAULT NULL)
RETURNS integer LANGUAGE plproxy AS $$
    CLUSTER 'claim_cluster';
    RUN ON claim.route_hash(queue);
$$;

CREATE FUNCTION claim.cancel(queue text, id bigint)
RETURNS integer LANGUAGE plproxy AS $$
    CLUSTER 'claim_cluster';
    RUN ON claim.route_hash(queue);
$$;

CREATE FUNCTION claim.cancel_many(queue text, ids bigint[])
RETURNS integer LANGUAGE plproxy AS $$
    CLUSTER 'claim_cluster';
    RUN ON claim.route_hash(queue);
$$;

CREATE FUNCTION claim.item_state(queue text, id bigint, wait interval DEFAULT '0')
RETURNS claim.item_status LANGUAGE plproxy AS $$
    CLUSTER 'claim_cluster';
    RUN ON claim.route_hash(queue);
$$;

CREATE FUNCTION claim.enqueue(queue text, payload jsonb DEFAULT '{}', group_key text DEFAULT NULL,
                              run_at timestamptz DEFAULT NULL, priority integer DEFAULT 0,
                              dedup_key text DEFAULT NULL, after bigint[] DEFAULT NULL)
RETURNS bigint LANGUAGE plproxy AS $$
    CLUSTER 'claim_cluster';
    RUN ON claim.route_hash(queue);
$$;

CREATE FUNCTION claim.enqueue_many(queue text, payloads jsonb[], group_keys text[] DEFAULT NULL,
                                   run_at timestamptz DEFAULT NULL, priority integer DEFAULT 0,
                                   after bigint[] DEFAULT NULL)
RETURNS SETOF bigint LANGUAGE plproxy AS $$
    CLUSTER 'claim_cluster';
    RUN ON claim.route_hash(queue);
$$;

CREATE FUNCTION claim.claim_next(queue text, n integer DEFAULT 1, lease interval DEFAULT NULL,
                                 wait interval DEFAULT '0', worker text DEFAULT NULL,
                                 done bigint[] DEFAULT NULL)
RETURNS SETOF claim.item LANGUAGE plproxy AS $$
    CLUSTER 'claim_cluster';
    RUN ON claim.route_hash(queue);
$$;

CREATE FUNCTION claim.group_claim(queue text, max_items integer DEFAULT 1000,
                                  lease interval DEFAULT NULL, wait interval DEFAULT '0',
                                  worker text DEFAULT NULL, group_key text DEFAULT NULL)
RETURNS SETOF claim.item LANGUAGE plproxy AS $$
    CLUSTER 'claim_cluster';
    RUN ON claim.route_hash(queue);
$$;

-- A schedule fires on the partition of its queue. Its name is looked up on
-- every partition by unschedule: keep schedule names unique across queues.
CREATE FUNCTION claim.schedule(name text, cron text, queue text, payload jsonb DEFAULT '{}',
                               group_key text DEFAULT NULL, priority integer DEFAULT 0,
                               timezone text DEFAULT 'UTC')
RETURNS void LANGUAGE plproxy AS $$
    CLUSTER 'claim_cluster';
    RUN ON claim.route_hash(queue);
$$;

CREATE FUNCTION claim.partition_unschedule(name text)
RETURNS SETOF boolean LANGUAGE plproxy AS $$
    CLUSTER 'claim_cluster';
    RUN ON ALL;
    SELECT claim.unschedule(name);
$$;

-- true when a schedule of that name was removed on any partition.
CREATE FUNCTION claim.unschedule(name text)
RETURNS boolean
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
SELECT COALESCE(bool_or(r), false) FROM claim.partition_unschedule(name) AS r
$$;

-- Pure computation: any partition answers.
CREATE FUNCTION claim.cron_next(cron text, after timestamptz DEFAULT pg_catalog.clock_timestamp(),
                                timezone text DEFAULT 'UTC')
RETURNS timestamptz LANGUAGE plproxy AS $$
    CLUSTER 'claim_cluster';
    RUN ON ANY;
$$;

-- ----------------------------------------------------------------- tokens

CREATE FUNCTION claim.complete(token bigint, result jsonb DEFAULT NULL)
RETURNS integer LANGUAGE plproxy AS $$
    CLUSTER 'claim_cluster';
    RUN ON claim.route_token(token);
$$;

CREATE FUNCTION claim.complete_many(tokens bigint[], skip_stale boolean DEFAULT false,
                                    results jsonb[] DEFAULT NULL)
RETURNS integer LANGUAGE plproxy AS $$
    CLUSTER 'claim_cluster';
    RUN ON claim.tokens_partition(tokens);
$$;

CREATE FUNCTION claim.fail(token bigint, error text DEFAULT NULL, retry_in interval DEFAULT NULL)
RETURNS integer LANGUAGE plproxy AS $$
    CLUSTER 'claim_cluster';
    RUN ON claim.route_token(token);
$$;

CREATE FUNCTION claim.extend(token bigint, lease interval DEFAULT NULL)
RETURNS timestamptz LANGUAGE plproxy AS $$
    CLUSTER 'claim_cluster';
    RUN ON claim.route_token(token);
$$;

CREATE FUNCTION claim.release(token bigint)
RETURNS integer LANGUAGE plproxy AS $$
    CLUSTER 'claim_cluster';
    RUN ON claim.route_token(token);
$$;

-- Checks the token on its partition. The partition's transaction ends with
-- the call, so unlike on a partition itself it does not hold the claim
-- until the caller's transaction ends (docs/partitions.md).
CREATE FUNCTION claim.assert_token(token bigint)
RETURNS void LANGUAGE plproxy AS $$
    CLUSTER 'claim_cluster';
    RUN ON claim.route_token(token);
$$;

-- ----------------------------------------------------------------- leases

CREATE FUNCTION claim.lease_acquire(name text, ttl interval, holder text DEFAULT NULL,
                                    permits integer DEFAULT 1, wait interval DEFAULT '0')
RETURNS bigint LANGUAGE plproxy AS $$
    CLUSTER 'claim_cluster';
    RUN ON claim.route_hash(name);
$$;

CREATE FUNCTION claim.lease_renew(name text, token bigint, ttl interval)
RETURNS timestamptz LANGUAGE plproxy AS $$
    CLUSTER 'claim_cluster';
    RUN ON claim.route_token(token);
$$;

CREATE FUNCTION claim.lease_release(name text, token bigint)
RETURNS boolean LANGUAGE plproxy AS $$
    CLUSTER 'claim_cluster';
    RUN ON claim.route_token(token);
$$;

CREATE FUNCTION claim.lease_assert(name text, token bigint)
RETURNS void LANGUAGE plproxy AS $$
    CLUSTER 'claim_cluster';
    RUN ON claim.route_token(token);
$$;

-- ---------------------------------------------------------- once, guards

CREATE FUNCTION claim.once(key text, ttl interval DEFAULT NULL)
RETURNS boolean LANGUAGE plproxy AS $$
    CLUSTER 'claim_cluster';
    RUN ON claim.route_hash(key);
$$;

CREATE FUNCTION claim.guard_begin(key text, lease interval)
RETURNS bigint LANGUAGE plproxy AS $$
    CLUSTER 'claim_cluster';
    RUN ON claim.route_hash(key);
$$;

CREATE FUNCTION claim.guard_finish(key text, token bigint, result jsonb DEFAULT NULL)
RETURNS void LANGUAGE plproxy AS $$
    CLUSTER 'claim_cluster';
    RUN ON claim.route_hash(key);
$$;

CREATE FUNCTION claim.guard_abandon(key text, token bigint)
RETURNS void LANGUAGE plproxy AS $$
    CLUSTER 'claim_cluster';
    RUN ON claim.route_hash(key);
$$;

CREATE FUNCTION claim.guard_result(key text)
RETURNS jsonb LANGUAGE plproxy AS $$
    CLUSTER 'claim_cluster';
    RUN ON claim.route_hash(key);
$$;

-- ------------------------------------------- answered by every partition

CREATE FUNCTION claim.partition_lease_purge(older_than interval)
RETURNS SETOF bigint LANGUAGE plproxy AS $$
    CLUSTER 'claim_cluster';
    RUN ON ALL;
    SELECT claim.lease_purge(older_than);
$$;

-- The sum over all partitions.
CREATE FUNCTION claim.lease_purge(older_than interval DEFAULT '1 hour')
RETURNS bigint
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
SELECT COALESCE(sum(n), 0)::bigint FROM claim.partition_lease_purge(older_than) AS n
$$;

CREATE FUNCTION claim.worker_status(OUT datid oid, OUT pid integer, OUT state text,
                                    OUT rounds bigint, OUT promoted bigint, OUT expired bigint,
                                    OUT killed bigint, OUT notifies bigint, OUT purged bigint)
RETURNS SETOF record LANGUAGE plproxy AS $$
    CLUSTER 'claim_cluster';
    RUN ON ALL;
$$;

-- Per-queue counters and gauges of every partition (each queue is on one).
CREATE FUNCTION claim.metrics(OUT queue text,
                              OUT enqueued bigint, OUT claimed bigint, OUT completed bigint,
                              OUT failed bigint, OUT dead bigint, OUT expired bigint,
                              OUT cancelled bigint,
                              OUT ready bigint, OUT scheduled bigint, OUT in_flight bigint,
                              OUT dead_items bigint, OUT waiting bigint,
                              OUT oldest_ready_age interval, OUT paused boolean,
                              OUT waiters integer)
RETURNS SETOF record LANGUAGE plproxy AS $$
    CLUSTER 'claim_cluster';
    RUN ON ALL;
$$;

-- The views: the rows of every partition. A queue lives on one partition,
-- so the rows of one queue come from one partition.
CREATE FUNCTION claim.partition_queue_stats(
    OUT queue text, OUT ready bigint, OUT scheduled bigint, OUT claimed bigint, OUT dead bigint,
    OUT oldest_ready_age interval, OUT waiting bigint, OUT paused boolean)
RETURNS SETOF record LANGUAGE plproxy AS $$
    CLUSTER 'claim_cluster';
    RUN ON ALL;
    SELECT s.queue, s.ready, s.scheduled, s.claimed, s.dead, s.oldest_ready_age, s.waiting,
           s.paused
    FROM claim.queue_stats s;
$$;
CREATE VIEW claim.queue_stats AS SELECT * FROM claim.partition_queue_stats();

CREATE FUNCTION claim.partition_dead_items(
    OUT queue text, OUT id bigint, OUT group_key text, OUT payload jsonb, OUT attempts integer,
    OUT last_error text, OUT enqueued_at timestamptz, OUT died_at timestamptz)
RETURNS SETOF record LANGUAGE plproxy AS $$
    CLUSTER 'claim_cluster';
    RUN ON ALL;
    SELECT d.queue, d.id, d.group_key, d.payload, d.attempts, d.last_error, d.enqueued_at,
           d.died_at
    FROM claim.dead_items d;
$$;
CREATE VIEW claim.dead_items AS SELECT * FROM claim.partition_dead_items();

CREATE FUNCTION claim.partition_claimed_items(
    OUT queue text, OUT id bigint, OUT token bigint, OUT attempt integer, OUT worker text,
    OUT claimed_at timestamptz, OUT lease_until timestamptz, OUT live boolean)
RETURNS SETOF record LANGUAGE plproxy AS $$
    CLUSTER 'claim_cluster';
    RUN ON ALL;
    SELECT c.queue, c.id, c.token, c.attempt, c.worker, c.claimed_at, c.lease_until, c.live
    FROM claim.claimed_items c;
$$;
CREATE VIEW claim.claimed_items AS SELECT * FROM claim.partition_claimed_items();

CREATE FUNCTION claim.partition_finished_items(
    OUT queue text, OUT id bigint, OUT group_key text, OUT payload jsonb, OUT state text,
    OUT result jsonb, OUT error text, OUT attempts integer, OUT enqueued_at timestamptz,
    OUT finished_at timestamptz)
RETURNS SETOF record LANGUAGE plproxy AS $$
    CLUSTER 'claim_cluster';
    RUN ON ALL;
    SELECT f.queue, f.id, f.group_key, f.payload, f.state, f.result, f.error, f.attempts,
           f.enqueued_at, f.finished_at
    FROM claim.finished_items f;
$$;
CREATE VIEW claim.finished_items AS SELECT * FROM claim.partition_finished_items();

CREATE FUNCTION claim.partition_blocked_groups(
    OUT queue text, OUT group_key text, OUT head_id bigint, OUT reason text,
    OUT since timestamptz, OUT until timestamptz, OUT waiting bigint)
RETURNS SETOF record LANGUAGE plproxy AS $$
    CLUSTER 'claim_cluster';
    RUN ON ALL;
    SELECT b.queue, b.group_key, b.head_id, b.reason, b.since, b.until, b.waiting
    FROM claim.blocked_groups b;
$$;
CREATE VIEW claim.blocked_groups AS SELECT * FROM claim.partition_blocked_groups();

CREATE FUNCTION claim.partition_leases(
    OUT name text, OUT token bigint, OUT holder text, OUT acquired_at timestamptz,
    OUT expires_at timestamptz, OUT permits integer)
RETURNS SETOF record LANGUAGE plproxy AS $$
    CLUSTER 'claim_cluster';
    RUN ON ALL;
    SELECT l.name, l.token, l.holder, l.acquired_at, l.expires_at, l.permits
    FROM claim.leases l;
$$;
CREATE VIEW claim.leases AS SELECT * FROM claim.partition_leases();

CREATE FUNCTION claim.partition_schedules(
    OUT name text, OUT cron text, OUT timezone text, OUT queue text, OUT next_run timestamptz,
    OUT last_run timestamptz, OUT last_item bigint, OUT payload jsonb, OUT group_key text,
    OUT priority integer)
RETURNS SETOF record LANGUAGE plproxy AS $$
    CLUSTER 'claim_cluster';
    RUN ON ALL;
    SELECT s.name, s.cron, s.timezone, s.queue, s.next_run, s.last_run, s.last_item, s.payload,
           s.group_key, s.priority
    FROM claim.schedules s;
$$;
CREATE VIEW claim.schedules AS SELECT * FROM claim.partition_schedules();

-- ------------------------------------------------------------- privileges
-- As on the partitions: queue administration, redrive, purge and the worker
-- status are not for PUBLIC (the partitions check again with the mapped user).

REVOKE EXECUTE ON FUNCTION claim.create_queue(text, interval, integer, interval, interval, integer,
                                               integer, integer, interval, boolean) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION claim.alter_queue(text, interval, integer, interval, interval, integer,
                                              integer, integer, interval, boolean) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION claim.schedule(text, text, text, jsonb, text, integer, text) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION claim.partition_unschedule(text) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION claim.unschedule(text) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION claim.metrics() FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION claim.drop_queue(text) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION claim.pause(text) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION claim.resume(text) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION claim.redrive(text, bigint[]) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION claim.partition_lease_purge(interval) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION claim.lease_purge(interval) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION claim.worker_status() FROM PUBLIC;
REVOKE ALL ON claim.queue_stats, claim.dead_items, claim.claimed_items, claim.finished_items,
              claim.blocked_groups, claim.leases, claim.schedules FROM PUBLIC;
