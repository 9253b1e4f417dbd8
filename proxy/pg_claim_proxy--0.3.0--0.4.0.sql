-- pg_claim_proxy 0.3.0 -> 0.4.0, for partitions on pg_claim 0.4.0: the
-- functions pg_claim 0.4.0 adds, routed as their kind says (by token: the
-- partition of the item or holder; by name: the partition of the name;
-- events and views: every partition). The same shapes as the 0.3.0 update:
-- claim._part_<f>/claim._on_<f> for what is routed to one partition,
-- claim._all_<f> for what runs on all, an unreachable partition as PC003.
-- make builds pg_claim_proxy--0.4.0.sql from the 0.2.0 script and the
-- updates, so a fresh install equals an updated one.

\echo Use "ALTER EXTENSION pg_claim_proxy UPDATE TO '0.4.0'" to load this file. \quit

-- item_state's result carries the run's steps.
ALTER TYPE claim.item_status ADD ATTRIBUTE steps jsonb;

DO $gen$
DECLARE
    r record;
    plain text;
    names text;
    is_set boolean;
    body text;
    call text;
    guarded text;
BEGIN
    FOR r IN SELECT * FROM (VALUES
        -- name, arguments, result, route
        -- durable steps (docs/steps.md): the partition of the run's item
        ('step', 'token bigint, step text', 'jsonb', 'claim.route_token(token)'),
        ('step_done', 'token bigint, step text, output jsonb DEFAULT NULL', 'void', 'claim.route_token(token)'),
        ('sleep', 'token bigint, until timestamptz', 'void', 'claim.route_token(token)'),
        ('sleep_for', 'token bigint, delay interval', 'void', 'claim.route_token(token)'),
        ('await_event', 'token bigint, event text, timeout interval DEFAULT ''1 day''', 'jsonb', 'claim.route_token(token)'),
        ('await_children', 'token bigint, children bigint[]', 'jsonb', 'claim.route_token(token)'),
        -- the coordination service's named primitives (docs/coordination.md,
        -- "Partitions"): the partition of the name
        ('elect', 'name text, ttl interval DEFAULT NULL, session bigint DEFAULT NULL, holder text DEFAULT NULL, wait interval DEFAULT ''0''', 'bigint', 'claim.route_hash(name)'),
        ('resign', 'name text, epoch bigint', 'boolean', 'claim.route_hash(name)'),
        ('latch', 'name text, count integer', 'void', 'claim.route_hash(name)'),
        ('count_down', 'name text', 'integer', 'claim.route_hash(name)'),
        ('latch_wait', 'name text, wait interval DEFAULT ''0''', 'boolean', 'claim.route_hash(name)'),
        ('barrier', 'name text, parties integer, wait interval', 'integer', 'claim.route_hash(name)')
    ) AS l(name, args, result, route)
    LOOP
        plain := pg_catalog.regexp_replace(r.args, ' DEFAULT [^,]+', '', 'g');
        SELECT pg_catalog.string_agg(pg_catalog.split_part(pg_catalog.btrim(a), ' ', 1), ', ' ORDER BY o)
        INTO names
        FROM pg_catalog.unnest(pg_catalog.string_to_array(plain, ',')) WITH ORDINALITY AS t(a, o);
        is_set := r.result LIKE 'SETOF %';
        EXECUTE pg_catalog.format(
            'CREATE FUNCTION claim.%s(part integer, %s) RETURNS %s LANGUAGE plproxy AS $b$'
            ' CLUSTER ''claim_cluster''; RUN ON part; SELECT * FROM claim.%s(%s); $b$',
            '_part_' || r.name, plain, r.result, r.name, names);
        call := pg_catalog.format('claim.%s(part, %s)', '_part_' || r.name, names);
        body := CASE WHEN is_set THEN 'RETURN QUERY SELECT * FROM ' || call || ';'
                     WHEN r.result = 'void' THEN 'PERFORM ' || call || ';'
                     ELSE 'RETURN ' || call || ';' END;
        guarded := pg_catalog.format(
            'BEGIN %s'
            ' EXCEPTION WHEN internal_error THEN'
            ' GET STACKED DIAGNOSTICS m = MESSAGE_TEXT;'
            ' PERFORM claim.raise_unreachable(%L, part, m); RAISE; END',
            body, r.name);
        EXECUTE pg_catalog.format(
            'CREATE FUNCTION claim.%s(part integer, %s) RETURNS %s LANGUAGE plpgsql'
            ' SET search_path = pg_catalog, pg_temp AS $b$ DECLARE m text; %s $b$',
            '_on_' || r.name, plain, r.result, guarded);
        EXECUTE pg_catalog.format(
            'CREATE FUNCTION claim.%I(%s) RETURNS %s LANGUAGE plpgsql'
            ' SET search_path = pg_catalog, pg_temp AS $b$'
            ' DECLARE part integer := %s; m text; %s $b$',
            r.name, r.args, r.result, r.route, guarded);
    END LOOP;
