-- Queue core: the whole SQL API and every error it raises.
CREATE EXTENSION pg_claim;

\getenv abs_srcdir PG_ABS_SRCDIR
\i :abs_srcdir/sql/include/try.sql

-- The schema, not relocatable, not trusted.
SELECT extname, extrelocatable, n.nspname
FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace
WHERE extname = 'pg_claim';

-- ---------------------------------------------------------------- create_queue
SELECT claim.create_queue('jobs', lease => '30 seconds', max_attempts => 3, backoff => '1 second');
SELECT pg_temp.try($$SELECT claim.create_queue('jobs')$$);
SELECT pg_temp.try($$SELECT claim.create_queue('')$$);
SELECT pg_temp.try($$SELECT claim.create_queue('1abc')$$);
SELECT pg_temp.try($$SELECT claim.create_queue('bad-name')$$);
SELECT pg_temp.try($$SELECT claim.create_queue(repeat('x', 64))$$);
SELECT pg_temp.try($$SELECT claim.create_queue(repeat('x', 63))$$);
SELECT pg_temp.try($$SELECT claim.create_queue(NULL)$$);
SELECT pg_temp.try($$SELECT claim.create_queue('q2', lease => '0 seconds')$$);
SELECT pg_temp.try($$SELECT claim.create_queue('q2', lease => '-1 second')$$);
SELECT pg_temp.try($$SELECT claim.create_queue('q2', lease => '8 days')$$);
SELECT pg_temp.try($$SELECT claim.create_queue('q2', lease => NULL)$$);
SELECT pg_temp.try($$SELECT claim.create_queue('q2', max_attempts => 0)$$);
SELECT pg_temp.try($$SELECT claim.create_queue('q2', backoff => '-1 second')$$);
SELECT pg_temp.try($$SELECT claim.create_queue('q2', backoff => '1000 years')$$);
SELECT name, lease, max_attempts, backoff FROM claim.queues ORDER BY name;

-- ---------------------------------------------------------------- enqueue
SELECT claim.enqueue('jobs', '{"n": 1}') AS id1 \gset
SELECT claim.enqueue('jobs', '{"n": 2}') AS id2 \gset
SELECT :id2 > :id1 AS ids_grow;
SELECT pg_temp.try($$SELECT claim.enqueue('nope', '{}')$$);
SELECT pg_temp.try($$SELECT claim.enqueue(NULL, '{}')$$);
SELECT pg_temp.try($$SELECT claim.enqueue('jobs', NULL)$$);
SELECT pg_temp.try($$SELECT claim.enqueue('jobs', '{}', priority => NULL)$$);
SELECT pg_temp.try($$SELECT claim.enqueue('jobs', '{}', group_key => '')$$);
SELECT pg_temp.try($$SELECT claim.enqueue('jobs', '{}', dedup_key => repeat('k', 1025))$$);
SELECT pg_temp.try($$SELECT claim.enqueue('jobs', '{}', run_at => 'infinity')$$);

-- dedup: while an unfinished item has the key, its id comes back
SELECT claim.enqueue('jobs', '{"d": 1}', dedup_key => 'k1') AS d1 \gset
SELECT claim.enqueue('jobs', '{"d": 2}', dedup_key => 'k1') = :d1 AS same_item;
SELECT payload FROM claim.items WHERE id = :d1;

-- enqueue_batch
SELECT count(*) FROM claim.enqueue_many('jobs', ARRAY['{"b": 1}', '{"b": 2}', '{"b": 3}']::jsonb[]);
SELECT pg_temp.try($$SELECT claim.enqueue_many('jobs', ARRAY['{}', NULL]::jsonb[])$$);
SELECT pg_temp.try($$SELECT claim.enqueue_many('jobs', ARRAY['{}']::jsonb[], ARRAY['a', 'b'])$$);
SELECT pg_temp.try($$SELECT claim.enqueue_many('nope', ARRAY['{}']::jsonb[])$$);
SELECT count(*) FROM claim.enqueue_many('jobs', ARRAY[]::jsonb[]);

SELECT queue, ready, scheduled, claimed, dead FROM claim.queue_stats ORDER BY queue;

