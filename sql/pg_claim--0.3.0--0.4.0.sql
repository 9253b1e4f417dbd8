-- pg_claim 0.3.0 -> 0.4.0.
--
-- A fresh CREATE EXTENSION pg_claim runs pg_claim--0.1.0.sql and every update
-- script after it, this one last, so an installed 0.4.0 is the same whichever
-- way it was reached. Security, as in the earlier scripts: every object is
-- schema-qualified, functions pin search_path, nothing uses CREATE OR REPLACE
-- on an object a user could have created, and admin functions are revoked
-- from PUBLIC.
--
-- One section per subject, each headed by a banner; a section adds to the end
-- of this file.

\echo Use "ALTER EXTENSION pg_claim UPDATE TO '0.4.0'" to load this file. \quit

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
-- Moving with logical replication (docs/operations.md, "Moving with logical
-- replication")
-- ===========================================================================
-- Logical replication copies tables, not sequences. A subscriber's copy of
-- pg_claim's tables therefore keeps its sequences ahead of the copied rows
-- as they arrive: the trigger claim._follow_copy, ENABLE REPLICA (it fires
-- only for rows applied by a subscription, or by a session that sets
-- session_replication_role = replica, never for the source's own writes),
-- moves item, queue, schedule and fair-key ids past the highest copied, and
-- claim.token_seq 2^32 past every copied token. Its arguments are (column,
-- sequence of schema claim) pairs.

-- The durable token ceiling of each server that wrote into this table (the
-- database's worker, when wal_level is logical): no token that server handed
-- out, claims' tokens included, exceeds it. A subscription copies it, and
-- the subscriber's tokens go on 2^32 past it. source: the server's system
-- identifier and the database's oid.
CREATE TABLE claim.token_marks (
    source     text COLLATE "C" PRIMARY KEY,
    ceiling    bigint NOT NULL,
    marked_at  timestamptz NOT NULL
);
REVOKE ALL ON claim.token_marks FROM PUBLIC;
GRANT SELECT ON claim.token_marks TO claim_worker;
GRANT SELECT, INSERT, UPDATE, DELETE, TRUNCATE ON claim.token_marks TO claim_admin;
SELECT pg_catalog.pg_extension_config_dump('claim.token_marks', '');

CREATE FUNCTION claim._follow_copy()
RETURNS trigger
LANGUAGE c VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'pgclaim_follow_copy';
REVOKE EXECUTE ON FUNCTION claim._follow_copy() FROM PUBLIC;

CREATE TRIGGER follow_copy BEFORE INSERT ON claim.items
    FOR EACH ROW EXECUTE FUNCTION claim._follow_copy('id', 'item_id_seq');
ALTER TABLE claim.items ENABLE REPLICA TRIGGER follow_copy;
CREATE TRIGGER follow_copy BEFORE INSERT ON claim.item_parents
    FOR EACH ROW EXECUTE FUNCTION claim._follow_copy('parent_id', 'item_id_seq', 'child_id', 'item_id_seq');
ALTER TABLE claim.item_parents ENABLE REPLICA TRIGGER follow_copy;
-- The partitions of claim.finished (a subscription applies rows to them).
CREATE TRIGGER follow_copy BEFORE INSERT ON claim.finished_0
    FOR EACH ROW EXECUTE FUNCTION claim._follow_copy('id', 'item_id_seq');
ALTER TABLE claim.finished_0 ENABLE REPLICA TRIGGER follow_copy;
CREATE TRIGGER follow_copy BEFORE INSERT ON claim.finished_1
    FOR EACH ROW EXECUTE FUNCTION claim._follow_copy('id', 'item_id_seq');
ALTER TABLE claim.finished_1 ENABLE REPLICA TRIGGER follow_copy;
CREATE TRIGGER follow_copy BEFORE INSERT ON claim.finished_2
    FOR EACH ROW EXECUTE FUNCTION claim._follow_copy('id', 'item_id_seq');
ALTER TABLE claim.finished_2 ENABLE REPLICA TRIGGER follow_copy;
CREATE TRIGGER follow_copy BEFORE INSERT ON claim.finished_3
    FOR EACH ROW EXECUTE FUNCTION claim._follow_copy('id', 'item_id_seq');
ALTER TABLE claim.finished_3 ENABLE REPLICA TRIGGER follow_copy;
CREATE TRIGGER follow_copy BEFORE INSERT ON claim.queues
    FOR EACH ROW EXECUTE FUNCTION claim._follow_copy('queue_id', 'queues_queue_id_seq');
ALTER TABLE claim.queues ENABLE REPLICA TRIGGER follow_copy;
CREATE TRIGGER follow_copy BEFORE INSERT OR UPDATE ON claim.schedule_defs
    FOR EACH ROW EXECUTE FUNCTION claim._follow_copy('schedule_id', 'schedule_defs_schedule_id_seq',
                                                     'last_item', 'item_id_seq');
ALTER TABLE claim.schedule_defs ENABLE REPLICA TRIGGER follow_copy;
CREATE TRIGGER follow_copy BEFORE INSERT ON claim.fair_keys
    FOR EACH ROW EXECUTE FUNCTION claim._follow_copy('key_id', 'fair_key_seq');
ALTER TABLE claim.fair_keys ENABLE REPLICA TRIGGER follow_copy;
CREATE TRIGGER follow_copy BEFORE INSERT OR UPDATE ON claim.lease_holders
    FOR EACH ROW EXECUTE FUNCTION claim._follow_copy('token', 'token_seq');
ALTER TABLE claim.lease_holders ENABLE REPLICA TRIGGER follow_copy;
CREATE TRIGGER follow_copy BEFORE INSERT OR UPDATE ON claim.guards
    FOR EACH ROW EXECUTE FUNCTION claim._follow_copy('token', 'token_seq');
ALTER TABLE claim.guards ENABLE REPLICA TRIGGER follow_copy;
CREATE TRIGGER follow_copy BEFORE INSERT OR UPDATE ON claim.token_marks
    FOR EACH ROW EXECUTE FUNCTION claim._follow_copy('ceiling', 'token_seq');
ALTER TABLE claim.token_marks ENABLE REPLICA TRIGGER follow_copy;

-- ===========================================================================
-- Durable steps (docs/steps.md): checkpoints per (item, step), durable
-- sleep, events, children
-- ===========================================================================

-- Checkpoints: one row per finished step of a run (an item). No foreign key
-- to claim.items (it would take completions off their direct path): the
-- database's worker deletes the checkpoints of items that are gone and not
-- kept in the history of a queue that retains them (src/pg/steps_store.cpp).
-- output is JSON null when the step gave none, so SQL NULL from claim.step
-- always means "not done". token: the claim that recorded it (NULL for an
-- event delivered by claim.emit_event).
CREATE TABLE claim.steps (
    item_id   bigint NOT NULL,
    step      text COLLATE "C" NOT NULL,
    queue_id  integer NOT NULL,
    output    jsonb NOT NULL,
    token     bigint,
    done_at   timestamptz NOT NULL,
    CONSTRAINT steps_pkey PRIMARY KEY (item_id, step)
);

-- Events: emitted once (the first emit wins), remembered for 7 days for
-- waiters that come later (the worker deletes older ones).
CREATE TABLE claim.events (
    event       text COLLATE "C" NOT NULL,
    payload     jsonb NOT NULL,
    emitted_at  timestamptz NOT NULL,
    CONSTRAINT events_pkey PRIMARY KEY (event)
);
CREATE INDEX events_emitted ON claim.events (emitted_at);

-- Runs parked in claim.await_event: until when (the item's run_at).
CREATE TABLE claim.event_waits (
    item_id  bigint NOT NULL,
    event    text COLLATE "C" NOT NULL,
    since    timestamptz NOT NULL,
    until    timestamptz NOT NULL,
    CONSTRAINT event_waits_pkey PRIMARY KEY (item_id, event)
);
CREATE INDEX event_waits_event ON claim.event_waits (event);

CREATE FUNCTION claim._steps_wake(queue_id integer, at timestamptz)
RETURNS void
LANGUAGE c VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'pgclaim_steps_wake';

CREATE FUNCTION claim._steps_wait_children(item bigint, children bigint[])
RETURNS integer
LANGUAGE c VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'pgclaim_steps_wait_children';

-- The claim of `token`: PC001 unless it is live; its item is locked until
-- the transaction ends (claim.assert_token), so no other claim of the item
-- can begin meanwhile. Durable steps need a token of one item.
CREATE FUNCTION claim._steps_claim(token bigint, OUT item_id bigint, OUT queue_id integer,
                                   OUT attempt integer)
RETURNS record
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    n bigint;
BEGIN
    IF token IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'null_value_not_allowed',
            MESSAGE = 'token must not be NULL',
            HINT = 'Give the token that claim_next returned with the item.';
    END IF;
    PERFORM claim.assert_token(token);
    SELECT pg_catalog.count(*), pg_catalog.min(c.item_id), pg_catalog.min(c.queue_id),
           pg_catalog.min(c.attempt)
      INTO n, item_id, queue_id, attempt
      FROM claim.claims c WHERE c.token OPERATOR(pg_catalog.=) _steps_claim.token;
    IF n OPERATOR(pg_catalog.<>) 1 THEN
        RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
            MESSAGE = pg_catalog.format('token %s holds %s items; durable steps need the token of one item', token, n),
            HINT = 'Claim runs with claim_next (one token per item), not group_claim.';
    END IF;
END
$$;

-- Ends the attempt of the item (claimed as `attempt`) without counting it:
-- its claim goes (the token is stale from now on) and it is delivered again
-- at `at` (at once when `at` is past or NULL) as attempt `attempt` again.
CREATE FUNCTION claim._steps_park(item bigint, queue_id integer, attempt integer, at timestamptz)
RETURNS void
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF at OPERATOR(pg_catalog.<=) pg_catalog.clock_timestamp() THEN
        at := NULL;
    END IF;
    DELETE FROM claim.claims c WHERE c.item_id OPERATOR(pg_catalog.=) item;
    UPDATE claim.items i SET failures = attempt OPERATOR(pg_catalog.-) 1, run_at = at
     WHERE i.id OPERATOR(pg_catalog.=) item;
    PERFORM claim._steps_wake(queue_id, at);
END
$$;

-- claim.step(token, step) -> jsonb: the recorded output of the step in the
-- run of the item held under `token` (JSON null when it recorded none), or
-- SQL NULL while the step has not finished.
CREATE FUNCTION claim.step(token bigint, step text)
RETURNS jsonb
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    c record;
    out jsonb;
BEGIN
    IF step IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'null_value_not_allowed', MESSAGE = 'step must not be NULL';
    END IF;
    c := claim._steps_claim(token);
    SELECT s.output INTO out FROM claim.steps s
     WHERE s.item_id OPERATOR(pg_catalog.=) c.item_id AND s.step OPERATOR(pg_catalog.=) step.step;
    RETURN out;
END
$$;

-- claim.step_done(token, step, output) -> void: records the step; the first
-- record wins (a later one changes nothing). PC001 for a stale token.
CREATE FUNCTION claim.step_done(token bigint, step text, output jsonb DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    c record;
BEGIN
    IF step IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'null_value_not_allowed', MESSAGE = 'step must not be NULL';
    END IF;
    c := claim._steps_claim(token);
    INSERT INTO claim.steps (item_id, step, queue_id, output, token, done_at)
    VALUES (c.item_id, step_done.step, c.queue_id, COALESCE(step_done.output, 'null'::jsonb),
            step_done.token, pg_catalog.clock_timestamp())
    ON CONFLICT ON CONSTRAINT steps_pkey DO NOTHING;
END
$$;

-- claim.sleep(token, until) and claim.sleep_for(token, delay): end the
-- attempt without counting it; the item is delivered again, with its
-- steps, at `until` (after `delay`) under a new token. Two names, because
-- one name with a timestamptz and an interval form would be ambiguous for
-- an untyped parameter (claim.sleep($1, $2)).
CREATE FUNCTION claim.sleep(token bigint, until timestamptz)
RETURNS void
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    c record;
BEGIN
    IF until IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'null_value_not_allowed', MESSAGE = 'until must not be NULL';
    END IF;
    IF NOT pg_catalog.isfinite(until) THEN
        RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
            MESSAGE = 'until must be a finite timestamp';
    END IF;
    c := claim._steps_claim(token);
    PERFORM claim._steps_park(c.item_id, c.queue_id, c.attempt, until);
END
$$;

CREATE FUNCTION claim.sleep_for(token bigint, delay interval)
RETURNS void
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF delay IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'null_value_not_allowed', MESSAGE = 'delay must not be NULL';
    END IF;
    IF delay OPERATOR(pg_catalog.<) interval '0' OR NOT pg_catalog.isfinite(delay) THEN
        RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
            MESSAGE = pg_catalog.format('delay %s is negative or infinite', delay);
    END IF;
    PERFORM claim.sleep(token, pg_catalog.clock_timestamp() OPERATOR(pg_catalog.+) delay);
END
$$;

-- claim.await_event(token, event, timeout) -> jsonb: the event's payload
-- when it was emitted (or delivered to this run before: the run keeps it as
-- its step '$event:<event>'). Otherwise the item is parked, not counted as
-- an attempt, until the event or the timeout, and SQL NULL is returned: the
-- caller stops (its token is stale) and commits. Delivered again after the
-- timeout without the event, it raises PC010 at every call.
-- The event's lock (a transaction-level advisory lock keyed by claim.events'
-- oid and the name's hash) orders a wait and an emit of one event, so that
-- the one that commits second sees the other.
CREATE FUNCTION claim.await_event(token bigint, event text, timeout interval DEFAULT '1 day')
RETURNS jsonb
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    c record;
    p jsonb;
    w timestamptz;
    key text;
BEGIN
    IF event IS NULL OR timeout IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'null_value_not_allowed',
            MESSAGE = 'event and timeout must not be NULL';
    END IF;
    IF timeout OPERATOR(pg_catalog.<) interval '0' OR NOT pg_catalog.isfinite(timeout) THEN
        RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
            MESSAGE = pg_catalog.format('timeout %s is negative or infinite', timeout);
    END IF;
    c := claim._steps_claim(token);
    key := '$event:' OPERATOR(pg_catalog.||) event;
    PERFORM pg_catalog.pg_advisory_xact_lock('claim.events'::pg_catalog.regclass::pg_catalog.oid::integer,
                                             pg_catalog.hashtext(event));
    SELECT s.output INTO p FROM claim.steps s
     WHERE s.item_id OPERATOR(pg_catalog.=) c.item_id AND s.step OPERATOR(pg_catalog.=) key;
    IF FOUND THEN
        RETURN p;
    END IF;
    SELECT e.payload INTO p FROM claim.events e WHERE e.event OPERATOR(pg_catalog.=) await_event.event;
    IF FOUND THEN
        DELETE FROM claim.event_waits x
         WHERE x.item_id OPERATOR(pg_catalog.=) c.item_id AND x.event OPERATOR(pg_catalog.=) await_event.event;
        INSERT INTO claim.steps (item_id, step, queue_id, output, token, done_at)
        VALUES (c.item_id, key, c.queue_id, p, token, pg_catalog.clock_timestamp())
        ON CONFLICT ON CONSTRAINT steps_pkey DO NOTHING;
        RETURN p;
    END IF;
    SELECT x.until INTO w FROM claim.event_waits x
     WHERE x.item_id OPERATOR(pg_catalog.=) c.item_id AND x.event OPERATOR(pg_catalog.=) await_event.event;
    IF FOUND AND w OPERATOR(pg_catalog.<=) pg_catalog.clock_timestamp() THEN
        RAISE EXCEPTION USING ERRCODE = 'PC010',
            MESSAGE = pg_catalog.format('event "%s" was not emitted before the wait ended at %s', event, w),
            HINT = 'The run waited for it in an earlier attempt; every later call of await_event for it in this run raises this. Handle it (fail, complete, or wait for another event).';
    END IF;
    IF NOT FOUND THEN
        w := pg_catalog.clock_timestamp() OPERATOR(pg_catalog.+) timeout;
        INSERT INTO claim.event_waits (item_id, event, since, until)
        VALUES (c.item_id, event, pg_catalog.clock_timestamp(), w);
    END IF;
    PERFORM claim._steps_park(c.item_id, c.queue_id, c.attempt, w);
    RETURN NULL;
END
$$;

-- claim.emit_event(event, payload) -> boolean: emits the event (true), or
-- finds it emitted already and changes nothing (false). Runs parked on it
-- get the payload as their step '$event:<event>' and are ready again when
-- this transaction commits.
CREATE FUNCTION claim.emit_event(event text, payload jsonb DEFAULT NULL)
RETURNS boolean
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    n bigint;
    q integer;
    p jsonb := COALESCE(payload, 'null'::jsonb);
    at_time timestamptz := pg_catalog.clock_timestamp();
BEGIN
    IF pg_catalog.pg_is_in_recovery() THEN
        RAISE EXCEPTION USING ERRCODE = 'read_only_sql_transaction',
            MESSAGE = 'cannot call claim.emit_event() on a hot standby',
            HINT = 'Connect to the primary: claims, tokens and leases are written there.';
    END IF;
    IF event IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'null_value_not_allowed', MESSAGE = 'event must not be NULL';
    END IF;
    PERFORM pg_catalog.pg_advisory_xact_lock('claim.events'::pg_catalog.regclass::pg_catalog.oid::integer,
                                             pg_catalog.hashtext(event));
    -- An event past its retention that the worker has not deleted yet is
    -- emitted again.
    DELETE FROM claim.events e WHERE e.event OPERATOR(pg_catalog.=) emit_event.event
       AND e.emitted_at OPERATOR(pg_catalog.<) (at_time OPERATOR(pg_catalog.-) interval '7 days');
    INSERT INTO claim.events (event, payload, emitted_at) VALUES (event, p, at_time)
    ON CONFLICT ON CONSTRAINT events_pkey DO NOTHING;
    GET DIAGNOSTICS n = ROW_COUNT;
    IF n OPERATOR(pg_catalog.=) 0 THEN
        RETURN false;
    END IF;
    FOR q IN
        WITH w AS (DELETE FROM claim.event_waits x WHERE x.event OPERATOR(pg_catalog.=) emit_event.event
                   RETURNING x.item_id),
             s AS (INSERT INTO claim.steps (item_id, step, queue_id, output, token, done_at)
                   SELECT i.id, '$event:' OPERATOR(pg_catalog.||) event, i.queue_id, p, NULL, at_time
                     FROM w JOIN claim.items i ON i.id OPERATOR(pg_catalog.=) w.item_id
                   ON CONFLICT ON CONSTRAINT steps_pkey DO NOTHING),
             u AS (UPDATE claim.items i SET run_at = NULL FROM w
                   WHERE i.id OPERATOR(pg_catalog.=) w.item_id AND i.state OPERATOR(pg_catalog.=) 'r'
                     AND i.run_at IS NOT NULL
                     AND NOT EXISTS (SELECT 1 FROM claim.claims c WHERE c.item_id OPERATOR(pg_catalog.=) i.id)
                   RETURNING i.queue_id)
        SELECT DISTINCT u.queue_id FROM u
    LOOP
        PERFORM claim._steps_wake(q, NULL);
    END LOOP;
    RETURN true;
END
$$;

-- claim.await_children(token, children) -> jsonb: fan-in. When every item
-- of `children` has completed, a JSON array of their results in the order
-- given (JSON null for a child whose queue does not retain results, or
-- whose retention ended). Otherwise the run waits for them as an item
-- waits for its `after` list (state 'waiting', not counted as an attempt,
-- no worker held), and SQL NULL is returned: the caller stops and commits;
-- the run is delivered again when the last child completes. PC011 when a
-- child ended dead or cancelled (while the run waits, such a child ends
-- the run the same way, as `after` does).
CREATE FUNCTION claim.await_children(token bigint, children bigint[])
RETURNS jsonb
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    c record;
    unfinished integer;
BEGIN
    IF children IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'null_value_not_allowed', MESSAGE = 'children must not be NULL';
    END IF;
    c := claim._steps_claim(token);
    IF c.item_id OPERATOR(pg_catalog.=) ANY (children) OR EXISTS (
        WITH RECURSIVE d(id) AS (
            SELECT p.child_id FROM claim.item_parents p WHERE p.parent_id OPERATOR(pg_catalog.=) c.item_id
            UNION
            SELECT p.child_id FROM claim.item_parents p JOIN d ON p.parent_id OPERATOR(pg_catalog.=) d.id)
        SELECT 1 FROM d WHERE d.id OPERATOR(pg_catalog.=) ANY (children)) THEN
        RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
            MESSAGE = pg_catalog.format('item %s cannot wait for itself or for an item that waits for it', c.item_id),
            HINT = 'List the children the run enqueued.';
    END IF;
    -- A waiting item is outside the unique index of dedup keys: another item
    -- could take the key meanwhile (the reason enqueue refuses dedup_key
    -- with after).
    IF EXISTS (SELECT 1 FROM claim.items i
                WHERE i.id OPERATOR(pg_catalog.=) c.item_id AND i.dedup_key IS NOT NULL) THEN
        RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
            MESSAGE = pg_catalog.format('item %s has a dedup_key: it cannot wait for children', c.item_id),
            HINT = 'Enqueue runs that fan out without dedup_key, as enqueue refuses dedup_key with after.';
    END IF;
    unfinished := claim._steps_wait_children(c.item_id, children);
    IF unfinished OPERATOR(pg_catalog.>) 0 THEN
        DELETE FROM claim.claims x WHERE x.item_id OPERATOR(pg_catalog.=) c.item_id;
        UPDATE claim.items i SET failures = c.attempt OPERATOR(pg_catalog.-) 1, run_at = NULL, state = 'w'
         WHERE i.id OPERATOR(pg_catalog.=) c.item_id;
        RETURN NULL;
    END IF;
    RETURN (SELECT COALESCE(pg_catalog.jsonb_agg(r.result ORDER BY k.o), '[]'::jsonb)
              FROM unnest(children) WITH ORDINALITY AS k(id, o)
              LEFT JOIN LATERAL (
                  SELECT f.result FROM claim.finished f JOIN claim.queues q ON q.queue_id OPERATOR(pg_catalog.=) f.queue_id
                   WHERE f.id OPERATOR(pg_catalog.=) k.id AND f.state OPERATOR(pg_catalog.=) 'c'
                     AND f.finished_at OPERATOR(pg_catalog.+) q.retain OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp()
                   LIMIT 1) r ON true);
END
$$;

-- The checkpoints of the runs that are still there: unfinished, waiting,
-- dead, or finished and retained.
CREATE VIEW claim.item_steps AS
SELECT q.name AS queue, s.item_id AS id, s.step, s.output, s.token, s.done_at
FROM claim.steps s
JOIN claim.queues q ON q.queue_id OPERATOR(pg_catalog.=) s.queue_id
WHERE EXISTS (SELECT 1 FROM claim.items i WHERE i.id OPERATOR(pg_catalog.=) s.item_id)
   OR EXISTS (SELECT 1 FROM claim.finished f
              WHERE f.id OPERATOR(pg_catalog.=) s.item_id
                AND f.finished_at OPERATOR(pg_catalog.+) q.retain OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp());

REVOKE ALL ON claim.steps, claim.events, claim.event_waits, claim.item_steps FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION claim._steps_wake(integer, timestamptz), claim._steps_wait_children(bigint, bigint[]),
    claim._steps_claim(bigint), claim._steps_park(bigint, integer, integer, timestamptz),
    claim.step(bigint, text), claim.step_done(bigint, text, jsonb),
    claim.sleep(bigint, timestamptz), claim.sleep_for(bigint, interval),
    claim.await_event(bigint, text, interval), claim.emit_event(text, jsonb),
    claim.await_children(bigint, bigint[]) FROM PUBLIC;
GRANT SELECT, INSERT, UPDATE, DELETE ON claim.steps, claim.events, claim.event_waits TO claim_worker;
GRANT SELECT ON claim.item_steps TO claim_worker, claim_producer;
GRANT SELECT ON claim.steps TO claim_producer;
GRANT INSERT ON claim.item_parents TO claim_worker;
GRANT EXECUTE ON FUNCTION claim._steps_wake(integer, timestamptz), claim._steps_wait_children(bigint, bigint[]),
    claim._steps_claim(bigint), claim._steps_park(bigint, integer, integer, timestamptz),
    claim.step(bigint, text), claim.step_done(bigint, text, jsonb),
    claim.sleep(bigint, timestamptz), claim.sleep_for(bigint, interval),
    claim.await_event(bigint, text, interval), claim.emit_event(text, jsonb),
    claim.await_children(bigint, bigint[]) TO claim_worker;
GRANT SELECT, INSERT, UPDATE, DELETE, TRUNCATE ON claim.steps, claim.events, claim.event_waits,
    claim.item_steps TO claim_admin;
GRANT EXECUTE ON FUNCTION claim._steps_wake(integer, timestamptz), claim._steps_wait_children(bigint, bigint[]),
    claim._steps_claim(bigint), claim._steps_park(bigint, integer, integer, timestamptz),
    claim.step(bigint, text), claim.step_done(bigint, text, jsonb),
    claim.sleep(bigint, timestamptz), claim.sleep_for(bigint, interval),
    claim.await_event(bigint, text, interval), claim.emit_event(text, jsonb),
    claim.await_children(bigint, bigint[]) TO claim_admin;

-- pg_dump keeps the checkpoints, the events and the waits (docs/operations.md).
SELECT pg_catalog.pg_extension_config_dump('claim.steps', '');
SELECT pg_catalog.pg_extension_config_dump('claim.events', '');
SELECT pg_catalog.pg_extension_config_dump('claim.event_waits', '');

-- claim.item_state shows a run's checkpoints: {step: output}, NULL when it
-- has none.
ALTER TYPE claim.item_status ADD ATTRIBUTE steps jsonb;
