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

-- ===========================================================================
-- The coordination service (docs/coordination.md): sessions and their
-- leases, leader election, barriers, latches and a revisioned watch.
-- claim.session_open, session_keepalive, session_close, session_lease,
-- session_claim, session_group_claim, view
-- claim.sessions; claim.elect, leader, resign; claim.barrier; claim.latch,
-- count_down, latch_wait; claim.watch, claim.revision. Waits sleep in the server through claim._coord_wait and
-- are woken at commit by claim._coord_wake (src/api/coordination.cpp); the
-- database's worker ends expired sessions and trims the watch log
-- (claim._coord_maintain). Every check of a session's or a leader's time
-- compares with clock_timestamp(): nothing outlives its TTL on the server
-- clock, whether or not the worker has run.
-- ===========================================================================

CREATE FUNCTION claim._coord_token()
RETURNS bigint
LANGUAGE c VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'pgclaim_coord_token';

CREATE FUNCTION claim._coord_wait(key bigint, wait_ms bigint)
RETURNS boolean
LANGUAGE c VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'pgclaim_coord_wait';

CREATE FUNCTION claim._coord_wake(key bigint)
RETURNS void
LANGUAGE c VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'pgclaim_coord_wake';

-- The wait key of a name of a kind ('leader', 'latch', 'watch').
CREATE FUNCTION claim._coord_key(kind text, name text)
RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$ SELECT pg_catalog.hashtextextended(kind OPERATOR(pg_catalog.||) ':' OPERATOR(pg_catalog.||) name, 0) $$;

-- Sessions. A session is live while expires > clock_timestamp(); the worker
-- deletes expired ones (ending what they carried) and keepalive never
-- revives one.
CREATE TABLE claim.coord_sessions (
    session_id  bigint PRIMARY KEY,
    holder      text COLLATE "C",
    owner       name NOT NULL,
    ttl         interval NOT NULL,
    lock_delay  interval NOT NULL,
    started     timestamptz NOT NULL,
    expires     timestamptz NOT NULL
);
CREATE INDEX coord_sessions_expires ON claim.coord_sessions (expires);

-- Leaders: one row per election name; the leader is live while ended is
-- NULL and its TTL (until) or its session has not run out.
CREATE TABLE claim.coord_leaders (
    name           text COLLATE "C" PRIMARY KEY,
    holder         text COLLATE "C",
    epoch          bigint NOT NULL,
    since          timestamptz NOT NULL,
    until          timestamptz,
    session_id     bigint,
    ended          timestamptz,
    blocked_until  timestamptz
);
CREATE INDEX coord_leaders_session ON claim.coord_leaders (session_id) WHERE session_id IS NOT NULL;

-- Leases and claims attached to a session (claim.session_lease,
-- claim.session_claim): renewed by its keepalives, released when it is
-- closed. kind 'lease' (name: the lease) or 'claim' (name: the queue).
CREATE TABLE claim.coord_attached (
    session_id  bigint NOT NULL,
    token       bigint NOT NULL,
    kind        text NOT NULL CHECK (kind IN ('lease', 'claim')),
    name        text COLLATE "C" NOT NULL,
    PRIMARY KEY (session_id, token)
);

-- Latches: count_down until zero.
CREATE TABLE claim.coord_latches (
    name     text COLLATE "C" PRIMARY KEY,
    count    integer NOT NULL,
    created  timestamptz NOT NULL
);

-- The watch log. A change takes the next value of claim.coord_revision_seq
-- while it holds claim.coord_changes in SHARE ROW EXCLUSIVE mode, which it
-- keeps until it commits: revisions are committed in their order, so a
-- reader that saw revision r has seen every change committed before it (a
-- rolled-back change leaves its number unused). claim.coord_compacted_seq is
-- the last revision the worker deleted (pg_claim.watch_retention).
CREATE SEQUENCE claim.coord_revision_seq AS bigint MINVALUE 1 MAXVALUE 9007199254740991 NO CYCLE;
CREATE SEQUENCE claim.coord_compacted_seq AS bigint MINVALUE 0 MAXVALUE 9007199254740991 START 0 NO CYCLE;

CREATE TABLE claim.coord_changes (
    revision  bigint PRIMARY KEY,
    kind      text NOT NULL,
    name      text COLLATE "C" NOT NULL,
    event     text NOT NULL,
    token     bigint,
    holder    text COLLATE "C",
    at        timestamptz NOT NULL
);

-- The last revision compacted away (0: none).
CREATE FUNCTION claim._coord_compacted()
RETURNS bigint
LANGUAGE sql STABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$ SELECT CASE WHEN s.is_called THEN s.last_value ELSE 0 END FROM claim.coord_compacted_seq s $$;

-- Record a change (the caller checked it writes on a primary) and wake the
-- watchers at commit.
CREATE FUNCTION claim._coord_log(kind text, name text, event text, token bigint, holder text)
RETURNS bigint
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    rev bigint;
BEGIN
    LOCK TABLE claim.coord_changes IN SHARE ROW EXCLUSIVE MODE;
    rev := pg_catalog.nextval('claim.coord_revision_seq');
    INSERT INTO claim.coord_changes (revision, kind, name, event, token, holder, at)
    VALUES (rev, kind, COALESCE(name, ''), event, token, holder, pg_catalog.clock_timestamp());
    PERFORM claim._coord_wake(claim._coord_key('watch', ''));
    RETURN rev;
END
$$;

-- Whether pg_claim.watch_leases is on: then every grant, release and expiry
-- of a lease is recorded by the lease functions and the worker.
CREATE FUNCTION claim._coord_watch_leases()
RETURNS boolean
LANGUAGE sql STABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$ SELECT COALESCE(pg_catalog.current_setting('pg_claim.watch_leases', true), 'off') OPERATOR(pg_catalog.=) 'on' $$;

CREATE FUNCTION claim._coord_primary(fn text)
RETURNS void
LANGUAGE plpgsql VOLATILE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF pg_catalog.pg_is_in_recovery() THEN
        RAISE EXCEPTION USING ERRCODE = 'read_only_sql_transaction',
            MESSAGE = pg_catalog.format('cannot call %s on a hot standby', fn),
            HINT = 'Connect to the primary: sessions, leaders and latches are written there.';
    END IF;
    IF pg_catalog.current_setting('transaction_read_only') OPERATOR(pg_catalog.=) 'on' THEN
        RAISE EXCEPTION USING ERRCODE = 'read_only_sql_transaction',
            MESSAGE = pg_catalog.format('cannot call %s in a read-only transaction', fn);
    END IF;