-- ---------------------------------------------------------------- claim_next
-- priority first, then age
SELECT claim.enqueue('jobs', '{"urgent": true}', priority => 10) AS urgent \gset
SELECT id = :urgent AS urgent_first, attempt, payload, token > 0 AS has_token,
       lease_until > clock_timestamp() + interval '29 seconds' AS lease_from_server_clock
FROM claim.claim_next('jobs');

SELECT array_agg(payload ORDER BY id) FROM claim.claim_next('jobs', n => 3);
SELECT pg_temp.try($$SELECT claim.claim_next('jobs', n => 0)$$);
SELECT pg_temp.try($$SELECT claim.claim_next('jobs', n => 10001)$$);
SELECT pg_temp.try($$SELECT claim.claim_next('jobs', n => NULL)$$);
SELECT pg_temp.try($$SELECT claim.claim_next('jobs', lease => '0 s')$$);
SELECT pg_temp.try($$SELECT claim.claim_next('jobs', lease => '1 year')$$);
SELECT pg_temp.try($$SELECT claim.claim_next('jobs', wait => '-1 s')$$);
SELECT pg_temp.try($$SELECT claim.claim_next('jobs', wait => '2 hours')$$);
SELECT pg_temp.try($$SELECT claim.claim_next('nope')$$);
SELECT pg_temp.try($$SELECT claim.claim_next(NULL)$$);

-- a lease given per call, and the worker name
SELECT lease_until < clock_timestamp() + interval '6 seconds' AS short_lease
FROM claim.claim_next('jobs', lease => '5 seconds', worker => 'w1');
SELECT worker, live FROM claim.claimed_items WHERE worker IS NOT NULL;

-- ---------------------------------------------------------------- tokens
SELECT claim.create_queue('t', lease => '1 hour', max_attempts => 2, backoff => '0');
SELECT claim.enqueue('t', '{"k": "a"}') AS ta \gset
SELECT token AS tok1 FROM claim.claim_next('t') \gset
SELECT claim.complete(:tok1);
-- complete is final: the same token again, and unknown tokens, are stale
SELECT pg_temp.try(format('SELECT claim.complete(%s)', :tok1));
SELECT pg_temp.try('SELECT claim.complete(999999999)');
SELECT pg_temp.try('SELECT claim.fail(999999999)');
SELECT pg_temp.try('SELECT claim.extend(999999999)');
SELECT pg_temp.try('SELECT claim.release(999999999)');
SELECT pg_temp.try('SELECT claim.assert_token(999999999)');
SELECT pg_temp.try('SELECT claim.complete(NULL::bigint)');
SELECT pg_temp.try('SELECT claim.complete_many(ARRAY[NULL]::bigint[])');

-- extend moves the lease on the server clock
SELECT claim.enqueue('t', '{"k": "b"}') AS tb \gset
SELECT token AS tok2 FROM claim.claim_next('t') \gset
SELECT claim.extend(:tok2, '2 hours') > clock_timestamp() + interval '119 minutes' AS extended;
SELECT claim.extend(:tok2) < clock_timestamp() + interval '61 minutes' AS queue_default;
SELECT pg_temp.try(format('SELECT claim.extend(%s, %L)', :tok2, '0 s'));
SELECT claim.assert_token(:tok2);

-- release gives it back without using up an attempt
SELECT claim.release(:tok2);
SELECT pg_temp.try(format('SELECT claim.release(%s)', :tok2));
SELECT token AS tok3, attempt FROM claim.claim_next('t') \gset
SELECT :tok3 > :tok2 AS higher_token, :attempt AS attempt_after_release;
SELECT pg_temp.try(format('SELECT claim.complete(%s)', :tok2));

-- fail: retried (backoff 0 = at once) and counted; dead after max_attempts
SELECT claim.fail(:tok3, 'first error');
SELECT token AS tok4, attempt FROM claim.claim_next('t') \gset
SELECT :tok4 > :tok3 AS higher_token, :attempt AS attempt_after_fail;
SELECT claim.fail(:tok4, 'second error');
SELECT count(*) AS nothing_left FROM claim.claim_next('t');
SELECT queue, attempts, last_error, payload FROM claim.dead_items;
SELECT queue, ready, claimed, dead FROM claim.queue_stats WHERE queue = 't';

