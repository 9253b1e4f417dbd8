-- pg_claim_proxy 0.2.0 -> 0.3.0, for partitions on pg_claim 0.3.0: tokens of
-- at most 2^53 - 1 (partition in bits 52..47); the array forms under names
-- of their own (complete_many, cancel_many, enqueue_many) with a one-item
-- cancel; queues spread over several partitions; a partition that cannot be
-- reached raises PC003 naming it. The front holds no data but the list of
-- spread queues: the routed functions are replaced, all of them made by one
-- loop from one list (section "The routed functions").
-- make builds pg_claim_proxy--0.3.0.sql from pg_claim_proxy--0.2.0.sql and
-- this file, so a fresh install equals an updated one.

\echo Use "ALTER EXTENSION pg_claim_proxy UPDATE TO '0.3.0'" to load this file. \quit

DROP FUNCTION claim.token_partition(bigint);
CREATE FUNCTION claim.token_partition(token bigint)
RETURNS integer
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
SELECT CASE WHEN token OPERATOR(pg_catalog.<) 0 THEN -1
            WHEN token OPERATOR(pg_catalog.>) 9007199254740991 THEN (token OPERATOR(pg_catalog.>>) 53)::integer
            ELSE (token OPERATOR(pg_catalog.>>) 47)::integer END
$$;

-- ---------------------------------------------------------- spread queues

-- A spread queue exists under its name on each partition of the list, and
-- the front places its items, claims from it and sums its figures over them
-- (docs/partitions.md, "Spread queues"). pg_dump keeps the rows.
CREATE TABLE claim.spread_queues (
    queue text PRIMARY KEY,
    partitions integer[] NOT NULL CHECK (pg_catalog.cardinality(partitions) OPERATOR(pg_catalog.>) 0),
    created_at timestamptz NOT NULL DEFAULT pg_catalog.now()
);
SELECT pg_catalog.pg_extension_config_dump('claim.spread_queues', '');
GRANT SELECT ON claim.spread_queues TO PUBLIC;

-- The number of partitions of claim_cluster: its options p0, p1, ...
CREATE FUNCTION claim.partition_count()
RETURNS integer
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
SELECT count(*)::integer
FROM pg_foreign_server s, unnest(s.srvoptions) AS o
WHERE s.srvname = 'claim_cluster' AND o ~ '^p[0-9]+='
$$;

-- The partition of a spread queue that holds the items of one key (group
-- key, or dedup key): the key's claim.route_hash, unsigned, modulo the
-- number of the queue's partitions, picks one of them (in the order of the
-- list). Over all P partitions this is route_hash(key) & (P - 1), the
-- partition a queue of that name would have.
CREATE FUNCTION claim.spread_partition(partitions integer[], key text)
RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
SELECT partitions[1 + ((claim.route_hash(key)::bigint & 4294967295) % cardinality(partitions))::integer]
$$;

-- A partition that cannot be reached. Called from the handler of an
-- internal_error (XX000) of a PL/Proxy call: PL/Proxy raises its own errors
-- (connecting, a connection lost) as XX000, and errors of the partition
-- keep their SQLSTATE with "REMOTE ERROR" in the message. Raises PC003
-- naming the function and the partition (NULL: the call needed them all),
-- or returns, and the handler raises the error it caught.
CREATE FUNCTION claim.raise_unreachable(fn text, part integer, msg text)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF strpos(msg, 'REMOTE ERROR') > 0 THEN
        RETURN;
    END IF;
    RAISE EXCEPTION USING ERRCODE = 'PC003',
        MESSAGE = format('claim.%s: partition %s of claim_cluster cannot be reached: %s', fn,
                         CASE WHEN part IS NULL THEN '(one of all)'
                              ELSE (part & (claim.partition_count() - 1))::text END,
                         msg),
        HINT = 'Calls for the other partitions keep working; this one works again once the partition is back.';
END
$$;

-- The partitions a spread queue is created on: all of claim_cluster's, or
-- the stated ones (distinct, each 0 .. P - 1), in ascending order.
CREATE FUNCTION claim.spread_set(partitions integer[])
RETURNS integer[]
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    p integer := claim.partition_count();
    r integer[];
BEGIN
    IF p = 0 THEN
        RAISE EXCEPTION USING ERRCODE = '42704',
            MESSAGE = 'server "claim_cluster" has no partitions (options p0, p1, ...)';
    END IF;
    IF partitions IS NULL THEN
        RETURN ARRAY(SELECT generate_series(0, p - 1));
    END IF;
    IF cardinality(partitions) = 0 OR array_position(partitions, NULL) IS NOT NULL
       OR EXISTS (SELECT FROM unnest(partitions) k WHERE k < 0 OR k >= p) THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('partitions must list partition numbers 0 to %s', p - 1);
    END IF;
    r := ARRAY(SELECT DISTINCT k FROM unnest(partitions) k ORDER BY k);
    IF cardinality(r) <> cardinality(partitions) THEN
        RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = 'partitions lists a partition twice';
    END IF;
    RETURN r;