END
$$;

-- A wait's length in milliseconds; 22023 for a negative one.
CREATE FUNCTION claim._coord_ms(d interval, what text)
RETURNS bigint
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF d IS NULL THEN RETURN 0; END IF;
    IF d OPERATOR(pg_catalog.<) '0'::interval OR d OPERATOR(pg_catalog.>) '1 day'::interval THEN
        RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
            MESSAGE = pg_catalog.format('%s must be between 0 and 1 day, not %s', what, d);
    END IF;
    RETURN pg_catalog.ceil(pg_catalog.date_part('epoch', d) OPERATOR(pg_catalog.*) 1000)::bigint;
END
$$;

-- The live session s (locked when lock), or PC001.
CREATE FUNCTION claim._coord_session(s bigint, fn text, take_lock boolean)
RETURNS claim.coord_sessions
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    r claim.coord_sessions;
BEGIN
    IF s IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'null_value_not_allowed',
            MESSAGE = pg_catalog.format('%s: session must not be NULL', fn);
    END IF;
    IF take_lock THEN
        SELECT * INTO r FROM claim.coord_sessions c
         WHERE c.session_id OPERATOR(pg_catalog.=) s FOR UPDATE;
    ELSE
        SELECT * INTO r FROM claim.coord_sessions c WHERE c.session_id OPERATOR(pg_catalog.=) s;
    END IF;
    IF r.session_id IS NULL OR r.expires OPERATOR(pg_catalog.<=) pg_catalog.clock_timestamp() THEN
        RAISE EXCEPTION USING ERRCODE = 'PC001',
            MESSAGE = pg_catalog.format('session %s has ended', s),
            DETAIL = 'It was closed, or no keepalive came within its ttl.',
            HINT = 'Open a new session; what the old one carried was released.';
    END IF;
    IF r.owner OPERATOR(pg_catalog.<>) CURRENT_USER
       AND NOT pg_catalog.pg_has_role(CURRENT_USER, 'claim_admin', 'MEMBER') THEN
        RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege',
            MESSAGE = pg_catalog.format('session %s belongs to role %s', s, r.owner),
            HINT = 'Only the role that opened a session (or a member of claim_admin) may use it.';
    END IF;
    RETURN r;
END
$$;

CREATE FUNCTION claim.session_open(ttl interval DEFAULT '10 seconds', holder text DEFAULT NULL,
                                   lock_delay interval DEFAULT '0')
RETURNS bigint
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    id bigint;
    now timestamptz;
BEGIN
    PERFORM claim._coord_primary('claim.session_open');
    IF ttl IS NULL OR ttl OPERATOR(pg_catalog.<=) '0'::interval OR ttl OPERATOR(pg_catalog.>) '1 day'::interval THEN
        RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
            MESSAGE = pg_catalog.format('ttl must be above 0 and at most 1 day, not %s', COALESCE(ttl::text, 'NULL'));
    END IF;
    IF lock_delay IS NULL OR lock_delay OPERATOR(pg_catalog.<) '0'::interval OR lock_delay OPERATOR(pg_catalog.>) '1 day'::interval THEN
        RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
            MESSAGE = pg_catalog.format('lock_delay must be between 0 and 1 day, not %s', COALESCE(lock_delay::text, 'NULL'));
    END IF;
    id := claim._coord_token();
    now := pg_catalog.clock_timestamp();
    INSERT INTO claim.coord_sessions (session_id, holder, owner, ttl, lock_delay, started, expires)
    VALUES (id, holder, CURRENT_USER, ttl, lock_delay, now, now OPERATOR(pg_catalog.+) ttl);
    PERFORM claim._coord_log('session', holder, 'opened', id, holder);
    RETURN id;
END
$$;

CREATE FUNCTION claim.session_keepalive(session bigint)
RETURNS timestamptz
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    r claim.coord_sessions;
    e timestamptz;
BEGIN
    PERFORM claim._coord_primary('claim.session_keepalive');
    r := claim._coord_session(session, 'claim.session_keepalive', true);
    UPDATE claim.coord_sessions c
       SET expires = pg_catalog.clock_timestamp() OPERATOR(pg_catalog.+) c.ttl
     WHERE c.session_id OPERATOR(pg_catalog.=) r.session_id
       AND c.expires OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp()
    RETURNING c.expires INTO e;
    IF e IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'PC001',
            MESSAGE = pg_catalog.format('session %s has ended', session),
            DETAIL = 'No keepalive came within its ttl.',
            HINT = 'Open a new session; what the old one carried was released.';
    END IF;
    -- Its leases: held until the new expiry + lock_delay.
    UPDATE claim.lease_holders h SET expires_at = e OPERATOR(pg_catalog.+) r.lock_delay
      FROM claim.coord_attached a
     WHERE a.session_id OPERATOR(pg_catalog.=) r.session_id AND a.kind OPERATOR(pg_catalog.=) 'lease'
       AND h.name OPERATOR(pg_catalog.=) a.name AND h.token OPERATOR(pg_catalog.=) a.token
       AND h.expires_at OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp();
    -- Its claims: until the new expiry.
    UPDATE claim.claims c SET lease_until = e
      FROM claim.coord_attached a
     WHERE a.session_id OPERATOR(pg_catalog.=) r.session_id AND a.kind OPERATOR(pg_catalog.=) 'claim'
       AND c.token OPERATOR(pg_catalog.=) a.token
       AND c.lease_until OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp();
    RETURN e;
END
$$;