-- redrive brings dead items back
SELECT pg_temp.try($$SELECT claim.redrive('nope')$$);
SELECT claim.redrive('t');
SELECT attempt, payload FROM claim.claim_next('t');

-- fail with retry_in schedules the item
SELECT claim.enqueue('t', '{"k": "c"}') AS tc \gset
SELECT token AS tok5 FROM claim.claim_next('t') \gset
SELECT pg_temp.try(format('SELECT claim.fail(%s, NULL, %L)', :tok5, '-1 s'));
SELECT claim.fail(:tok5, 'later', retry_in => '1 hour');
SELECT queue, ready, scheduled FROM claim.queue_stats WHERE queue = 't';
SELECT count(*) AS not_yet FROM claim.claim_next('t') WHERE id = :tc;

-- batch completion: all or nothing unless skip_stale
SELECT claim.create_queue('b');
SELECT count(*) FROM claim.enqueue_many('b', ARRAY['{}', '{}', '{}']::jsonb[]);
SELECT array_agg(token) AS toks FROM claim.claim_next('b', 3) \gset
SELECT pg_temp.try(format('SELECT claim.complete_many(%L::bigint[])', '{999999999}'));
SELECT pg_temp.try(format('SELECT claim.complete_many(%L::bigint[] || 999999999::bigint)', :'toks'));
SELECT claim.complete_many(:'toks'::bigint[] || 999999999::bigint, skip_stale => true);
SELECT claim.complete_many(ARRAY[]::bigint[]);
SELECT queue, ready, claimed FROM claim.queue_stats WHERE queue = 'b';

-- delayed items wait for run_at
SELECT claim.enqueue('b', '{"later": true}', run_at => clock_timestamp() + interval '1 hour') > 0 AS enqueued;
SELECT claim.enqueue('b', '{"past": true}', run_at => clock_timestamp() - interval '1 hour') > 0 AS enqueued;
SELECT payload FROM claim.claim_next('b', 5);
SELECT queue, ready, scheduled, claimed FROM claim.queue_stats WHERE queue = 'b';

-- groups: one item per group per call, in order
SELECT claim.create_queue('g');
SELECT claim.enqueue('g', '{"s": "create"}', group_key => 'sheet42') > 0 AS enqueued;
SELECT claim.enqueue('g', '{"s": "update1"}', group_key => 'sheet42') > 0 AS enqueued;
SELECT claim.enqueue('g', '{"s": "other"}', group_key => 'sheet7') > 0 AS enqueued;
SELECT token AS gt, payload FROM claim.claim_next('g', 10) ORDER BY id LIMIT 1 \gset
SELECT :'payload' AS first_of_group;
SELECT count(*) AS blocked_while_head_claimed FROM claim.claim_next('g', 10);
SELECT claim.complete(:gt);
SELECT payload FROM claim.claim_next('g', 10);

-- lease expiry: the item is claimable again with a higher token
SELECT claim.create_queue('e', lease => '100 milliseconds');
SELECT claim.enqueue('e', '{}') > 0 AS enqueued;
SELECT token AS et1 FROM claim.claim_next('e') \gset
SELECT pg_sleep(0.2);
SELECT pg_temp.try(format('SELECT claim.complete(%s)', :et1));
SELECT token AS et2, attempt FROM claim.claim_next('e') \gset
SELECT :et2 > :et1 AS higher_token, :attempt AS attempt_after_expiry;
SELECT claim.complete(:et2);

-- max_attempts counts expiries too: an item whose last lease expires is dead
SELECT claim.create_queue('e1', lease => '50 milliseconds', max_attempts => 1);
SELECT claim.enqueue('e1', '{}') > 0 AS enqueued;
SELECT count(*) FROM claim.claim_next('e1');
SELECT pg_sleep(0.1);
SELECT count(*) AS none FROM claim.claim_next('e1');
-- the background worker kills an expired last attempt too, and may hold
-- the item while this claim walks past it: wait for the kill's commit
DO $$BEGIN FOR i IN 1..200 LOOP EXIT WHEN EXISTS (SELECT 1 FROM claim.dead_items WHERE queue = 'e1'); PERFORM pg_sleep(0.05); END LOOP; END$$;
SELECT attempts, last_error FROM claim.dead_items WHERE queue = 'e1';