END
$gen$;

-- An event is emitted on every partition: the runs waiting for it are on
-- the partitions of their items. True when it was new on any of them.
CREATE FUNCTION claim._all_emit_event(event text, payload jsonb)
RETURNS SETOF boolean LANGUAGE plproxy AS $$
    CLUSTER 'claim_cluster';
    RUN ON ALL;
    SELECT claim.emit_event(event, payload);
$$;
CREATE FUNCTION claim.emit_event(event text, payload jsonb DEFAULT NULL)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    m text;
    r boolean;
BEGIN
    SELECT bool_or(e) INTO r FROM claim._all_emit_event(event, payload) AS e;
    RETURN r;
EXCEPTION WHEN internal_error THEN
    GET STACKED DIAGNOSTICS m = MESSAGE_TEXT;
    PERFORM claim.raise_unreachable('emit_event', NULL, m);
    RAISE;
END
$$;

-- The steps of every partition's runs.
CREATE FUNCTION claim._all_partition_item_steps(
    OUT queue text, OUT id bigint, OUT step text, OUT output jsonb, OUT token bigint,
    OUT done_at timestamptz)
RETURNS SETOF record LANGUAGE plproxy AS $$
    CLUSTER 'claim_cluster';
    RUN ON ALL;
    SELECT s.queue, s.id, s.step, s.output, s.token, s.done_at FROM claim.item_steps s;
$$;
CREATE FUNCTION claim.partition_item_steps(
    OUT queue text, OUT id bigint, OUT step text, OUT output jsonb, OUT token bigint,
    OUT done_at timestamptz)
RETURNS SETOF record
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE m text;
BEGIN
    RETURN QUERY SELECT * FROM claim._all_partition_item_steps();
EXCEPTION WHEN internal_error THEN
    GET STACKED DIAGNOSTICS m = MESSAGE_TEXT;
    PERFORM claim.raise_unreachable('partition_item_steps', NULL, m);
    RAISE;
END
$$;
CREATE VIEW claim.item_steps AS SELECT * FROM claim.partition_item_steps();
REVOKE ALL ON claim.item_steps FROM PUBLIC;

-- ===========================================================================
-- Shared leases: claim.lease_acquire_shared, routed by name to the partition
-- of the lease (as claim.lease_acquire, its exclusive mode); renew, release
-- and assert already go to the holder's partition by token.
-- ===========================================================================
CREATE FUNCTION claim._part_lease_acquire_shared(part integer, name text, ttl interval,
                                                 holder text, wait interval)
RETURNS bigint LANGUAGE plproxy AS $$
    CLUSTER 'claim_cluster';
    RUN ON part;
    SELECT * FROM claim.lease_acquire_shared(name, ttl, holder, wait);
$$;
CREATE FUNCTION claim._on_lease_acquire_shared(part integer, name text, ttl interval,
                                               holder text, wait interval)
RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE m text;
BEGIN
    RETURN claim._part_lease_acquire_shared(part, name, ttl, holder, wait);
EXCEPTION WHEN internal_error THEN
    GET STACKED DIAGNOSTICS m = MESSAGE_TEXT;
    PERFORM claim.raise_unreachable('lease_acquire_shared', part, m);
    RAISE;
END
$$;
CREATE FUNCTION claim.lease_acquire_shared(name text, ttl interval, holder text DEFAULT NULL,
                                           wait interval DEFAULT '0')
RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    part integer := claim.route_hash(name);
    m text;
BEGIN
    RETURN claim._part_lease_acquire_shared(part, name, ttl, holder, wait);
EXCEPTION WHEN internal_error THEN
    GET STACKED DIAGNOSTICS m = MESSAGE_TEXT;
    PERFORM claim.raise_unreachable('lease_acquire_shared', part, m);
    RAISE;
END
$$;

-- ===========================================================================
-- The leader of an election: at the partition of its name.
-- ===========================================================================
CREATE FUNCTION claim._part_leader(part integer, name text, OUT holder text, OUT epoch bigint,
                                   OUT since timestamptz, OUT until timestamptz)
RETURNS SETOF record LANGUAGE plproxy AS $$
    CLUSTER 'claim_cluster';
    RUN ON part;
    SELECT l.holder, l.epoch, l.since, l.until FROM claim.leader(name) l;
$$;
CREATE FUNCTION claim.leader(name text,
                             OUT holder text, OUT epoch bigint, OUT since timestamptz, OUT until timestamptz)
RETURNS SETOF record
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    part integer := claim.route_hash(name);
    m text;
BEGIN
    RETURN QUERY SELECT * FROM claim._part_leader(part, name);
EXCEPTION WHEN internal_error THEN
    GET STACKED DIAGNOSTICS m = MESSAGE_TEXT;
    PERFORM claim.raise_unreachable('leader', part, m);
    RAISE;
END
$$;