-- End session r (closed: its leaders resign at once; expired: each of its
-- leaderships stays blocked until the session's expiry + lock_delay).
-- Returns how many leaderships it carried.
CREATE FUNCTION claim._coord_end_session(r claim.coord_sessions, expired boolean)
RETURNS integer
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    l record;
    n integer := 0;
    at timestamptz := CASE WHEN expired THEN r.expires ELSE pg_catalog.clock_timestamp() END;
BEGIN
    FOR l IN UPDATE claim.coord_leaders c
                SET ended = at,
                    blocked_until = CASE WHEN expired THEN r.expires OPERATOR(pg_catalog.+) r.lock_delay END
              WHERE c.session_id OPERATOR(pg_catalog.=) r.session_id AND c.ended IS NULL
          RETURNING c.name, c.epoch, c.holder
    LOOP
        n := n OPERATOR(pg_catalog.+) 1;
        PERFORM claim._coord_log('leader', l.name, CASE WHEN expired THEN 'expired' ELSE 'resigned' END,
                                 l.epoch, l.holder);
        PERFORM claim._coord_wake(claim._coord_key('leader', l.name));
    END LOOP;
    -- Its leases: released at once when it is closed; when it expired they
    -- stay held until its expiry + lock_delay (its claims ran out with it).
    -- Each lease it still held is recorded in the watch: 'released' or
    -- 'expired' (held on for lock_delay). With pg_claim.watch_leases on, the
    -- release records itself, and the expiry is recorded when the lease ends
    -- (by the worker, or by the grant that takes it over).
    FOR l IN SELECT a.name, a.token, h.holder FROM claim.coord_attached a
               JOIN claim.lease_holders h ON h.name OPERATOR(pg_catalog.=) a.name
                                         AND h.token OPERATOR(pg_catalog.=) a.token
              WHERE a.session_id OPERATOR(pg_catalog.=) r.session_id AND a.kind OPERATOR(pg_catalog.=) 'lease'
              ORDER BY a.token
    LOOP
        IF NOT expired THEN
            IF claim.lease_release(l.name, l.token) THEN
                n := n OPERATOR(pg_catalog.+) 1;
                IF NOT claim._coord_watch_leases() THEN
                    PERFORM claim._coord_log('lease', l.name, 'released', l.token, l.holder);
                END IF;
            END IF;
        ELSIF NOT claim._coord_watch_leases() AND NOT EXISTS (SELECT FROM claim.lease_released x
                           WHERE x.name OPERATOR(pg_catalog.=) l.name AND x.token OPERATOR(pg_catalog.=) l.token) THEN
            PERFORM claim._coord_log('lease', l.name, 'expired', l.token, l.holder);
        END IF;
    END LOOP;
    IF NOT expired THEN
        -- its live claims: given back without using up an attempt
        -- (one token may hold several items: a group_claim)
        SELECT n OPERATOR(pg_catalog.+) COALESCE(pg_catalog.sum(claim.release(a.token)), 0)::integer
          INTO n FROM claim.coord_attached a
         WHERE a.session_id OPERATOR(pg_catalog.=) r.session_id AND a.kind OPERATOR(pg_catalog.=) 'claim'
           AND EXISTS (SELECT FROM claim.claims c WHERE c.token OPERATOR(pg_catalog.=) a.token
                         AND c.lease_until OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp());
    END IF;
    DELETE FROM claim.coord_attached a WHERE a.session_id OPERATOR(pg_catalog.=) r.session_id;
    DELETE FROM claim.coord_sessions c WHERE c.session_id OPERATOR(pg_catalog.=) r.session_id;
    PERFORM claim._coord_log('session', r.holder, CASE WHEN expired THEN 'expired' ELSE 'closed' END,
                             r.session_id, r.holder);
    RETURN n;
END
$$;

CREATE FUNCTION claim.session_close(session bigint)
RETURNS integer
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM claim._coord_primary('claim.session_close');
    RETURN claim._coord_end_session(claim._coord_session(session, 'claim.session_close', true), false);
END
$$;

-- How many live claims a session carries; NULL on a hot standby (claims
-- are not replicated). PL/pgSQL: the unlogged claim.claims is planned only
-- where the query runs.
CREATE FUNCTION claim._coord_session_claims(session bigint)
RETURNS bigint
LANGUAGE plpgsql STABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF pg_catalog.pg_is_in_recovery() THEN RETURN NULL; END IF;
    RETURN (SELECT pg_catalog.count(*) FROM claim.coord_attached a
              JOIN claim.claims c ON c.token OPERATOR(pg_catalog.=) a.token
             WHERE a.session_id OPERATOR(pg_catalog.=) session AND a.kind OPERATOR(pg_catalog.=) 'claim'
               AND c.lease_until OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp());
END
$$;
REVOKE EXECUTE ON FUNCTION claim._coord_session_claims(bigint) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION claim._coord_session_claims(bigint) TO claim_worker, claim_admin;

CREATE VIEW claim.sessions AS
SELECT s.session_id AS session, s.holder, s.owner, s.started, s.expires, s.ttl, s.lock_delay,
       (SELECT pg_catalog.array_agg(l.name ORDER BY l.name) FROM claim.coord_leaders l
         WHERE l.session_id OPERATOR(pg_catalog.=) s.session_id AND l.ended IS NULL) AS leads,
       (SELECT pg_catalog.array_agg(a.name ORDER BY a.name) FROM claim.coord_attached a
          JOIN claim.lease_holders h ON h.name OPERATOR(pg_catalog.=) a.name
                                    AND h.token OPERATOR(pg_catalog.=) a.token
         WHERE a.session_id OPERATOR(pg_catalog.=) s.session_id AND a.kind OPERATOR(pg_catalog.=) 'lease'
           AND h.expires_at OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp()) AS leases,
       claim._coord_session_claims(s.session_id) AS claims
FROM claim.coord_sessions s
WHERE s.expires OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp();
COMMENT ON VIEW claim.sessions IS
    'Live sessions of the coordination service, the elections each one leads, the leases and the number of claims attached to it.';

-- Leader election.
CREATE FUNCTION claim._coord_live_until(l claim.coord_leaders)
RETURNS timestamptz
LANGUAGE sql STABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT CASE WHEN l.ended IS NOT NULL THEN NULL
                WHEN l.session_id IS NULL THEN l.until
                ELSE (SELECT s.expires FROM claim.coord_sessions s
                       WHERE s.session_id OPERATOR(pg_catalog.=) l.session_id) END
$$;

CREATE FUNCTION claim.leader(name text,
                             OUT holder text, OUT epoch bigint, OUT since timestamptz, OUT until timestamptz)
RETURNS SETOF record
LANGUAGE sql STABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT l.holder, l.epoch, l.since, claim._coord_live_until(l)
      FROM claim.coord_leaders l
     WHERE l.name OPERATOR(pg_catalog.=) leader.name
       AND claim._coord_live_until(l) OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp()
$$;

CREATE FUNCTION claim.elect(name text, ttl interval DEFAULT NULL, session bigint DEFAULT NULL,
                            holder text DEFAULT NULL, wait interval DEFAULT '0')
RETURNS bigint
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    deadline timestamptz;
    s claim.coord_sessions;
    l claim.coord_leaders;
    who text := holder;
    live timestamptz;
    free_at timestamptz;
    now timestamptz;
    ep bigint;
    ms bigint;
    key bigint;
BEGIN
    PERFORM claim._coord_primary('claim.elect');
    IF name IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'null_value_not_allowed', MESSAGE = 'claim.elect: name must not be NULL';
    END IF;
    IF pg_catalog.octet_length(name) OPERATOR(pg_catalog.>) 1024 THEN
        RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
            MESSAGE = 'claim.elect: name is too long: the maximum is 1024 bytes';
    END IF;
    IF (ttl IS NULL) OPERATOR(pg_catalog.=) (session IS NULL) THEN
        RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
            MESSAGE = 'claim.elect takes either a ttl or a session',
            HINT = 'A leader lives for its ttl, or as long as its session.';
    END IF;
    IF ttl IS NOT NULL AND (ttl OPERATOR(pg_catalog.<=) '0'::interval OR ttl OPERATOR(pg_catalog.>) '1 day'::interval) THEN
        RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
            MESSAGE = pg_catalog.format('ttl must be above 0 and at most 1 day, not %s', ttl);
    END IF;
    deadline := pg_catalog.clock_timestamp() OPERATOR(pg_catalog.+)
                pg_catalog.make_interval(secs => claim._coord_ms(wait, 'wait') OPERATOR(pg_catalog./) 1000.0);
    key := claim._coord_key('leader', name);
    LOOP
        IF session IS NOT NULL THEN
            s := claim._coord_session(session, 'claim.elect', false);
            who := COALESCE(holder, s.holder);
        END IF;
        now := pg_catalog.clock_timestamp();
        SELECT * INTO l FROM claim.coord_leaders c WHERE c.name OPERATOR(pg_catalog.=) elect.name;
        IF l.name IS NULL THEN
            ep := claim._coord_token();
            INSERT INTO claim.coord_leaders AS c (name, holder, epoch, since, until, session_id)
            VALUES (name, who, ep, now, now OPERATOR(pg_catalog.+) ttl, session)
            ON CONFLICT DO NOTHING RETURNING c.epoch INTO ep;
            IF FOUND THEN
                PERFORM claim._coord_log('leader', name, 'elected', ep, who);
                RETURN ep;
            END IF;
            CONTINUE;  -- another candidate inserted first: look again
        END IF;
        live := claim._coord_live_until(l);
        IF live OPERATOR(pg_catalog.>) now THEN
            -- Already the leader: a session's leadership stays; a ttl
            -- leader of the same holder is renewed.
            IF session IS NOT NULL AND l.session_id OPERATOR(pg_catalog.=) session THEN
                RETURN l.epoch;
            END IF;
            IF session IS NULL AND l.session_id IS NULL AND who IS NOT NULL
               AND l.holder OPERATOR(pg_catalog.=) who THEN
                UPDATE claim.coord_leaders c SET until = now OPERATOR(pg_catalog.+) ttl
                 WHERE c.name OPERATOR(pg_catalog.=) l.name AND c.epoch OPERATOR(pg_catalog.=) l.epoch
                   AND c.ended IS NULL;
                IF FOUND THEN RETURN l.epoch; END IF;
                CONTINUE;
            END IF;
            free_at := live;
        ELSIF l.ended IS NULL AND l.session_id IS NOT NULL
              AND (SELECT s2.expires OPERATOR(pg_catalog.+) s2.lock_delay FROM claim.coord_sessions s2
                    WHERE s2.session_id OPERATOR(pg_catalog.=) l.session_id) OPERATOR(pg_catalog.>) now THEN
            -- lock_delay of a session that expired, the worker not having
            -- ended it yet
            SELECT s2.expires OPERATOR(pg_catalog.+) s2.lock_delay INTO free_at FROM claim.coord_sessions s2
             WHERE s2.session_id OPERATOR(pg_catalog.=) l.session_id;
        ELSIF l.blocked_until IS NOT NULL AND l.blocked_until OPERATOR(pg_catalog.>) now THEN
            free_at := l.blocked_until;  -- lock_delay of a session that expired
        ELSE
            ep := claim._coord_token();
            UPDATE claim.coord_leaders c
               SET holder = who, epoch = ep, since = now, until = now OPERATOR(pg_catalog.+) ttl,
                   session_id = session, ended = NULL, blocked_until = NULL
             WHERE c.name OPERATOR(pg_catalog.=) l.name AND c.epoch OPERATOR(pg_catalog.=) l.epoch;
            IF FOUND THEN
                IF l.ended IS NULL THEN  -- its time ran out, nobody recorded it yet
                    PERFORM claim._coord_log('leader', name, 'expired', l.epoch, l.holder);
                END IF;
                PERFORM claim._coord_log('leader', name, 'elected', ep, who);
                RETURN ep;
            END IF;
            CONTINUE;  -- another candidate won it first: look again
        END IF;
        -- Wait until woken (a resignation, a session's end) or the leader's
        -- time runs out, at most until the deadline.
        ms := pg_catalog.ceil(pg_catalog.date_part('epoch',
                  LEAST(deadline, free_at) OPERATOR(pg_catalog.-) pg_catalog.clock_timestamp())
                  OPERATOR(pg_catalog.*) 1000)::bigint;
        IF pg_catalog.clock_timestamp() OPERATOR(pg_catalog.>=) deadline THEN
            RETURN NULL;
        END IF;
        PERFORM claim._coord_wait(key, GREATEST(ms, 1));
    END LOOP;
END
$$;

CREATE FUNCTION claim.resign(name text, epoch bigint)
RETURNS boolean
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    l claim.coord_leaders;
BEGIN
    PERFORM claim._coord_primary('claim.resign');
    UPDATE claim.coord_leaders c SET ended = pg_catalog.clock_timestamp()
     WHERE c.name OPERATOR(pg_catalog.=) resign.name AND c.epoch OPERATOR(pg_catalog.=) resign.epoch
       AND c.ended IS NULL
       AND claim._coord_live_until(c) OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp()
    RETURNING c.* INTO l;
    IF l.name IS NULL THEN RETURN false; END IF;
    PERFORM claim._coord_log('leader', name, 'resigned', epoch, l.holder);
    PERFORM claim._coord_wake(claim._coord_key('leader', name));
    RETURN true;
END
$$;

-- Latches: latch(name, count) sets the count, count_down lowers it (the
-- commit that reaches zero wakes every latch_wait), latch_wait waits for 0.
CREATE FUNCTION claim.latch(name text, count integer)
RETURNS void
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM claim._coord_primary('claim.latch');
    IF name IS NULL OR count IS NULL OR count OPERATOR(pg_catalog.<) 0
       OR pg_catalog.octet_length(name) OPERATOR(pg_catalog.>) 1024 THEN
        RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
            MESSAGE = 'claim.latch takes a name of at most 1024 bytes and a count of 0 or more';
    END IF;
    INSERT INTO claim.coord_latches AS c (name, count, created)
    VALUES (name, count, pg_catalog.clock_timestamp())
    ON CONFLICT ON CONSTRAINT coord_latches_pkey DO UPDATE SET count = EXCLUDED.count, created = EXCLUDED.created;
    PERFORM claim._coord_log('latch', name, 'set', count::bigint, NULL);
    IF count OPERATOR(pg_catalog.=) 0 THEN
        PERFORM claim._coord_wake(claim._coord_key('latch', name));
    END IF;
END
$$;

CREATE FUNCTION claim.count_down(name text)
RETURNS integer
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    left_ integer;
BEGIN
    PERFORM claim._coord_primary('claim.count_down');
    UPDATE claim.coord_latches c SET count = GREATEST(c.count OPERATOR(pg_catalog.-) 1, 0)
     WHERE c.name OPERATOR(pg_catalog.=) count_down.name
    RETURNING c.count INTO left_;
    IF left_ IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'undefined_object',
            MESSAGE = pg_catalog.format('latch "%s" does not exist', name),
            HINT = 'Create it with claim.latch(name, count).';
    END IF;
    PERFORM claim._coord_log('latch', name, 'count_down', left_::bigint, NULL);
    IF left_ OPERATOR(pg_catalog.=) 0 THEN
        PERFORM claim._coord_wake(claim._coord_key('latch', name));
    END IF;
    RETURN left_;
END
$$;

CREATE FUNCTION claim.latch_wait(name text, wait interval DEFAULT '0')
RETURNS boolean
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    deadline timestamptz;
    n integer;
    ms bigint;
    key bigint := claim._coord_key('latch', name);
BEGIN
    ms := claim._coord_ms(wait, 'wait');
    deadline := pg_catalog.clock_timestamp() OPERATOR(pg_catalog.+)
                pg_catalog.make_interval(secs => ms OPERATOR(pg_catalog./) 1000.0);
    LOOP
        SELECT c.count INTO n FROM claim.coord_latches c WHERE c.name OPERATOR(pg_catalog.=) latch_wait.name;
        IF n IS NULL THEN
            RAISE EXCEPTION USING ERRCODE = 'undefined_object',
                MESSAGE = pg_catalog.format('latch "%s" does not exist', name),
                HINT = 'Create it with claim.latch(name, count).';
        END IF;
        IF n OPERATOR(pg_catalog.=) 0 THEN RETURN true; END IF;
        ms := pg_catalog.ceil(pg_catalog.date_part('epoch', deadline OPERATOR(pg_catalog.-) pg_catalog.clock_timestamp())
                              OPERATOR(pg_catalog.*) 1000)::bigint;
        IF ms OPERATOR(pg_catalog.<=) 0 THEN RETURN false; END IF;
        -- A standby is not woken by replay: look again every second there.
        IF pg_catalog.pg_is_in_recovery() THEN ms := LEAST(ms, 1000); END IF;
        PERFORM claim._coord_wait(key, ms);
    END LOOP;
END
$$;

-- The watch: the changes after a revision whose name starts with prefix.
CREATE FUNCTION claim.revision()
RETURNS bigint
LANGUAGE sql STABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$ SELECT GREATEST((SELECT pg_catalog.max(c.revision) FROM claim.coord_changes c), claim._coord_compacted()) $$;

CREATE FUNCTION claim.watch(prefix text, after_revision bigint DEFAULT 0, wait interval DEFAULT '0')
RETURNS TABLE (revision bigint, kind text, name text, event text, token bigint, holder text,
               at timestamptz)
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    deadline timestamptz;
    ms bigint;
    gone bigint;
    key bigint := claim._coord_key('watch', '');
    p text := COALESCE(prefix, '');
BEGIN
    IF after_revision IS NULL OR after_revision OPERATOR(pg_catalog.<) 0 THEN
        RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
            MESSAGE = 'after_revision must be 0 or more';
    END IF;
    ms := claim._coord_ms(wait, 'wait');
    deadline := pg_catalog.clock_timestamp() OPERATOR(pg_catalog.+)
                pg_catalog.make_interval(secs => ms OPERATOR(pg_catalog./) 1000.0);
    LOOP
        gone := claim._coord_compacted();
        IF after_revision OPERATOR(pg_catalog.>) 0 AND after_revision OPERATOR(pg_catalog.<) gone THEN
            RAISE EXCEPTION USING ERRCODE = 'PC004',
                MESSAGE = pg_catalog.format('revision %s has been compacted', after_revision),
                DETAIL = pg_catalog.format('The watch log starts after revision %s (pg_claim.watch_retention).', gone),
                HINT = 'Read the current state again (claim.leader, claim.sessions, ...), then watch from claim.revision().';
        END IF;
        RETURN QUERY
            SELECT c.revision, c.kind, c.name::text, c.event, c.token, c.holder::text, c.at
              FROM claim.coord_changes c
             WHERE c.revision OPERATOR(pg_catalog.>) after_revision
               AND pg_catalog.left(c.name, pg_catalog.length(p)) OPERATOR(pg_catalog.=) p
             ORDER BY c.revision;
        IF FOUND THEN RETURN; END IF;
        ms := pg_catalog.ceil(pg_catalog.date_part('epoch', deadline OPERATOR(pg_catalog.-) pg_catalog.clock_timestamp())
                              OPERATOR(pg_catalog.*) 1000)::bigint;
        IF ms OPERATOR(pg_catalog.<=) 0 THEN RETURN; END IF;
        IF pg_catalog.pg_is_in_recovery() THEN ms := LEAST(ms, 1000); END IF;
        PERFORM claim._coord_wait(key, ms);
    END LOOP;
END
$$;

-- The worker's round (src/worker/coordination.cpp): end expired sessions,
-- record the end of leaders whose ttl ran out, trim the watch log to
-- pg_claim.watch_retention. Returns when to look again (NULL: nothing due).
-- The next end of a live lease holding (NULL when leases are not watched).
CREATE FUNCTION claim._coord_next_lease_end(leases boolean, now timestamptz)
RETURNS timestamptz
LANGUAGE sql STABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT pg_catalog.min(h.expires_at) FROM claim.lease_holders h
     WHERE leases AND h.expires_at OPERATOR(pg_catalog.>) now
$$;

CREATE FUNCTION claim._coord_maintain()
RETURNS timestamptz
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    r claim.coord_sessions;
    l claim.coord_leaders;
    keep interval := COALESCE(pg_catalog.current_setting('pg_claim.watch_retention', true), '1h')::interval;
    cut bigint;
    now timestamptz := pg_catalog.clock_timestamp();
    leases boolean := claim._coord_watch_leases();
    e record;
BEGIN
    -- Anything to do? Then take the log's lock, unless a transaction that
    -- is writing a change holds it: the worker never waits for one.
    IF EXISTS (SELECT FROM claim.coord_sessions s WHERE s.expires OPERATOR(pg_catalog.<=) now)
       OR (leases AND EXISTS (SELECT FROM claim.lease_holders h
                               WHERE h.expires_at OPERATOR(pg_catalog.<=) now
                                 AND h.expires_at OPERATOR(pg_catalog.>) h.acquired_at
                                 AND NOT EXISTS (SELECT FROM claim.lease_released x
                                                  WHERE x.name OPERATOR(pg_catalog.=) h.name
                                                    AND x.slot OPERATOR(pg_catalog.=) h.slot
                                                    AND x.token OPERATOR(pg_catalog.=) h.token)))
       OR EXISTS (SELECT FROM claim.coord_leaders c WHERE c.ended IS NULL AND c.session_id IS NULL
                     AND c.until OPERATOR(pg_catalog.<=) now)
       OR EXISTS (SELECT FROM claim.coord_changes c WHERE c.at OPERATOR(pg_catalog.<) (now OPERATOR(pg_catalog.-) keep)) THEN
        BEGIN
            LOCK TABLE claim.coord_changes IN SHARE ROW EXCLUSIVE MODE NOWAIT;
        EXCEPTION WHEN lock_not_available THEN
            RETURN now OPERATOR(pg_catalog.+) '100 milliseconds'::interval;
        END;
    ELSE
        RETURN LEAST((SELECT pg_catalog.min(s.expires) FROM claim.coord_sessions s),
                     (SELECT pg_catalog.min(c.until) FROM claim.coord_leaders c
                       WHERE c.ended IS NULL AND c.session_id IS NULL),
                     claim._coord_next_lease_end(leases, now));
    END IF;
    -- With pg_claim.watch_leases on: each lease holding that ran out and that
    -- no grant took over is recorded as 'expired', and marked so (its expiry
    -- moves back to its grant, as a grant of the other mode retires one).
    IF leases THEN
        FOR e IN UPDATE claim.lease_holders h SET expires_at = h.acquired_at
                  WHERE h.expires_at OPERATOR(pg_catalog.<=) now
                    AND h.expires_at OPERATOR(pg_catalog.>) h.acquired_at
                    AND NOT EXISTS (SELECT FROM claim.lease_released x
                                     WHERE x.name OPERATOR(pg_catalog.=) h.name
                                       AND x.slot OPERATOR(pg_catalog.=) h.slot
                                       AND x.token OPERATOR(pg_catalog.=) h.token)
                 RETURNING h.name, h.token, h.holder LOOP
            PERFORM claim._coord_log('lease', e.name, 'expired', e.token, e.holder);
        END LOOP;
    END IF;
    FOR r IN SELECT * FROM claim.coord_sessions s WHERE s.expires OPERATOR(pg_catalog.<=) now
              ORDER BY s.expires LIMIT 1000 FOR UPDATE SKIP LOCKED LOOP
        PERFORM claim._coord_end_session(r, true);
    END LOOP;
    FOR l IN UPDATE claim.coord_leaders c SET ended = c.until
              WHERE c.ended IS NULL AND c.session_id IS NULL AND c.until OPERATOR(pg_catalog.<=) now
             RETURNING c.* LOOP
        PERFORM claim._coord_log('leader', l.name, 'expired', l.epoch, l.holder);
    END LOOP;
    SELECT pg_catalog.max(c.revision) INTO cut FROM claim.coord_changes c
     WHERE c.at OPERATOR(pg_catalog.<) (now OPERATOR(pg_catalog.-) keep);
    IF cut IS NOT NULL THEN
        DELETE FROM claim.coord_changes c WHERE c.revision OPERATOR(pg_catalog.<=) cut;
        IF cut OPERATOR(pg_catalog.>) claim._coord_compacted() THEN
            PERFORM pg_catalog.setval('claim.coord_compacted_seq', cut);
        END IF;
    END IF;
    RETURN LEAST((SELECT pg_catalog.min(s.expires) FROM claim.coord_sessions s),
                 (SELECT pg_catalog.min(c.until) FROM claim.coord_leaders c
                   WHERE c.ended IS NULL AND c.session_id IS NULL),
                 claim._coord_next_lease_end(leases, now));
END
$$;

-- Rights. Workers and admins use the service; what they may write in its
-- tables with plain SQL is the boundary, as for leases (docs/roles.md).
-- Sessions are their owner's: another role (not claim_admin) gets 42501.
REVOKE EXECUTE ON FUNCTION
    claim._coord_token(), claim._coord_wait(bigint, bigint), claim._coord_wake(bigint),
    claim._coord_key(text, text), claim._coord_log(text, text, text, bigint, text),
    claim._coord_watch_leases(), claim._coord_primary(text), claim._coord_ms(interval, text),
    claim._coord_session(bigint, text, boolean),
    claim.session_open(interval, text, interval), claim.session_keepalive(bigint),
    claim._coord_end_session(claim.coord_sessions, boolean), claim.session_close(bigint),
    claim._coord_live_until(claim.coord_leaders), claim.leader(text),
    claim.elect(text, interval, bigint, text, interval), claim.resign(text, bigint),
    claim.latch(text, integer), claim.count_down(text), claim.latch_wait(text, interval),
    claim.revision(), claim.watch(text, bigint, interval), claim._coord_maintain(),
    claim._coord_compacted(), claim._coord_next_lease_end(boolean, timestamptz)
  FROM PUBLIC;
GRANT EXECUTE ON FUNCTION
    claim._coord_token(), claim._coord_wait(bigint, bigint), claim._coord_wake(bigint),
    claim._coord_key(text, text), claim._coord_log(text, text, text, bigint, text),
    claim._coord_watch_leases(), claim._coord_primary(text), claim._coord_ms(interval, text),
    claim._coord_session(bigint, text, boolean),
    claim.session_open(interval, text, interval), claim.session_keepalive(bigint),
    claim._coord_end_session(claim.coord_sessions, boolean), claim.session_close(bigint),
    claim._coord_live_until(claim.coord_leaders), claim.leader(text),
    claim.elect(text, interval, bigint, text, interval), claim.resign(text, bigint),
    claim.latch(text, integer), claim.count_down(text), claim.latch_wait(text, interval),
    claim.revision(), claim.watch(text, bigint, interval), claim._coord_compacted()
  TO claim_worker, claim_admin;
GRANT EXECUTE ON FUNCTION claim._coord_maintain() TO claim_admin;
GRANT EXECUTE ON FUNCTION claim._coord_next_lease_end(boolean, timestamptz) TO claim_admin;
GRANT SELECT, INSERT, UPDATE, DELETE ON claim.coord_sessions, claim.coord_leaders,
                                        claim.coord_latches, claim.coord_changes TO claim_worker;
GRANT SELECT, INSERT, UPDATE, DELETE, TRUNCATE ON claim.coord_sessions, claim.coord_leaders,
                                                  claim.coord_latches, claim.coord_changes TO claim_admin;
GRANT USAGE, SELECT ON SEQUENCE claim.coord_revision_seq, claim.coord_compacted_seq TO claim_worker;
GRANT USAGE, SELECT, UPDATE ON SEQUENCE claim.coord_revision_seq, claim.coord_compacted_seq TO claim_admin;
GRANT SELECT ON claim.sessions TO claim_worker, claim_admin;

-- pg_dump keeps leaders' epochs, latches and the watch log; live sessions are
-- not kept (a restored database starts with none: their holders open new ones).
SELECT pg_catalog.pg_extension_config_dump('claim.coord_leaders', '');
SELECT pg_catalog.pg_extension_config_dump('claim.coord_latches', '');
SELECT pg_catalog.pg_extension_config_dump('claim.coord_changes', '');
SELECT pg_catalog.pg_extension_config_dump('claim.coord_revision_seq', '');
SELECT pg_catalog.pg_extension_config_dump('claim.coord_compacted_seq', '');

-- Barriers (src/api/barriers.cpp): arrivals live in shared memory, not in a
-- table, since the other parties must see an arrival before its transaction
-- ends; the last arrival opens the barrier at once. Nothing is written: a
-- barrier also works on a hot standby (among the sessions of that server).
CREATE FUNCTION claim.barrier(name text, parties integer, wait interval)
RETURNS integer
LANGUAGE c VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'pgclaim_barrier';
REVOKE EXECUTE ON FUNCTION claim.barrier(text, integer, interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION claim.barrier(text, integer, interval) TO claim_worker, claim_admin;

-- Leases attached to a session: claim.session_lease(session, name, ...)
-- grants a lease (claim.lease_acquire) until the session's expiry +
-- lock_delay and attaches it to the session: renewed by its keepalives,
-- released when it is closed, left to run out lock_delay after an expiry.
CREATE FUNCTION claim._coord_attach_lease(session bigint, name text, token bigint)
RETURNS void
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    r claim.coord_sessions;
BEGIN
    -- Under the session's lock: a close or the worker's end of the session
    -- waits for this transaction, and sees the lease.
    r := claim._coord_session(session, 'claim.session_lease', true);
    UPDATE claim.lease_holders h SET expires_at = r.expires OPERATOR(pg_catalog.+) r.lock_delay
     WHERE h.name OPERATOR(pg_catalog.=) _coord_attach_lease.name
       AND h.token OPERATOR(pg_catalog.=) _coord_attach_lease.token;
    INSERT INTO claim.coord_attached (session_id, token, kind, name) VALUES (session, token, 'lease', name);
END
$$;
REVOKE EXECUTE ON FUNCTION claim._coord_attach_lease(bigint, text, bigint) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION claim._coord_attach_lease(bigint, text, bigint) TO claim_worker, claim_admin;
GRANT SELECT, INSERT, UPDATE, DELETE ON claim.coord_attached TO claim_worker;
GRANT SELECT, INSERT, UPDATE, DELETE, TRUNCATE ON claim.coord_attached TO claim_admin;

CREATE FUNCTION claim.session_lease(session bigint, name text, holder text DEFAULT NULL,
                                    permits integer DEFAULT 1, wait interval DEFAULT '0',
                                    mode text DEFAULT 'exclusive')
RETURNS bigint
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    r claim.coord_sessions;
    tok bigint;
BEGIN
    PERFORM claim._coord_primary('claim.session_lease');
    IF mode IS NULL OR mode NOT IN ('exclusive', 'shared') THEN
        RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
            MESSAGE = pg_catalog.format('mode must be ''exclusive'' or ''shared'', not %s', COALESCE(pg_catalog.quote_literal(mode), 'NULL'));
    END IF;
    IF mode OPERATOR(pg_catalog.=) 'shared' AND permits IS DISTINCT FROM 1 THEN
        RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
            MESSAGE = 'a shared lease has 1 permit',
            HINT = 'Leave permits out in shared mode.';
    END IF;
    r := claim._coord_session(session, 'claim.session_lease', false);
    IF mode OPERATOR(pg_catalog.=) 'shared' THEN
        tok := claim.lease_acquire_shared(name,
                                          r.expires OPERATOR(pg_catalog.+) r.lock_delay OPERATOR(pg_catalog.-) pg_catalog.clock_timestamp(),
                                          COALESCE(holder, r.holder), wait);
    ELSE
        tok := claim.lease_acquire(name,
                                   r.expires OPERATOR(pg_catalog.+) r.lock_delay OPERATOR(pg_catalog.-) pg_catalog.clock_timestamp(),
                                   COALESCE(holder, r.holder), permits, wait);
    END IF;
    IF tok IS NULL THEN RETURN NULL; END IF;
    -- The session may have ended during a wait: checked again under its lock.
    PERFORM claim._coord_attach_lease(session, name, tok);
    -- (with pg_claim.watch_leases on, the grant recorded it already)
    IF NOT claim._coord_watch_leases() THEN
        PERFORM claim._coord_log('lease', name,
                                 CASE mode WHEN 'shared' THEN 'acquired_shared' ELSE 'acquired' END,
                                 tok, COALESCE(holder, r.holder));
    END IF;
    RETURN tok;
END
$$;
REVOKE EXECUTE ON FUNCTION claim.session_lease(bigint, text, text, integer, interval, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION claim.session_lease(bigint, text, text, integer, interval, text) TO claim_worker, claim_admin;

-- Claims attached to a session: claim.session_claim(session, queue, ...)
-- claims like claim.claim_next, with the session's time left as the lease;
-- the claims run out with the session (no lock_delay: their items become
-- claimable as on lease expiry), every keepalive renews them, and
-- session_close gives them back (claim.release).
-- Attach claims just made to the session (checked again under its lock:
-- it may have ended during a wait); returns them with the session's expiry
-- as their lease_until.
CREATE FUNCTION claim._coord_attach_claims(session bigint, queue text, got claim.item[])
RETURNS SETOF claim.item
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    r claim.coord_sessions;
    it claim.item;
BEGIN
    IF pg_catalog.cardinality(got) OPERATOR(pg_catalog.=) 0 THEN RETURN; END IF;
    r := claim._coord_session(session, 'claim.session_claim', true);
    -- (group_claim hands out one token for all the items of a group)
    INSERT INTO claim.coord_attached (session_id, token, kind, name)
    SELECT DISTINCT _coord_attach_claims.session, g.token, 'claim', _coord_attach_claims.queue
      FROM pg_catalog.unnest(got) g;
    UPDATE claim.claims c SET lease_until = r.expires
     WHERE c.token OPERATOR(pg_catalog.=) ANY (SELECT g.token FROM pg_catalog.unnest(got) g);
    FOREACH it IN ARRAY got LOOP
        it.lease_until := r.expires;
        RETURN NEXT it;
    END LOOP;
END
$$;

CREATE FUNCTION claim.session_claim(session bigint, queue text, n integer DEFAULT 1,
                                    wait interval DEFAULT '0', worker text DEFAULT NULL)
RETURNS SETOF claim.item
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    r claim.coord_sessions;
BEGIN
    PERFORM claim._coord_primary('claim.session_claim');
    r := claim._coord_session(session, 'claim.session_claim', false);
    RETURN QUERY SELECT * FROM claim._coord_attach_claims(session, queue, ARRAY(
        SELECT c FROM claim.claim_next(session_claim.queue, session_claim.n,
                                       r.expires OPERATOR(pg_catalog.-) pg_catalog.clock_timestamp(),
                                       session_claim.wait, COALESCE(session_claim.worker, r.holder)) c));
END
$$;

CREATE FUNCTION claim.session_group_claim(session bigint, queue text, max_items integer DEFAULT 1000,
                                          wait interval DEFAULT '0', worker text DEFAULT NULL,
                                          group_key text DEFAULT NULL)
RETURNS SETOF claim.item
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    r claim.coord_sessions;
BEGIN
    PERFORM claim._coord_primary('claim.session_group_claim');
    r := claim._coord_session(session, 'claim.session_group_claim', false);
    RETURN QUERY SELECT * FROM claim._coord_attach_claims(session, queue, ARRAY(
        SELECT c FROM claim.group_claim(session_group_claim.queue, session_group_claim.max_items,
                                        r.expires OPERATOR(pg_catalog.-) pg_catalog.clock_timestamp(),
                                        session_group_claim.wait,
                                        COALESCE(session_group_claim.worker, r.holder),
                                        session_group_claim.group_key) c));
END
$$;
REVOKE EXECUTE ON FUNCTION claim._coord_attach_claims(bigint, text, claim.item[]),
                           claim.session_group_claim(bigint, text, integer, interval, text, text)
  FROM PUBLIC;
GRANT EXECUTE ON FUNCTION claim._coord_attach_claims(bigint, text, claim.item[]),
                          claim.session_group_claim(bigint, text, integer, interval, text, text)
  TO claim_worker, claim_admin;
REVOKE EXECUTE ON FUNCTION claim.session_claim(bigint, text, integer, interval, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION claim.session_claim(bigint, text, integer, interval, text) TO claim_worker, claim_admin;

-- ===========================================================================
-- Shared and exclusive leases (docs/leases.md, "Shared and exclusive"):
-- claim.lease_acquire_shared grants a lease of a name that many hold at once
-- in shared mode, while claim.lease_acquire (1 permit) is its exclusive
-- mode. Shared holders are rows of claim.lease_holders with permits 0 in
-- slots 1 .. 1000; the exclusive holder has slot 0 (src/api/leases.cpp).
-- claim.session_lease takes mode => 'shared' (above).
-- ===========================================================================

CREATE FUNCTION claim.lease_acquire_shared(name text,
                                           ttl interval,
                                           holder text DEFAULT NULL,
                                           wait interval DEFAULT '0')
RETURNS bigint
LANGUAGE c VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'pgclaim_lease_acquire_shared';
REVOKE EXECUTE ON FUNCTION claim.lease_acquire_shared(text, interval, text, interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION claim.lease_acquire_shared(text, interval, text, interval) TO claim_worker, claim_admin;

-- ===========================================================================
-- Where a claimed item is (docs/internals.md, "Tables, WAL and locks")
-- ===========================================================================
-- The tuple id of the item's row version when it was claimed. complete reads
-- the item there first and takes it only when the version found is visible
-- and carries the same item id; otherwise (the row was updated, moved by
-- VACUUM FULL or pg_repack, or the line reused) it looks the item up by id.
-- NULL for claims written through SQL.
ALTER TABLE claim.claims ADD COLUMN item_tid tid;