-- a producer's backend caches queue ids: a queue created and used in a
-- transaction (or savepoint) that rolls back is not used afterwards
BEGIN;
SELECT claim.create_queue('rolled_back');
SELECT claim.enqueue('rolled_back', '{}') > 0 AS enqueued;
ROLLBACK;
SELECT pg_temp.try($$SELECT claim.enqueue('rolled_back', '{}')$$);
BEGIN;
SAVEPOINT s;
SELECT claim.create_queue('rolled_back');
SELECT claim.enqueue('rolled_back', '{}') > 0 AS enqueued;
ROLLBACK TO SAVEPOINT s;
SELECT pg_temp.try($$SELECT claim.enqueue('rolled_back', '{}')$$);
COMMIT;
SELECT count(*) AS orphans FROM claim.items i
WHERE NOT EXISTS (SELECT 1 FROM claim.queues q WHERE q.queue_id = i.queue_id);

-- an index an operator adds to claim.items (here with an expression) is
-- kept up to date by the paths that write without SQL
CREATE INDEX regress_items_n ON claim.items ((payload->>'n'));
SELECT claim.create_queue('indexed');
SELECT claim.enqueue('indexed', jsonb_build_object('n', g::text)) > 0 AS enqueued
FROM generate_series(1, 3) g;
SET enable_seqscan = off;
SET enable_bitmapscan = off;
EXPLAIN (COSTS OFF) SELECT count(*) FROM claim.items WHERE payload->>'n' = '2';
SELECT count(*) AS found_through_index FROM claim.items i JOIN claim.queues q USING (queue_id)
WHERE i.payload->>'n' = '2' AND q.name = 'indexed';
RESET enable_seqscan;
RESET enable_bitmapscan;
DROP INDEX claim.regress_items_n;
SELECT claim.enqueue('indexed', '{"n": "4"}') > 0 AS enqueued_after_drop;
SELECT claim.drop_queue('indexed');