END
$$;

-- ---------------------------------------------------- the routed functions
-- Each function of pg_claim that runs on one partition is made here from
-- one row of the list below, in three parts:
--   claim._part_<f>(part, args)  PL/Proxy: runs claim.<f>(args) on partition part;
--   claim._on_<f>(part, args)    the same, with an unreachable partition as PC003;
--   claim.<f>(args)              the API: routes (route), unless the function
--                                is written out below (route NULL); routed by
--                                token or key, it calls claim._part_<f> guarded
--                                as claim._on_<f> does (one frame less).
-- A queue function (route 'queue') routes by the queue's name, and for a
-- spread queue runs on each of its partitions ('each'), or is refused
-- ('refuse': item ids are per partition).

DO $gen$
DECLARE
    r record;
    plain text;       -- the arguments without their defaults
    names text;       -- the argument names, as a call passes them
    types text;       -- the argument types, as DROP FUNCTION names them
    is_set boolean;
    body text;
    call text;
    guarded text;
BEGIN
    -- The 0.2.0 functions routed to one partition go; those on all stay.
    FOR r IN
        SELECT p.oid::regprocedure AS f
        FROM pg_catalog.pg_proc p
        JOIN pg_catalog.pg_depend d ON d.classid = 'pg_catalog.pg_proc'::regclass AND d.objid = p.oid
             AND d.refclassid = 'pg_catalog.pg_extension'::regclass AND d.deptype = 'e'
        JOIN pg_catalog.pg_extension e ON e.oid = d.refobjid AND e.extname = 'pg_claim_proxy'
        JOIN pg_catalog.pg_language l ON l.oid = p.prolang AND l.lanname = 'plproxy'
        WHERE p.prosrc !~ 'RUN ON (ALL|ANY)'
    LOOP
        EXECUTE pg_catalog.format('DROP FUNCTION %s', r.f);
    END LOOP;

    FOR r IN SELECT * FROM (VALUES
        -- name, arguments, result, route, for a spread queue
        ('create_queue', 'queue text, lease interval DEFAULT ''30 s'', max_attempts integer DEFAULT 5, backoff interval DEFAULT ''1 s'', retain interval DEFAULT ''0'', max_active integer DEFAULT NULL, group_limit integer DEFAULT 1, rate integer DEFAULT NULL, rate_per interval DEFAULT ''1 s'', rate_per_group boolean DEFAULT false, fair boolean DEFAULT false', 'void', NULL, NULL),
        ('alter_queue', 'queue text, lease interval DEFAULT NULL, max_attempts integer DEFAULT NULL, backoff interval DEFAULT NULL, retain interval DEFAULT NULL, max_active integer DEFAULT NULL, group_limit integer DEFAULT NULL, rate integer DEFAULT NULL, rate_per interval DEFAULT NULL, rate_per_group boolean DEFAULT NULL, fair boolean DEFAULT NULL', 'void', 'queue', 'each'),
        ('set_fair_weight', 'queue text, fair_key text, weight integer', 'void', 'queue', 'each'),
        ('drop_queue', 'queue text', 'void', NULL, NULL),
        ('pause', 'queue text', 'void', 'queue', 'each'),
        ('resume', 'queue text', 'void', 'queue', 'each'),
        ('redrive', 'queue text, ids bigint[] DEFAULT NULL', 'integer', NULL, NULL),
        ('cancel', 'queue text, id bigint', 'integer', 'queue', 'refuse'),
        ('cancel_many', 'queue text, ids bigint[]', 'integer', 'queue', 'refuse'),
        ('item_state', 'queue text, id bigint, wait interval DEFAULT ''0''', 'claim.item_status', 'queue', 'refuse'),
        ('enqueue', 'queue text, payload jsonb DEFAULT ''{}'', group_key text DEFAULT NULL, run_at timestamptz DEFAULT NULL, priority integer DEFAULT 0, dedup_key text DEFAULT NULL, after bigint[] DEFAULT NULL, fair_key text DEFAULT NULL', 'bigint', NULL, NULL),
        ('enqueue_many', 'queue text, payloads jsonb[], group_keys text[] DEFAULT NULL, run_at timestamptz DEFAULT NULL, priority integer DEFAULT 0, after bigint[] DEFAULT NULL, fair_key text DEFAULT NULL', 'SETOF bigint', NULL, NULL),
        ('claim_next', 'queue text, n integer DEFAULT 1, lease interval DEFAULT NULL, wait interval DEFAULT ''0'', worker text DEFAULT NULL, done bigint[] DEFAULT NULL', 'SETOF claim.item', NULL, NULL),
        ('group_claim', 'queue text, max_items integer DEFAULT 1000, lease interval DEFAULT NULL, wait interval DEFAULT ''0'', worker text DEFAULT NULL, group_key text DEFAULT NULL', 'SETOF claim.item', NULL, NULL),
        ('schedule', 'name text, cron text, queue text, payload jsonb DEFAULT ''{}'', group_key text DEFAULT NULL, priority integer DEFAULT 0, timezone text DEFAULT ''UTC''', 'void', NULL, NULL),
        ('complete', 'token bigint, result jsonb DEFAULT NULL', 'integer', 'claim.route_token(token)', NULL),
        ('complete_many', 'tokens bigint[], skip_stale boolean DEFAULT false, results jsonb[] DEFAULT NULL', 'integer', 'claim.tokens_partition(tokens)', NULL),
        ('fail', 'token bigint, error text DEFAULT NULL, retry_in interval DEFAULT NULL', 'integer', 'claim.route_token(token)', NULL),
        ('extend', 'token bigint, lease interval DEFAULT NULL', 'timestamptz', 'claim.route_token(token)', NULL),
        ('release', 'token bigint', 'integer', 'claim.route_token(token)', NULL),
        ('assert_token', 'token bigint', 'void', 'claim.route_token(token)', NULL),
        ('lease_acquire', 'name text, ttl interval, holder text DEFAULT NULL, permits integer DEFAULT 1, wait interval DEFAULT ''0''', 'bigint', 'claim.route_hash(name)', NULL),
        ('lease_renew', 'name text, token bigint, ttl interval', 'timestamptz', 'claim.route_token(token)', NULL),
        ('lease_release', 'name text, token bigint', 'boolean', 'claim.route_token(token)', NULL),
        ('lease_assert', 'name text, token bigint', 'void', 'claim.route_token(token)', NULL),
        ('once', 'key text, ttl interval DEFAULT NULL', 'boolean', 'claim.route_hash(key)', NULL),
        ('guard_begin', 'key text, lease interval', 'bigint', 'claim.route_hash(key)', NULL),
        ('guard_finish', 'key text, token bigint, result jsonb DEFAULT NULL', 'void', 'claim.route_hash(key)', NULL),
        ('guard_abandon', 'key text, token bigint', 'void', 'claim.route_hash(key)', NULL),
        ('guard_result', 'key text', 'jsonb', 'claim.route_hash(key)', NULL)
    ) AS l(name, args, result, route, spread)
    LOOP
        plain := pg_catalog.regexp_replace(r.args, ' DEFAULT [^,]+', '', 'g');
        SELECT pg_catalog.string_agg(pg_catalog.split_part(pg_catalog.btrim(a), ' ', 1), ', ' ORDER BY o),
               pg_catalog.string_agg(pg_catalog.substr(pg_catalog.btrim(a), pg_catalog.strpos(pg_catalog.btrim(a), ' ') + 1), ', ' ORDER BY o)
        INTO names, types
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
        -- the call on partition part, an unreachable partition as PC003
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
        -- Queue administration is not for PUBLIC, at the front as on the
        -- partitions: a role granted claim.<f> is granted these two as well.
        IF r.name IN ('create_queue', 'alter_queue', 'drop_queue', 'pause', 'resume', 'redrive',
                      'schedule', 'set_fair_weight') THEN
            EXECUTE pg_catalog.format('REVOKE EXECUTE ON FUNCTION claim.%s(integer, %s), claim.%s(integer, %s) FROM PUBLIC',
                '_part_' || r.name, types, '_on_' || r.name, types);
        END IF;

        CONTINUE WHEN r.route IS NULL;
        IF r.route <> 'queue' THEN
            -- routed by token or key: one plpgsql frame in front of PL/Proxy
            EXECUTE pg_catalog.format(
                'CREATE FUNCTION claim.%I(%s) RETURNS %s LANGUAGE plpgsql'
                ' SET search_path = pg_catalog, pg_temp AS $b$'
                ' DECLARE part integer := %s; m text; %s $b$',
                r.name, r.args, r.result, r.route, guarded);
            CONTINUE;
        END IF;
        call := pg_catalog.format('claim.%s(%s, %s)', '_on_' || r.name,
            'claim.route_hash(queue)', names);
        body := CASE WHEN is_set THEN 'RETURN QUERY SELECT * FROM ' || call || ';'
                     WHEN r.result = 'void' THEN 'PERFORM ' || call || ';'
                     ELSE 'RETURN ' || call || ';' END;
        body := pg_catalog.format(
            'SELECT s.partitions INTO parts FROM claim.spread_queues s WHERE s.queue = $1;'
            ' IF parts IS NULL THEN %s %s END IF; %s', body,
            CASE WHEN is_set OR r.result = 'void' THEN 'RETURN;' ELSE '' END,
            CASE r.spread
            WHEN 'each' THEN pg_catalog.format(
                'FOREACH k IN ARRAY parts LOOP PERFORM claim.%s(k, %s); END LOOP;',
                '_on_' || r.name, names)
            ELSE pg_catalog.format(
                'RAISE EXCEPTION USING ERRCODE = ''0A000'','
                ' MESSAGE = pg_catalog.format(''claim.%s: queue "%%s" is spread over partitions, and item ids are per partition'', queue),'
                ' HINT = ''Call it on the partition of the item, or keep items you address by id in a queue that is not spread.'';',
                r.name) END);
        EXECUTE pg_catalog.format(
            'CREATE FUNCTION claim.%I(%s) RETURNS %s LANGUAGE plpgsql'
            ' SET search_path = pg_catalog, pg_temp AS $b$'
            ' DECLARE parts integer[]; k integer; BEGIN %s END $b$',
            r.name, r.args, r.result, body);
    END LOOP;
