-- pg_claim 0.2.0 -> 0.3.0.
--
-- A fresh CREATE EXTENSION pg_claim runs pg_claim--0.1.0.sql, the 0.1.0 ->
-- 0.2.0 update and then this script, so an installed 0.3.0 is the same
-- whichever way it was reached. Security, as in the earlier scripts: every
-- object is schema-qualified, functions pin search_path, nothing uses
-- CREATE OR REPLACE on an object a user could have created, and admin
-- functions are revoked from PUBLIC.

\echo Use "ALTER EXTENSION pg_claim UPDATE TO '0.3.0'" to load this file. \quit

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

-- ===========================================================================
-- Tokens and partitions; array forms with names of their own
-- ===========================================================================

-- Tokens are at most 2^53 - 1, whatever the partition (docs/partitions.md):
-- bits 52..47 hold the partition (0..63), bits 46..0 the count within it.
-- claim.token_seq hands out whole tokens: its range is the block of the
-- database's partition, so every session hands out the tokens of that one
-- partition whatever its settings say. The partition is pg_claim.partition
-- when the extension is created or updated; claim.set_partition raises it.
-- A 0.2.0 token above 2^53 - 1 stays valid, and claim.token_partition still
-- reads its partition from its bits 62..53. In partition 0 the count goes on
-- where 0.2.0 stopped, so every later token is higher than every earlier one.
DO $pg_claim_tokens$
DECLARE
    setting text := pg_catalog.current_setting('pg_claim.partition', true);
    p bigint;
    counted bigint;  -- tokens 1 .. counted of the partition may have been handed out
    unit CONSTANT bigint := 140737488355328;  -- 2^47: one partition's block
BEGIN
    IF setting IS NULL OR setting OPERATOR(pg_catalog.=) '' THEN
        p := 0;
    ELSIF setting !~ '^\s*[0-9]{1,3}\s*$' OR setting::integer OPERATOR(pg_catalog.>) 63 THEN
        RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
            MESSAGE = pg_catalog.format('pg_claim.partition is %s, but partitions are numbered 0 to 63', setting),
            HINT = 'Tokens carry the partition in 6 bits, so that no token exceeds 2^53 - 1 (docs/partitions.md). Renumber the partitions below 64 before updating.';
    ELSE
        p := setting::bigint;
    END IF;
    -- The count that 0.2.0 reached in this database (its sequence held the
    -- count; the partition was added on top), read under the lock that
    -- ALTER SEQUENCE takes, which keeps nextval waiting until the update
    -- commits.
    ALTER SEQUENCE claim.token_seq NO CYCLE;
    SELECT s.last_value OPERATOR(pg_catalog.-) (CASE WHEN s.is_called THEN 0 ELSE 1 END)
      INTO counted FROM claim.token_seq s;
    IF counted OPERATOR(pg_catalog.>=) (unit OPERATOR(pg_catalog.-) 4294967296) THEN
        RAISE EXCEPTION USING ERRCODE = 'sequence_generator_limit_exceeded',
            MESSAGE = pg_catalog.format('claim.token_seq is at %s, beyond the 2^47 tokens a partition holds', counted),
            HINT = 'Tokens are at most 2^53 - 1 from pg_claim 0.3.0 on (docs/partitions.md).';
    END IF;
    EXECUTE pg_catalog.format(
        'ALTER SEQUENCE claim.token_seq MINVALUE %1$s START WITH %1$s MAXVALUE %2$s RESTART WITH %3$s',
        (p OPERATOR(pg_catalog.*) unit) OPERATOR(pg_catalog.+) 1,
        ((p OPERATOR(pg_catalog.+) 1) OPERATOR(pg_catalog.*) unit) OPERATOR(pg_catalog.-) 1,
        (p OPERATOR(pg_catalog.*) unit) OPERATOR(pg_catalog.+) (counted OPERATOR(pg_catalog.+) 1));
END
$pg_claim_tokens$;