-- payloads are compressed with lz4 (Debian's server is built with it)
SELECT attcompression AS payload_compression FROM pg_attribute
WHERE attrelid = 'claim.items'::regclass AND attname = 'payload';

-- drop_queue
SELECT claim.drop_queue('b');
SELECT pg_temp.try($$SELECT claim.drop_queue('b')$$);
SELECT pg_temp.try($$SELECT claim.enqueue('b', '{}')$$);

-- tokens keep growing across queues
SELECT last_value > 0 AS sequence_used FROM claim.token_seq;

-- a read-only transaction can neither claim nor complete (25006)
SELECT claim.enqueue('e', '{"ro": 1}') > 0 AS enqueued;
BEGIN READ ONLY;
SELECT pg_temp.try($$SELECT claim.claim_next('e')$$);
ROLLBACK;
SELECT token AS ro FROM claim.claim_next('e') \gset
BEGIN READ ONLY;
SELECT pg_temp.try(format('SELECT claim.complete(%s)', :ro));
ROLLBACK;
SELECT claim.complete(:ro);

-- the functions run with the caller's rights: a role without rights on the
-- tables is refused (42501), one with the documented grants works
CREATE ROLE regress_pgclaim_none;
CREATE ROLE regress_pgclaim_app;
GRANT USAGE ON SCHEMA claim TO regress_pgclaim_none, regress_pgclaim_app;
GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA claim TO regress_pgclaim_app;
GRANT USAGE ON ALL SEQUENCES IN SCHEMA claim TO regress_pgclaim_app;
SELECT claim.enqueue('e', '{"role": 1}') > 0 AS enqueued;
SET ROLE regress_pgclaim_none;
SELECT pg_temp.try($$SELECT claim.claim_next('e')$$);
SELECT pg_temp.try($$SELECT claim.complete(1)$$);
RESET ROLE;
SET ROLE regress_pgclaim_app;
SELECT token AS rt FROM claim.claim_next('e') \gset
SELECT claim.complete(:rt) AS completed_by_app;
RESET ROLE;
DROP OWNED BY regress_pgclaim_none, regress_pgclaim_app;
DROP ROLE regress_pgclaim_none, regress_pgclaim_app;

-- claim_next and complete are declared without SET search_path: the SQL they
-- run on their rarer paths (the queue lookup, promotion of due items, items
-- made dead, refusals) is pinned, so operators that shadow the built-ins on
-- the caller's search_path are never called
CREATE SCHEMA hostile_ops;
DO $$
DECLARE
    t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['bigint', 'integer', 'text', 'timestamptz'] LOOP
        EXECUTE format('CREATE FUNCTION hostile_ops.boom(%1$s, %1$s) RETURNS bool LANGUAGE plpgsql'
                       ' AS $b$BEGIN RAISE EXCEPTION ''hostile operator called''; END$b$', t);
        EXECUTE format('CREATE OPERATOR hostile_ops.= (LEFTARG = %1$s, RIGHTARG = %1$s,'
                       ' FUNCTION = hostile_ops.boom)', t);
        EXECUTE format('CREATE OPERATOR hostile_ops.<= (LEFTARG = %1$s, RIGHTARG = %1$s,'
                       ' FUNCTION = hostile_ops.boom)', t);
    END LOOP;
END $$;
SELECT claim.create_queue('hq', lease => '100 ms', max_attempts => 1);
SELECT claim.enqueue('hq', '{"n": 1}', run_at => clock_timestamp() + interval '50 ms') > 0 AS scheduled;
SELECT claim.enqueue('hq', '{"n": 2}') > 0 AS enqueued;
SELECT pg_sleep(0.1);
SET search_path = hostile_ops, pg_catalog, public;
SELECT pg_temp.try($$SELECT 1::bigint = 1::bigint$$) AS hostile_is_active;
SELECT claim.create_queue('hq2');
SELECT claim.enqueue('hq2', '{"n": 3}', dedup_key => 'k') OPERATOR(pg_catalog.=) claim.enqueue('hq2', '{"n": 4}', dedup_key => 'k') AS dedup_same_id;
SELECT claim.enqueue('hq2', '{"n": 5}') > 0 AS enqueued_new_queue;
SELECT pg_temp.try($$SELECT claim.enqueue('no_such_queue', '{}')$$) AS unknown_queue;
SELECT pg_temp.try($$SELECT claim.enqueue('no_such_queue', '{}', dedup_key => 'k')$$) AS unknown_queue_dedup;
SELECT payload, attempt FROM claim.claim_next('hq', n => 2) ORDER BY id;
SELECT pg_sleep(0.2);
SELECT count(*) AS claimed_after_expiry FROM claim.claim_next('hq');
SELECT pg_temp.try($$SELECT claim.complete(9000000000000000000)$$) AS unknown_token;
SELECT pg_temp.try($$SELECT claim.complete_many(ARRAY[9000000000000000000, 9000000000000000001])$$) AS unknown_tokens;
SHOW search_path;
RESET search_path;
SELECT payload, last_error IS NULL AS no_error FROM claim.dead_items WHERE queue = 'hq' ORDER BY id;
DROP SCHEMA hostile_ops CASCADE;
SELECT payload FROM claim.items i JOIN claim.queues q USING (queue_id) WHERE q.name = 'hq2' ORDER BY id;
SELECT claim.drop_queue('hq');
SELECT claim.drop_queue('hq2');

-- A transaction claims the items it enqueued itself, also right after a
-- claim found the queue empty (the backend's memo of empty queues does not
-- hide them).
SELECT claim.create_queue('own');
SELECT count(*) AS empty_poll FROM claim.claim_next('own');
BEGIN;
SELECT claim.enqueue('own', '{"mine": true}') > 0 AS enqueued;
SELECT payload FROM claim.claim_next('own');
ROLLBACK;
SELECT claim.drop_queue('own');

-- privileges: admin functions are not for PUBLIC, tables are not either
SELECT has_function_privilege('public', 'claim.create_queue(text, interval, integer, interval, interval, integer, integer, integer, interval, boolean, boolean)', 'EXECUTE') AS public_create,
       has_function_privilege('public', 'claim.drop_queue(text)', 'EXECUTE') AS public_drop,
       has_table_privilege('public', 'claim.items', 'SELECT') AS public_items;

DROP EXTENSION pg_claim;