END
$gen$;

-- ------------------------------------- written out: queues that may spread

CREATE FUNCTION claim.create_queue(queue text, lease interval DEFAULT '30 s',
                                   max_attempts integer DEFAULT 5, backoff interval DEFAULT '1 s',
                                   retain interval DEFAULT '0', max_active integer DEFAULT NULL,
                                   group_limit integer DEFAULT 1, rate integer DEFAULT NULL,
                                   rate_per interval DEFAULT '1 s',
                                   rate_per_group boolean DEFAULT false, fair boolean DEFAULT false,
                                   spread boolean DEFAULT false, partitions integer[] DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    parts integer[];
    k integer;
BEGIN
    IF spread IS NOT TRUE THEN
        IF partitions IS NOT NULL THEN
            RAISE EXCEPTION USING ERRCODE = '22023',
                MESSAGE = 'partitions is only for a spread queue (spread => true)';
        END IF;
        PERFORM claim._on_create_queue(claim.route_hash(queue), queue, lease, max_attempts, backoff,
                                       retain, max_active, group_limit, rate, rate_per, rate_per_group,
                                       fair);
        RETURN;
    END IF;
    IF queue IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = '22004', MESSAGE = 'queue must not be NULL';
    END IF;
    parts := claim.spread_set(partitions);
    BEGIN
        INSERT INTO claim.spread_queues (queue, partitions) VALUES (queue, parts);
    EXCEPTION WHEN unique_violation THEN
        RAISE EXCEPTION USING ERRCODE = '42710', MESSAGE = format('queue "%s" already exists', queue);
    END;
    FOREACH k IN ARRAY parts LOOP
        PERFORM claim._on_create_queue(k, queue, lease, max_attempts, backoff, retain, max_active,
                                       group_limit, rate, rate_per, rate_per_group, fair);
    END LOOP;
END
$$;

CREATE FUNCTION claim.drop_queue(queue text)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    parts integer[];
    k integer;
BEGIN
    SELECT s.partitions INTO parts FROM claim.spread_queues s WHERE s.queue = $1;
    IF parts IS NULL THEN
        PERFORM claim._on_drop_queue(claim.route_hash(queue), queue);
        RETURN;
    END IF;
    FOREACH k IN ARRAY parts LOOP
        PERFORM claim._on_drop_queue(k, queue);
    END LOOP;
    DELETE FROM claim.spread_queues s WHERE s.queue = $1;
END
$$;

-- Spread: every partition's dead items (ids NULL); ids are per partition.
CREATE FUNCTION claim.redrive(queue text, ids bigint[] DEFAULT NULL)
RETURNS integer
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    parts integer[];
    k integer;
    total integer := 0;
BEGIN
    SELECT s.partitions INTO parts FROM claim.spread_queues s WHERE s.queue = $1;
    IF parts IS NULL THEN
        RETURN claim._on_redrive(claim.route_hash(queue), queue, ids);
    END IF;
    IF ids IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = '0A000',
            MESSAGE = format('claim.redrive: queue "%s" is spread over partitions, and item ids are per partition', queue),
            HINT = 'Redrive all of its dead items (ids NULL), or call it on the partition of the items.';
    END IF;
    FOREACH k IN ARRAY parts LOOP
        total := total + claim._on_redrive(k, queue, NULL);
    END LOOP;
    RETURN total;
END
$$;

-- Spread: the item goes to the partition of its group key, else of its
-- dedup key (so a group stays on one partition, and a dedup key is checked
-- where its items are), else to a partition chosen at random, or the next
-- one that can be reached.
CREATE FUNCTION claim.enqueue(queue text, payload jsonb DEFAULT '{}', group_key text DEFAULT NULL,
                              run_at timestamptz DEFAULT NULL, priority integer DEFAULT 0,
                              dedup_key text DEFAULT NULL, after bigint[] DEFAULT NULL,
                              fair_key text DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    parts integer[];
    cnt integer;
    start integer;
    i integer;
BEGIN
    SELECT s.partitions INTO parts FROM claim.spread_queues s WHERE s.queue = $1;
    IF parts IS NULL THEN
        RETURN claim._on_enqueue(claim.route_hash(queue), queue, payload, group_key, run_at,
                                 priority, dedup_key, after, fair_key);
    END IF;
    IF after IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = '0A000',
            MESSAGE = format('claim.enqueue: queue "%s" is spread over partitions, and item ids are per partition', queue),
            HINT = 'Keep an item and its dependencies in a queue that is not spread.';
    END IF;
    IF coalesce(group_key, dedup_key) IS NOT NULL THEN
        RETURN claim._on_enqueue(claim.spread_partition(parts, coalesce(group_key, dedup_key)),
                                 queue, payload, group_key, run_at, priority, dedup_key, NULL, fair_key);
    END IF;
    cnt := cardinality(parts);
    start := floor(random() * cnt)::integer;
    FOR i IN 0 .. cnt - 1 LOOP
        BEGIN
            RETURN claim._on_enqueue(parts[1 + (start + i) % cnt], queue, payload, NULL, run_at,
                                     priority, NULL, NULL, fair_key);
        EXCEPTION WHEN SQLSTATE 'PC003' THEN
            IF i = cnt - 1 THEN
                RAISE;
            END IF;
        END;
    END LOOP;
END
$$;

-- Spread: items with a group key go to the partition of their key, the
-- others in turn over the queue's partitions from a random one; one call per
-- partition that gets items (each its own transaction there). Items without
-- a key that were meant for a partition that cannot be reached go to the
-- next one; an item with a key for such a partition raises PC003, after the
-- items of the partitions asked before it were enqueued. The ids are
-- returned partition by partition, in the order of the batch within each.
CREATE FUNCTION claim.enqueue_many(queue text, payloads jsonb[], group_keys text[] DEFAULT NULL,
                                   run_at timestamptz DEFAULT NULL, priority integer DEFAULT 0,
                                   after bigint[] DEFAULT NULL, fair_key text DEFAULT NULL)
RETURNS SETOF bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    parts integer[];
    cnt integer;
    start integer;
    dest integer[];          -- the partition of each item
    j integer;
    k integer;
    sel integer[];           -- the items sent to partition k
    carried integer[] := '{}';  -- items without a key from a partition that was down
BEGIN
    SELECT s.partitions INTO parts FROM claim.spread_queues s WHERE s.queue = $1;
    IF parts IS NULL THEN
        RETURN QUERY SELECT * FROM claim._on_enqueue_many(claim.route_hash(queue), queue, payloads,
                                                          group_keys, run_at, priority, after, fair_key);
        RETURN;
    END IF;
    IF after IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = '0A000',
            MESSAGE = format('claim.enqueue_many: queue "%s" is spread over partitions, and item ids are per partition', queue),
            HINT = 'Keep an item and its dependencies in a queue that is not spread.';
    END IF;
    IF payloads IS NULL OR array_ndims(payloads) IS DISTINCT FROM 1 OR group_keys IS NOT NULL
       AND (array_ndims(group_keys) IS DISTINCT FROM 1
            OR cardinality(group_keys) <> cardinality(payloads)) THEN
        -- the partition reports the shape of the arrays
        RETURN QUERY SELECT * FROM claim._on_enqueue_many(parts[1], queue, payloads, group_keys,
                                                          run_at, priority, NULL, fair_key);
        RETURN;
    END IF;
    cnt := cardinality(parts);
    start := floor(random() * cnt)::integer;
    dest := ARRAY(SELECT CASE WHEN group_keys[i] IS NULL THEN parts[1 + (start + i) % cnt]
                              ELSE claim.spread_partition(parts, group_keys[i]) END
                  FROM generate_series(1, cardinality(payloads)) AS i ORDER BY i);
    -- a second round over the partitions takes what the last ones left
    FOR j IN 0 .. 2 * cnt - 1 LOOP
        k := parts[1 + (start + j) % cnt];
        sel := ARRAY(SELECT i FROM generate_series(1, cardinality(payloads)) AS i
                     WHERE (j < cnt AND dest[i] = k) OR i = ANY (carried) ORDER BY i);
        CONTINUE WHEN cardinality(sel) = 0;
        BEGIN
            RETURN QUERY SELECT * FROM claim._on_enqueue_many(k, queue,
                ARRAY(SELECT payloads[i] FROM unnest(sel) AS i),
                CASE WHEN group_keys IS NULL THEN NULL
                     ELSE ARRAY(SELECT group_keys[i] FROM unnest(sel) AS i) END,
                run_at, priority, NULL, fair_key);
            carried := '{}';
        EXCEPTION WHEN SQLSTATE 'PC003' THEN
            IF j = 2 * cnt - 1 OR group_keys IS NOT NULL
               AND EXISTS (SELECT FROM unnest(sel) AS i WHERE group_keys[i] IS NOT NULL) THEN
                RAISE;
            END IF;
            carried := sel;
        END;
    END LOOP;
END
$$;

-- How long a claim from a spread queue waits on one partition at a time
-- before it asks the next (setting pg_claim_proxy.spread_wait_slice, default
-- 50 ms): an item that becomes ready on any partition is returned within
-- (number of partitions - 1) x slice, plus the partition's own wake.
CREATE FUNCTION claim.spread_wait_slice()
RETURNS interval
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
SELECT coalesce(nullif(current_setting('pg_claim_proxy.spread_wait_slice', true), '')::interval,
                '50 ms'::interval)
$$;

-- A claim from a spread queue (claim_next, or group_claim without a group
-- key): asks the queue's partitions in turn, from a random one (from the
-- partition of done's tokens when there are any), for up to n items, and
-- returns those of the first partition that has any (so a batch is from one
-- partition, as complete_many wants it; a partition claims only what it
-- returns), skipping a partition that cannot be reached (PC003 when none
-- can). With wait, rounds of claims that wait one slice on each partition,
-- until items come or wait is over. done goes to the first partition asked.
CREATE FUNCTION claim.spread_claim(fn text, queue text, parts integer[], n integer,
                                   lease interval, wait interval, worker text, done bigint[])
RETURNS SETOF claim.item
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    cnt integer := cardinality(parts);
    start integer;
    i integer;
    k integer;
    got integer;
    reached integer;
    slice interval := claim.spread_wait_slice();
    deadline timestamptz := clock_timestamp() + wait;
    w interval := '0';
    d bigint[] := done;
    m text;
BEGIN
    start := coalesce(CASE WHEN done IS NOT NULL
                           THEN array_position(parts, claim.tokens_partition(done)) - 1 END,
                      floor(random() * cnt)::integer);
    LOOP
        reached := 0;
        FOR i IN 0 .. cnt - 1 LOOP
            k := parts[1 + (start + i) % cnt];
            BEGIN
                IF fn = 'claim_next' THEN
                    RETURN QUERY SELECT * FROM claim._on_claim_next(k, queue, n, lease, w, worker, d);
                ELSE
                    RETURN QUERY SELECT * FROM claim._on_group_claim(k, queue, n, lease, w, worker, NULL);
                END IF;
                GET DIAGNOSTICS got = ROW_COUNT;
                reached := reached + 1;
            EXCEPTION WHEN SQLSTATE 'PC003' THEN
                GET STACKED DIAGNOSTICS m = MESSAGE_TEXT;
                got := 0;
            END;
            d := NULL;
            IF got > 0 THEN
                RETURN;
            END IF;
        END LOOP;
        IF reached = 0 THEN
            RAISE EXCEPTION USING ERRCODE = 'PC003',
                MESSAGE = format('claim.%s: no partition of spread queue "%s" can be reached: %s', fn, queue, m),
                HINT = 'Claims work again once a partition of the queue is back.';
        END IF;
        EXIT WHEN clock_timestamp() >= deadline;
        w := least(slice, deadline - clock_timestamp());
        start := start + 1;
    END LOOP;
END
$$;

-- Spread: claim.spread_claim.
CREATE FUNCTION claim.claim_next(queue text, n integer DEFAULT 1, lease interval DEFAULT NULL,
                                 wait interval DEFAULT '0', worker text DEFAULT NULL,
                                 done bigint[] DEFAULT NULL)
RETURNS SETOF claim.item
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    parts integer[];
BEGIN
    SELECT s.partitions INTO parts FROM claim.spread_queues s WHERE s.queue = $1;
    IF parts IS NULL OR n IS NULL OR n < 1 OR wait IS NULL OR wait < '0' THEN
        -- the queue's partition, or the first, reports a bad argument
        RETURN QUERY SELECT * FROM claim._on_claim_next(coalesce(parts[1], claim.route_hash(queue)),
                                                        queue, n, lease, wait, worker, done);
        RETURN;
    END IF;
    RETURN QUERY SELECT * FROM claim.spread_claim('claim_next', queue, parts, n, lease, wait, worker, done);
END
$$;

-- Spread: with group_key, the partition of that key; without,
-- claim.spread_claim until one partition returns a group.
CREATE FUNCTION claim.group_claim(queue text, max_items integer DEFAULT 1000,
                                  lease interval DEFAULT NULL, wait interval DEFAULT '0',
                                  worker text DEFAULT NULL, group_key text DEFAULT NULL)
RETURNS SETOF claim.item
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    parts integer[];
BEGIN
    SELECT s.partitions INTO parts FROM claim.spread_queues s WHERE s.queue = $1;
    IF parts IS NULL OR group_key IS NOT NULL OR wait IS NULL OR wait < '0' THEN
        RETURN QUERY SELECT * FROM claim._on_group_claim(
            CASE WHEN parts IS NULL THEN claim.route_hash(queue)
                 ELSE claim.spread_partition(parts, group_key) END,
            queue, max_items, lease, wait, worker, group_key);
        RETURN;
    END IF;
    RETURN QUERY SELECT * FROM claim.spread_claim('group_claim', queue, parts, max_items, lease, wait,
                                                  worker, NULL);
END
$$;

-- A schedule fires on the partition of its queue (of a spread queue: that
-- of its group key, else of its name). Its name is looked up on every
-- partition by unschedule: keep schedule names unique across queues.
CREATE FUNCTION claim.schedule(name text, cron text, queue text, payload jsonb DEFAULT '{}',
                               group_key text DEFAULT NULL, priority integer DEFAULT 0,
                               timezone text DEFAULT 'UTC')
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    parts integer[];
BEGIN
    SELECT s.partitions INTO parts FROM claim.spread_queues s WHERE s.queue = $3;
    PERFORM claim._on_schedule(
        CASE WHEN parts IS NULL THEN claim.route_hash(queue)
             ELSE claim.spread_partition(parts, coalesce(group_key, name)) END,
        name, cron, queue, payload, group_key, priority, timezone);
END
$$;

-- ------------------------------------------- answered by every partition

-- The fair keys of every partition (claim.fair_stats below).
CREATE FUNCTION claim.partition_fair_stats(
    OUT queue text, OUT fair_key text, OUT weight integer, OUT ready bigint, OUT claimed bigint,
    OUT handed_last_minute bigint, OUT active boolean)
RETURNS SETOF record LANGUAGE plproxy AS $$
    CLUSTER 'claim_cluster';
    RUN ON ALL;
    SELECT f.queue, f.fair_key, f.weight, f.ready, f.claimed, f.handed_last_minute, f.active
    FROM claim.fair_stats f;
$$;

-- Each PL/Proxy function that runs on all partitions becomes claim._all_<f>,
-- and claim.<f> calls it and raises PC003 when a partition cannot be
-- reached. The views are made again over these.
DROP VIEW claim.queue_stats, claim.dead_items, claim.claimed_items, claim.finished_items,
          claim.blocked_groups, claim.leases, claim.schedules;

DO $gen$
DECLARE
    r record;
BEGIN
    FOR r IN
        SELECT p.oid::regprocedure AS f, p.proname, p.prosrc,
               pg_catalog.pg_get_function_arguments(p.oid) AS args,
               pg_catalog.pg_get_function_result(p.oid) AS result,
               pg_catalog.pg_get_function_identity_arguments(p.oid) AS ident,
               coalesce((SELECT pg_catalog.string_agg(a.n, ', ' ORDER BY a.o)
                         FROM unnest(p.proargnames, p.proargmodes) WITH ORDINALITY AS a(n, m, o)
                         WHERE a.m IS NULL OR a.m = 'i'), '') AS names,
               pg_catalog.has_function_privilege('public', p.oid, 'EXECUTE') AS public_may
        FROM pg_catalog.pg_proc p
        JOIN pg_catalog.pg_depend d ON d.classid = 'pg_catalog.pg_proc'::regclass AND d.objid = p.oid
             AND d.refclassid = 'pg_catalog.pg_extension'::regclass AND d.deptype = 'e'
        JOIN pg_catalog.pg_extension e ON e.oid = d.refobjid AND e.extname = 'pg_claim_proxy'
        JOIN pg_catalog.pg_language l ON l.oid = p.prolang AND l.lanname = 'plproxy'
        WHERE p.prosrc ~ 'RUN ON ALL'
    LOOP
        EXECUTE pg_catalog.format('DROP FUNCTION %s', r.f);
        -- the partition's function: the one the body names, else its own name
        EXECUTE pg_catalog.format(
            'CREATE FUNCTION claim.%I(%s) RETURNS %s LANGUAGE plproxy AS $b$%s%s$b$',
            '_all_' || r.proname, r.args, r.result, r.prosrc,
            CASE WHEN r.prosrc ~ 'SELECT' THEN ''
                 ELSE pg_catalog.format('    SELECT * FROM claim.%I(%s);' || chr(10), r.proname, r.names) END);
        EXECUTE pg_catalog.format(
            'CREATE FUNCTION claim.%I(%s) RETURNS %s LANGUAGE plpgsql'
            ' SET search_path = pg_catalog, pg_temp AS $b$'
            ' DECLARE m text; BEGIN RETURN QUERY SELECT * FROM claim.%I(%s);'
            ' EXCEPTION WHEN internal_error THEN'
            ' GET STACKED DIAGNOSTICS m = MESSAGE_TEXT;'
            ' PERFORM claim.raise_unreachable(%L, NULL, m); RAISE; END $b$',
            r.proname, r.args, r.result, '_all_' || r.proname, r.names, r.proname);
        IF NOT r.public_may THEN
            EXECUTE pg_catalog.format('REVOKE EXECUTE ON FUNCTION claim.%I(%s), claim.%I(%s) FROM PUBLIC',
                                      r.proname, r.ident, '_all_' || r.proname, r.ident);
        END IF;
    END LOOP;

    FOR r IN SELECT v FROM unnest(ARRAY['dead_items', 'claimed_items', 'finished_items',
                                        'blocked_groups', 'leases', 'schedules']) AS v LOOP
        EXECUTE pg_catalog.format('CREATE VIEW claim.%I AS SELECT * FROM claim.%I()', r.v,
                                  'partition_' || r.v);
        EXECUTE pg_catalog.format('REVOKE ALL ON claim.%I FROM PUBLIC', r.v);
    END LOOP;
END
$gen$;

-- A fair key of a spread queue (on several partitions) is one row, summed.
CREATE VIEW claim.fair_stats AS
SELECT f.queue, f.fair_key, max(f.weight) AS weight, sum(f.ready)::bigint AS ready,
       sum(f.claimed)::bigint AS claimed, sum(f.handed_last_minute)::bigint AS handed_last_minute,
       bool_or(f.active) AS active
FROM claim.partition_fair_stats() f
GROUP BY f.queue, f.fair_key;
REVOKE ALL ON claim.fair_stats FROM PUBLIC;

-- A queue spread over partitions is one row, its figures summed (oldest:
-- the largest age; paused: on any partition).
CREATE VIEW claim.queue_stats AS
SELECT s.queue, sum(s.ready)::bigint AS ready, sum(s.scheduled)::bigint AS scheduled,
       sum(s.claimed)::bigint AS claimed, sum(s.dead)::bigint AS dead,
       max(s.oldest_ready_age) AS oldest_ready_age, sum(s.waiting)::bigint AS waiting,
       bool_or(s.paused) AS paused
FROM claim.partition_queue_stats() s
GROUP BY s.queue;

-- metrics(): one row per queue, a spread queue's figures summed (the same
-- columns as the partitions' metrics()).
ALTER FUNCTION claim.metrics() RENAME TO partition_metrics;
DO $gen$
BEGIN
    EXECUTE pg_catalog.format(
        'CREATE FUNCTION claim.metrics(%s) RETURNS SETOF record LANGUAGE sql VOLATILE'
        ' SET search_path = pg_catalog, pg_temp AS $b$'
        ' SELECT m.queue, sum(m.enqueued)::bigint, sum(m.claimed)::bigint, sum(m.completed)::bigint,'
        ' sum(m.failed)::bigint, sum(m.dead)::bigint, sum(m.expired)::bigint,'
        ' sum(m.cancelled)::bigint, sum(m.ready)::bigint, sum(m.scheduled)::bigint,'
        ' sum(m.in_flight)::bigint, sum(m.dead_items)::bigint, sum(m.waiting)::bigint,'
        ' max(m.oldest_ready_age), bool_or(m.paused), sum(m.waiters)::integer'
        ' FROM claim.partition_metrics() m GROUP BY m.queue $b$',
        pg_catalog.pg_get_function_arguments('claim.partition_metrics()'::pg_catalog.regprocedure));
END
$gen$;

-- ------------------------------------------------------------- privileges

REVOKE EXECUTE ON FUNCTION claim.create_queue(text, interval, integer, interval, interval, integer,
                                               integer, integer, interval, boolean, boolean, boolean,
                                               integer[]) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION claim.alter_queue(text, interval, integer, interval, interval, integer,
                                              integer, integer, interval, boolean, boolean) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION claim.set_fair_weight(text, text, integer) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION claim.schedule(text, text, text, jsonb, text, integer, text) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION claim.drop_queue(text) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION claim.pause(text) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION claim.resume(text) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION claim.redrive(text, bigint[]) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION claim.metrics() FROM PUBLIC;
REVOKE ALL ON claim.queue_stats FROM PUBLIC;