-- The durable ceiling of the tokens handed out: a token leaves the server
-- only once this sequence (written and flushed by the library, as its owner)
-- is at or above it, so the first grant after a server start moves
-- claim.token_seq up to it and no further (README, "Tokens"). Nobody else
-- reads or writes them.
CREATE SEQUENCE claim.token_ceiling AS bigint MINVALUE 0 MAXVALUE 9007199254740991 START 0 NO CYCLE;
SELECT pg_catalog.setval('claim.token_ceiling', s.last_value, true) FROM claim.token_seq s;
-- The timeline the ceiling was last written on: a promoted standby, or a
-- server recovered to a point in time, is on another one, and its first
-- grant moves the sequence 2^32 further (the ceiling it replayed may lag the
-- old primary's). It starts at the timeline of the last checkpoint.
CREATE SEQUENCE claim.token_timeline AS bigint MINVALUE 0 MAXVALUE 4294967295 START 0 NO CYCLE;
SELECT pg_catalog.setval('claim.token_timeline', c.timeline_id, true)
  FROM pg_catalog.pg_control_checkpoint() c;
REVOKE ALL ON SEQUENCE claim.token_ceiling, claim.token_timeline FROM PUBLIC;

-- claim.partition() -> int: the partition whose tokens this database hands
-- out (that of claim.token_seq's range).
CREATE FUNCTION claim.partition()
RETURNS integer
LANGUAGE sql STABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
SELECT (s.seqmax OPERATOR(pg_catalog.>>) 47)::integer
  FROM pg_catalog.pg_sequence s
 WHERE s.seqrelid OPERATOR(pg_catalog.=) 'claim.token_seq'::pg_catalog.regclass
$$;

-- claim.set_partition(partition int) -> int: moves this database's tokens
-- to a higher partition (or confirms the one it has), and sets
-- pg_claim.partition for the database and this session. Tokens keep
-- increasing: every token of a higher partition is above every token of a
-- lower one, and a lower partition is refused. Sessions opened before it are
-- refused tokens (55000) until they reconnect. Superuser: it alters the
-- sequence and the database's settings.
CREATE FUNCTION claim.set_partition(partition integer)
RETURNS integer
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    unit CONSTANT bigint := 140737488355328;  -- 2^47
    current integer;
    counted bigint;
BEGIN
    IF partition IS NULL OR partition OPERATOR(pg_catalog.<) 0 OR partition OPERATOR(pg_catalog.>) 63 THEN
        RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
            MESSAGE = pg_catalog.format('partition %s is out of range', COALESCE(partition::text, 'NULL')),
            HINT = 'Partitions are numbered 0 to 63.';
    END IF;
    IF pg_catalog.pg_is_in_recovery() THEN
        RAISE EXCEPTION USING ERRCODE = 'read_only_sql_transaction',
            MESSAGE = 'cannot call claim.set_partition on a hot standby',
            HINT = 'Connect to the primary: tokens are handed out there.';
    END IF;
    -- Grants wait until this transaction ends (the lock of ALTER SEQUENCE).
    ALTER SEQUENCE claim.token_seq NO CYCLE;
    current := claim.partition();
    IF partition OPERATOR(pg_catalog.<) current THEN
        RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
            MESSAGE = pg_catalog.format('partition %s is lower than this database''s partition %s', partition, current),
            HINT = 'Its tokens would be lower than those already handed out, and fencing needs them to increase. A partition is only ever raised (docs/partitions.md).';
    END IF;
    IF partition OPERATOR(pg_catalog.>) current THEN
        SELECT s.last_value OPERATOR(pg_catalog.-) (current::bigint OPERATOR(pg_catalog.*) unit)
               OPERATOR(pg_catalog.-) (CASE WHEN s.is_called THEN 0 ELSE 1 END)
          INTO counted FROM claim.token_seq s;
        EXECUTE pg_catalog.format(
            'ALTER SEQUENCE claim.token_seq MINVALUE %1$s START WITH %1$s MAXVALUE %2$s RESTART WITH %3$s',
            (partition::bigint OPERATOR(pg_catalog.*) unit) OPERATOR(pg_catalog.+) 1,
            ((partition::bigint OPERATOR(pg_catalog.+) 1) OPERATOR(pg_catalog.*) unit) OPERATOR(pg_catalog.-) 1,
            (partition::bigint OPERATOR(pg_catalog.*) unit) OPERATOR(pg_catalog.+) (counted OPERATOR(pg_catalog.+) 1));
    END IF;
    EXECUTE pg_catalog.format('ALTER DATABASE %I SET pg_claim.partition = %s',
                              pg_catalog.current_database(), partition);
    PERFORM pg_catalog.set_config('pg_claim.partition', partition::text, false);
    RETURN partition;
END
$$;
REVOKE EXECUTE ON FUNCTION claim.set_partition(integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION claim.partition() TO claim_producer, claim_worker, claim_admin;

-- Array forms have names of their own, so that a call with untyped
-- parameters (claim.complete($1), claim.cancel($1, $2)) resolves to one
-- function in every driver. The C functions are those of the dropped forms.
DROP FUNCTION claim.complete(bigint[], boolean, jsonb[]);
CREATE FUNCTION claim.complete_many(tokens bigint[], skip_stale boolean DEFAULT false,
                                    results jsonb[] DEFAULT NULL)
RETURNS integer
LANGUAGE c VOLATILE PARALLEL UNSAFE
AS 'MODULE_PATHNAME', 'pgclaim_complete_many';

DROP FUNCTION claim.cancel(text, bigint[]);
CREATE FUNCTION claim.cancel_many(queue text, ids bigint[])
RETURNS integer
LANGUAGE c VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'pgclaim_cancel';

-- One item: 1 when it was cancelled, 0 when it was not there to cancel.
CREATE FUNCTION claim.cancel(queue text, id bigint)
RETURNS integer
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF id IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'null_value_not_allowed',
            MESSAGE = 'id must not be NULL',
            HINT = 'Give the id of the item to cancel; claim.cancel_many cancels a list of them.';
    END IF;
    RETURN claim.cancel_many(queue, ARRAY[id]);
END
$$;

DROP FUNCTION claim.enqueue_batch(text, jsonb[], text[], timestamptz, integer, bigint[]);
CREATE FUNCTION claim.enqueue_many(queue text,
                                   payloads jsonb[],
                                   group_keys text[] DEFAULT NULL,
                                   run_at timestamptz DEFAULT NULL,
                                   priority integer DEFAULT 0,
                                   after bigint[] DEFAULT NULL)
RETURNS SETOF bigint
LANGUAGE c VOLATILE PARALLEL UNSAFE ROWS 1000
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'pgclaim_enqueue_batch';

GRANT EXECUTE ON FUNCTION claim.enqueue_many(text, jsonb[], text[], timestamptz, integer, bigint[])
  TO claim_producer, claim_admin;
GRANT EXECUTE ON FUNCTION claim.complete_many(bigint[], boolean, jsonb[]),
                          claim.cancel_many(text, bigint[]),
                          claim.cancel(text, bigint)
  TO claim_worker, claim_admin;

-- ===========================================================================
-- Public views that every driver loads
-- ===========================================================================
-- Every value of the extension's views loads in the usual drivers (psycopg,
-- node-postgres, JDBC): no infinite timestamp, no row that is not what the
-- view names. claim.release keeps the claims row of the item it gives back
-- (its attempt count lives there) with lease_until = -infinity: that item is
-- not claimed, so claimed_items leaves it out. A schedule whose time zone
-- disappeared has next_run = infinity in claim.schedule_defs: the view shows
-- NULL (it fires no more until claim.schedule repairs it). The other views
-- (queue_stats, dead_items, finished_items, blocked_groups, leases) hold
-- finite times only: they compare claim times with the clock, and every
-- other time they show is a finite one written by the extension.

DROP VIEW claim.claimed_items;
CREATE VIEW claim.claimed_items AS
SELECT q.name AS queue, c.item_id AS id, c.token, c.attempt, c.worker,
       c.claimed_at, c.lease_until,
       c.lease_until OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp() AS live
FROM claim._claim_rows('claim.claimed_items') c
JOIN claim.queues q ON q.queue_id OPERATOR(pg_catalog.=) c.queue_id
WHERE pg_catalog.isfinite(c.lease_until);
COMMENT ON VIEW claim.claimed_items IS
    'Live and expired claims (an item given back with claim.release is not claimed and not listed). Not on a hot standby (55000): claims are not replicated (read them on the primary).';
GRANT SELECT ON claim.claimed_items TO claim_worker;
GRANT SELECT, INSERT, UPDATE, DELETE, TRUNCATE ON claim.claimed_items TO claim_admin;

DROP VIEW claim.schedules;
CREATE VIEW claim.schedules AS
SELECT s.name, s.cron, s.timezone, q.name AS queue,
       CASE WHEN pg_catalog.isfinite(s.next_run) THEN s.next_run END AS next_run,
       s.last_run, s.last_item, s.payload, s.group_key, s.priority
FROM claim.schedule_defs s
JOIN claim.queues q ON q.queue_id OPERATOR(pg_catalog.=) s.queue_id;
COMMENT ON VIEW claim.schedules IS
    'Recurring schedules. next_run is NULL when the schedule fires no more (its time zone is no longer known; claim.schedule with the same name repairs it).';
GRANT SELECT ON claim.schedules TO claim_admin;

-- ===========================================================================
-- Claim core and transaction edges
-- ===========================================================================

-- The lock table in shared memory that holds claimed, completed and asserted
-- items and lease slots until their transactions end (docs/claim-core.md).
CREATE FUNCTION claim.lock_table(OUT held bigint, OUT in_use bigint, OUT capacity bigint)
RETURNS record
LANGUAGE c VOLATILE PARALLEL RESTRICTED
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'pgclaim_lock_table';
COMMENT ON FUNCTION claim.lock_table() IS
    'held: items and lease slots this transaction holds locked; in_use and capacity: the whole lock table (NULL without the preload)';

-- ===========================================================================
-- Fair share between keys inside a queue (docs/fairness.md)
-- ===========================================================================

-- A fair queue hands its ready items out in proportion to the weights of
-- their fair keys (stride scheduling in shared memory, docs/fairness.md).
-- Its items enqueued without a fair_key share the default key (id 0).
ALTER TABLE claim.queues ADD COLUMN fair boolean NOT NULL DEFAULT false;

-- The fair keys of every queue: a small id per (queue, key) stored in the
-- items, and the key's weight (set by claim.set_fair_weight).
CREATE SEQUENCE claim.fair_key_seq AS integer MINVALUE 1 MAXVALUE 2147483647 NO CYCLE;
CREATE TABLE claim.fair_keys (
    queue_id  integer NOT NULL,
    fair_key  text COLLATE "C" NOT NULL,
    key_id    integer NOT NULL UNIQUE DEFAULT pg_catalog.nextval('claim.fair_key_seq'),
    weight    integer NOT NULL DEFAULT 1,
    PRIMARY KEY (queue_id, fair_key),
    CONSTRAINT fair_keys_weight_check CHECK (weight OPERATOR(pg_catalog.>=) 1
                                             AND weight OPERATOR(pg_catalog.<=) 10000)
);
ALTER SEQUENCE claim.fair_key_seq OWNED BY claim.fair_keys.key_id;
REVOKE ALL ON claim.fair_keys, claim.fair_key_seq FROM PUBLIC;
GRANT SELECT, INSERT ON claim.fair_keys TO claim_producer;
GRANT USAGE ON SEQUENCE claim.fair_key_seq TO claim_producer;
GRANT SELECT ON claim.fair_keys TO claim_worker;
GRANT SELECT, INSERT, UPDATE, DELETE, TRUNCATE ON claim.fair_keys TO claim_admin;
GRANT USAGE, SELECT, UPDATE ON SEQUENCE claim.fair_key_seq TO claim_admin;

-- The item's fair key (NULL: none; 0: the default key of a fair queue).
-- The claim walk of a fair queue reads one key's ready items in delivery
-- order through items_fair; items without a key are not in it.
ALTER TABLE claim.items ADD COLUMN fair_key_id integer;
CREATE INDEX items_fair ON claim.items (queue_id, fair_key_id, ord, id)
    WHERE state OPERATOR(pg_catalog.=) 'r' AND run_at IS NULL AND fair_key_id IS NOT NULL;

-- create_queue and alter_queue take `fair`.
DROP FUNCTION claim.create_queue(text, interval, integer, interval, interval,
                                 integer, integer, integer, interval, boolean);
CREATE FUNCTION claim.create_queue(queue text,
                                   lease interval DEFAULT '30 seconds',
                                   max_attempts integer DEFAULT 5,
                                   backoff interval DEFAULT '1 second',
                                   retain interval DEFAULT '0',
                                   max_active integer DEFAULT NULL,
                                   group_limit integer DEFAULT 1,
                                   rate integer DEFAULT NULL,
                                   rate_per interval DEFAULT '1 second',
                                   rate_per_group boolean DEFAULT false,
                                   fair boolean DEFAULT false)
RETURNS void
LANGUAGE c VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'pgclaim_create_queue';
REVOKE EXECUTE ON FUNCTION claim.create_queue(text, interval, integer, interval, interval,
                                               integer, integer, integer, interval, boolean,
                                               boolean) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION claim.create_queue(text, interval, integer, interval, interval,
                                              integer, integer, integer, interval, boolean,
                                              boolean) TO claim_admin;

DROP FUNCTION claim.alter_queue(text, interval, integer, interval, interval,
                                integer, integer, integer, interval, boolean);
CREATE FUNCTION claim.alter_queue(queue text,
                                  lease interval DEFAULT NULL,
                                  max_attempts integer DEFAULT NULL,
                                  backoff interval DEFAULT NULL,
                                  retain interval DEFAULT NULL,
                                  max_active integer DEFAULT NULL,
                                  group_limit integer DEFAULT NULL,
                                  rate integer DEFAULT NULL,
                                  rate_per interval DEFAULT NULL,
                                  rate_per_group boolean DEFAULT NULL,
                                  fair boolean DEFAULT NULL)
RETURNS void
LANGUAGE c VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'pgclaim_alter_queue';
REVOKE EXECUTE ON FUNCTION claim.alter_queue(text, interval, integer, interval, interval,
                                              integer, integer, integer, interval, boolean,
                                              boolean) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION claim.alter_queue(text, interval, integer, interval, interval,
                                             integer, integer, integer, interval, boolean,
                                             boolean) TO claim_admin;

-- enqueue and enqueue_many take `fair_key` (one key for a batch).
DROP FUNCTION claim.enqueue(text, jsonb, text, timestamptz, integer, text, bigint[]);
CREATE FUNCTION claim.enqueue(queue text,
                              payload jsonb DEFAULT '{}',
                              group_key text DEFAULT NULL,
                              run_at timestamptz DEFAULT NULL,
                              priority integer DEFAULT 0,
                              dedup_key text DEFAULT NULL,
                              after bigint[] DEFAULT NULL,
                              fair_key text DEFAULT NULL)
RETURNS bigint
LANGUAGE c VOLATILE PARALLEL UNSAFE
AS 'MODULE_PATHNAME', 'pgclaim_enqueue';
GRANT EXECUTE ON FUNCTION claim.enqueue(text, jsonb, text, timestamptz, integer, text, bigint[], text)
  TO claim_producer, claim_admin;

DROP FUNCTION claim.enqueue_many(text, jsonb[], text[], timestamptz, integer, bigint[]);
CREATE FUNCTION claim.enqueue_many(queue text,
                                   payloads jsonb[],
                                   group_keys text[] DEFAULT NULL,
                                   run_at timestamptz DEFAULT NULL,
                                   priority integer DEFAULT 0,
                                   after bigint[] DEFAULT NULL,
                                   fair_key text DEFAULT NULL)
RETURNS SETOF bigint
LANGUAGE c VOLATILE PARALLEL UNSAFE ROWS 1000
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'pgclaim_enqueue_batch';
GRANT EXECUTE ON FUNCTION claim.enqueue_many(text, jsonb[], text[], timestamptz, integer, bigint[], text)
  TO claim_producer, claim_admin;

-- claim.set_fair_weight(queue, fair_key, weight): the key's share of a fair
-- queue relative to the other keys' (1 to 10000; a key without one has 1).
CREATE FUNCTION claim.set_fair_weight(queue text, fair_key text, weight integer)
RETURNS void
LANGUAGE c VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'pgclaim_set_fair_weight';
REVOKE EXECUTE ON FUNCTION claim.set_fair_weight(text, text, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION claim.set_fair_weight(text, text, integer) TO claim_admin;

-- What the scheduler holds in shared memory for this database: per queue
-- and key, whether it is active, and how many claims it was handed in the
-- last minute (in 10-second steps).
CREATE FUNCTION claim._fair_state(OUT queue_id integer, OUT key_id integer, OUT active boolean,
                                  OUT handed_last_minute bigint)
RETURNS SETOF record
LANGUAGE c VOLATILE PARALLEL RESTRICTED
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'pgclaim_fair_state';
REVOKE EXECUTE ON FUNCTION claim._fair_state() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION claim._fair_state() TO claim_producer, claim_worker, claim_admin, pg_monitor;

-- queue_stats per fair key: ready and claimed items of every key of a
-- fair queue (fair_key NULL: the default key), its weight, and the claims
-- handed to it in the last minute.
CREATE VIEW claim.fair_stats AS
WITH k AS (
    SELECT i.queue_id, i.fair_key_id,
           count(*) FILTER (WHERE c.item_id IS NULL
                              OR c.lease_until OPERATOR(pg_catalog.<=) pg_catalog.clock_timestamp()) AS ready,
           count(*) FILTER (WHERE c.lease_until OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp()) AS claimed
      FROM claim.items i
      LEFT JOIN claim._claim_times() c ON c.item_id OPERATOR(pg_catalog.=) i.id
     WHERE i.fair_key_id IS NOT NULL AND i.state OPERATOR(pg_catalog.=) 'r' AND i.run_at IS NULL
     GROUP BY i.queue_id, i.fair_key_id)
SELECT q.name AS queue, f.fair_key, COALESCE(f.weight, 1) AS weight,
       CASE WHEN NOT pg_catalog.pg_is_in_recovery() THEN COALESCE(k.ready, 0) END AS ready,
       CASE WHEN NOT pg_catalog.pg_is_in_recovery() THEN COALESCE(k.claimed, 0) END AS claimed,
       COALESCE(s.handed_last_minute, 0) AS handed_last_minute,
       COALESCE(s.active, false) AS active
FROM k
FULL JOIN (SELECT * FROM claim._fair_state()) s
       ON s.queue_id OPERATOR(pg_catalog.=) k.queue_id AND s.key_id OPERATOR(pg_catalog.=) k.fair_key_id
JOIN claim.queues q ON q.queue_id OPERATOR(pg_catalog.=) COALESCE(k.queue_id, s.queue_id)
LEFT JOIN claim.fair_keys f ON f.queue_id OPERATOR(pg_catalog.=) q.queue_id
                           AND f.key_id OPERATOR(pg_catalog.=) COALESCE(k.fair_key_id, s.key_id);
COMMENT ON VIEW claim.fair_stats IS
    'Per queue and fair key: ready and claimed items, weight, claims handed out in the last minute (10-second steps) and whether the scheduler holds the key active. fair_key NULL: the default key of a fair queue. On a hot standby ready and claimed are NULL.';
GRANT SELECT ON claim.fair_stats TO claim_producer, claim_worker, pg_monitor;
GRANT SELECT, INSERT, UPDATE, DELETE, TRUNCATE ON claim.fair_stats TO claim_admin;

-- ===========================================================================
-- Spread queues (docs/partitions.md)
-- ===========================================================================

-- ===========================================================================
-- Backup and restore: what pg_dump keeps
-- (kept last, so it also covers the tables this script creates above)
-- ===========================================================================

-- pg_dump keeps the rows of every table and the value of every sequence
-- marked here (docs/operations.md). What is not marked is volatile on
-- purpose, and a restore starts it empty:
--   claim.claims          (UNLOGGED) live claims: a claimed item comes back
--                         ready, as after a crash; the attempt it was in is
--                         not counted, and its holder's token is refused.
--   claim.lease_released  (UNLOGGED) releases of lease slots.
--   claim.lease_holders   live leases: every lease is free after a restore,
--                         and the tokens of its holders are refused.
--   claim.token_ceiling, claim.token_timeline (where they exist): the
--                         durable ceiling of the tokens and its timeline
--                         belong to the server that wrote them; the restored
--                         claim.token_seq is the floor of the target's tokens.
-- claim.finished is partitioned: its rows are dumped from its partitions.
-- Regression test dump_coverage fails when a table or sequence of the
-- extension is neither marked here nor on that list.
SELECT pg_catalog.pg_extension_config_dump('claim.queues', '');
SELECT pg_catalog.pg_extension_config_dump('claim.queues_queue_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('claim.items', '');
SELECT pg_catalog.pg_extension_config_dump('claim.item_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('claim.item_parents', '');
SELECT pg_catalog.pg_extension_config_dump('claim.finished_0', '');
SELECT pg_catalog.pg_extension_config_dump('claim.finished_1', '');
SELECT pg_catalog.pg_extension_config_dump('claim.finished_2', '');
SELECT pg_catalog.pg_extension_config_dump('claim.finished_3', '');
SELECT pg_catalog.pg_extension_config_dump('claim.finished_ring', '');
SELECT pg_catalog.pg_extension_config_dump('claim.schedule_defs', '');
SELECT pg_catalog.pg_extension_config_dump('claim.schedule_defs_schedule_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('claim.once_keys', '');
SELECT pg_catalog.pg_extension_config_dump('claim.fair_keys', '');
SELECT pg_catalog.pg_extension_config_dump('claim.fair_key_seq', '');
SELECT pg_catalog.pg_extension_config_dump('claim.guards', '');
-- Tokens: the restored sequence continues above every token the dumped
-- database had handed out when pg_dump read it.
SELECT pg_catalog.pg_extension_config_dump('claim.token_seq', '');

-- The ring of claim.finished has one row per slot, which the install script
-- inserts; a restore copies the dumped rows into a table that already has
-- them. This trigger turns the copy of a slot that exists into an update of
-- it, so the restored ring is the dumped one and no partition holding
-- restored rows is truncated before their retention ends. ENABLE ALWAYS: it
-- also fires under session_replication_role = replica, which docs/operations.md
-- recommends for a --data-only restore.
CREATE FUNCTION claim._finished_ring_restore()
RETURNS trigger
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF NEW.current THEN
        UPDATE claim.finished_ring SET current = false
         WHERE current AND slot OPERATOR(pg_catalog.<>) NEW.slot;
    END IF;
    UPDATE claim.finished_ring
       SET current = NEW.current, opened_at = NEW.opened_at, closed_at = NEW.closed_at
     WHERE slot OPERATOR(pg_catalog.=) NEW.slot;
    IF FOUND THEN
        RETURN NULL;    -- merged into the install's row
    END IF;
    RETURN NEW;
END
$$;
REVOKE EXECUTE ON FUNCTION claim._finished_ring_restore() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION claim._finished_ring_restore() TO claim_admin;
CREATE TRIGGER finished_ring_restore BEFORE INSERT ON claim.finished_ring
    FOR EACH ROW EXECUTE FUNCTION claim._finished_ring_restore();
ALTER TABLE claim.finished_ring ENABLE ALWAYS TRIGGER finished_ring_restore;

