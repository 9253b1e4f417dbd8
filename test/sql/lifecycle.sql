-- Job lifecycle: results and retention, item_state, cancel, pause and
-- resume, dependencies (after), the one-statement loop (claim_next done),
-- alter_queue; every error they raise.
CREATE EXTENSION pg_claim;

\getenv abs_srcdir PG_ABS_SRCDIR
\i :abs_srcdir/sql/include/try.sql

-- ---------------------------------------------------------------- retention
SELECT claim.create_queue('kept', lease => '1 hour', retain => '1 hour');
SELECT claim.create_queue('plain', lease => '1 hour');
SELECT name, retain, paused FROM claim.queues ORDER BY name;
SELECT pg_temp.try($$SELECT claim.create_queue('bad', retain => '-1 second')$$);
SELECT pg_temp.try($$SELECT claim.create_queue('bad', retain => NULL)$$);
SELECT pg_temp.try($$SELECT claim.create_queue('bad', retain => '20 years')$$);

SELECT claim.enqueue('kept', '{"n": 1}', group_key => 'g1') AS k1 \gset
SELECT claim.enqueue('kept', '{"n": 2}') AS k2 \gset
SELECT claim.enqueue('plain', '{"n": 3}') AS p1 \gset
SELECT (claim.item_state('kept', :k1)).state AS before_claim;
SELECT token AS t1 FROM claim.claim_next('kept') \gset
SELECT state, attempt, result, error, finished_at IS NULL AS unfinished
FROM claim.item_state('kept', :k1);
SELECT claim.complete(:t1, '{"answer": 42}');
SELECT state, attempt, result, error, finished_at IS NOT NULL AS finished
FROM claim.item_state('kept', :k1);
SELECT queue, id = :k1 AS is_k1, group_key, payload, state, result, attempts
FROM claim.finished_items WHERE queue = 'kept';

-- a result without retention is accepted and not kept
SELECT token AS tp FROM claim.claim_next('plain') \gset
SELECT claim.complete(:tp, '{"dropped": true}');
SELECT (claim.item_state('plain', :p1)).state IS NULL AS unknown_after_complete;
SELECT count(*) FROM claim.finished_items WHERE queue = 'plain';

-- the array form with results
SELECT claim.enqueue('kept', jsonb_build_object('n', g)) FROM generate_series(10, 12) g;
SELECT array_agg(token ORDER BY id) AS toks FROM claim.claim_next('kept', n => 10) \gset
SELECT claim.complete_many(:'toks'::bigint[], results => ARRAY['{"r": 1}', '{"r": 2}', NULL, '{"r": 4}']::jsonb[]);
SELECT pg_temp.try(format('SELECT claim.complete_many(%L::bigint[])', :'toks'));
SELECT pg_temp.try($$SELECT claim.complete_many(ARRAY[1, 2]::bigint[], results => ARRAY['{}']::jsonb[])$$);
SELECT payload->>'n' AS n, result FROM claim.finished_items
WHERE queue = 'kept' AND state = 'completed' ORDER BY id;

-- ---------------------------------------------------------------- item_state
SELECT claim.enqueue('kept', '{"later": 1}', run_at => clock_timestamp() + interval '1 day') AS sch \gset
SELECT (claim.item_state('kept', :sch)).state;
SELECT (claim.item_state('kept', :k2)).state;
SELECT (claim.item_state('kept', -1)).state IS NULL AS unknown;
SELECT (claim.item_state('plain', :k2)).state IS NULL AS other_queue;
SELECT pg_temp.try($$SELECT claim.item_state('nope', 1)$$);
SELECT pg_temp.try($$SELECT claim.item_state(NULL, 1)$$);
SELECT pg_temp.try($$SELECT claim.item_state('kept', NULL)$$);
SELECT pg_temp.try($$SELECT claim.item_state('kept', 1, NULL)$$);
SELECT pg_temp.try($$SELECT claim.item_state('kept', 1, '-1 second')$$);
SELECT pg_temp.try($$SELECT claim.item_state('kept', 1, '2 hours')$$);
-- a wait on an unfinished item ends with its current state
SELECT (claim.item_state('kept', :sch, wait => '50 ms')).state;

-- ---------------------------------------------------------------- cancel
SELECT claim.enqueue('kept', '{"c": 1}') AS c1 \gset
SELECT claim.enqueue('kept', '{"c": 2}') AS c2 \gset
SELECT claim.cancel_many('kept', ARRAY[:c1, :c1, :sch, -5]);
SELECT (claim.item_state('kept', :c1)).state, (claim.item_state('kept', :sch)).state;
-- already finished: 0
SELECT claim.cancel_many('kept', ARRAY[:c1]);
SELECT claim.cancel_many('kept', ARRAY[]::bigint[]);
-- a claimed item: its token is stale from the cancel on
SELECT id AS cc, token AS ct FROM claim.claim_next('kept') \gset
SELECT claim.cancel_many('kept', ARRAY[:cc]);
SELECT pg_temp.try(format('SELECT claim.complete(%s)', :ct));
SELECT pg_temp.try(format('SELECT claim.extend(%s)', :ct));
SELECT pg_temp.try(format('SELECT claim.fail(%s)', :ct));
SELECT pg_temp.try(format('SELECT claim.assert_token(%s)', :ct));
SELECT pg_temp.try($$SELECT claim.cancel_many('nope', ARRAY[1])$$);
SELECT pg_temp.try($$SELECT claim.cancel_many(NULL, ARRAY[1])$$);
SELECT pg_temp.try($$SELECT claim.cancel_many('kept', NULL)$$);
SELECT pg_temp.try($$SELECT claim.cancel_many('kept', ARRAY[1, NULL])$$);
SELECT pg_temp.try($$SELECT claim.cancel_many('kept', ARRAY[[1], [2]])$$);
-- an item of another queue is not cancelled through this one
SELECT claim.enqueue('plain', '{}') AS p2 \gset
SELECT claim.cancel_many('kept', ARRAY[:p2]);
SELECT (claim.item_state('plain', :p2)).state;
-- without retention a cancelled item is gone
SELECT claim.cancel_many('plain', ARRAY[:p2]);
SELECT (claim.item_state('plain', :p2)).state IS NULL AS gone;

-- ---------------------------------------------------------------- pause
SELECT claim.create_queue('pq', lease => '1 hour');
SELECT claim.enqueue('pq', '{"p": 1}') AS pi \gset
SELECT claim.pause('pq');
SELECT queue, ready, paused FROM claim.queue_stats WHERE queue = 'pq';
SELECT count(*) AS claimed_while_paused FROM claim.claim_next('pq');
SELECT count(*) AS waited_while_paused FROM claim.claim_next('pq', wait => '50 ms');
SELECT claim.enqueue('pq', '{"p": 2}') IS NOT NULL AS enqueue_works;
-- again: no error
SELECT claim.pause('pq');
SELECT claim.resume('pq');
SELECT queue, ready, paused FROM claim.queue_stats WHERE queue = 'pq';
SELECT id = :pi AS first, token AS pt FROM claim.claim_next('pq') \gset
SELECT :'first' AS first_item_first;
-- live claims keep working while paused
SELECT claim.pause('pq');
SELECT claim.extend(:pt) > clock_timestamp() AS extended;
SELECT claim.complete(:pt);
SELECT claim.resume('pq');
SELECT pg_temp.try($$SELECT claim.pause('nope')$$);
SELECT pg_temp.try($$SELECT claim.resume('nope')$$);
SELECT pg_temp.try($$SELECT claim.pause(NULL)$$);

-- ---------------------------------------------------------------- alter_queue
SELECT claim.alter_queue('pq', max_attempts => 7);
SELECT name, lease, max_attempts, backoff, retain FROM claim.queues WHERE name = 'pq';
SELECT claim.alter_queue('pq', lease => '2 minutes', backoff => '5 seconds', retain => '1 day');
SELECT name, lease, max_attempts, backoff, retain FROM claim.queues WHERE name = 'pq';
SELECT claim.alter_queue('pq');
SELECT name, lease, max_attempts, backoff, retain FROM claim.queues WHERE name = 'pq';
SELECT pg_temp.try($$SELECT claim.alter_queue('nope', max_attempts => 2)$$);
SELECT pg_temp.try($$SELECT claim.alter_queue(NULL)$$);
SELECT pg_temp.try($$SELECT claim.alter_queue('pq', lease => '0 s')$$);
SELECT pg_temp.try($$SELECT claim.alter_queue('pq', max_attempts => 0)$$);
SELECT pg_temp.try($$SELECT claim.alter_queue('pq', backoff => '-1 s')$$);
SELECT pg_temp.try($$SELECT claim.alter_queue('pq', retain => '-1 s')$$);

-- ---------------------------------------------------------------- dependencies
SELECT claim.create_queue('flow', lease => '1 hour', max_attempts => 1, retain => '1 hour');
SELECT claim.enqueue('flow', '{"step": "a"}') AS a \gset
SELECT claim.enqueue('flow', '{"step": "b"}') AS b \gset
-- fan-in, other queue
SELECT claim.enqueue('kept', '{"step": "c"}', after => ARRAY[:a, :b]) AS c \gset
-- fan-out
SELECT claim.enqueue('flow', '{"step": "d"}', after => ARRAY[:a]) AS d \gset
-- a chain
SELECT claim.enqueue('flow', '{"step": "e"}', after => ARRAY[:d]) AS e \gset
-- unknown parent
SELECT claim.enqueue('flow', '{"step": "f"}', after => ARRAY[-7]) AS f \gset
SELECT (claim.item_state('kept', :c)).state AS c, (claim.item_state('flow', :d)).state AS d,
       (claim.item_state('flow', :f)).state AS f;
SELECT queue, waiting FROM claim.queue_stats WHERE queue IN ('flow', 'kept') ORDER BY queue;
-- the ready ones are a, b and f; c, d and e wait
SELECT array_agg(payload->>'step' ORDER BY id) FROM claim.claim_next('flow', n => 10);
SELECT claim.complete(token) FROM claim.claimed_items WHERE queue = 'flow' AND id = :a;
SELECT (claim.item_state('kept', :c)).state AS c, (claim.item_state('flow', :d)).state AS d;
SELECT claim.complete(token) FROM claim.claimed_items WHERE queue = 'flow' AND id = :b;
SELECT (claim.item_state('kept', :c)).state AS c_after_both;
-- a parent that dies takes its waiting children with it, down the chain
SELECT token AS dt FROM claim.claim_next('flow') \gset
SELECT claim.fail(:dt, 'boom');
SELECT (claim.item_state('flow', :d)).state AS d, (claim.item_state('flow', :e)).state AS e,
       (claim.item_state('flow', :e)).error AS e_error;
-- cancelled parents cancel their children
SELECT claim.enqueue('flow', '{"step": "g"}') AS g \gset
SELECT claim.enqueue('flow', '{"step": "h"}', after => ARRAY[:g]) AS h \gset
SELECT claim.cancel_many('flow', ARRAY[:g]);
SELECT (claim.item_state('flow', :h)).state AS h;
-- a child whose parent already finished dead or cancelled ends the same way at once
SELECT (claim.item_state('flow', claim.enqueue('flow', '{}', after => ARRAY[:g]))).state AS after_cancelled;
SELECT (claim.item_state('flow', claim.enqueue('flow', '{}', after => ARRAY[:d]))).state AS after_dead;
-- scheduled children become scheduled, not ready
SELECT claim.enqueue('flow', '{"step": "i"}') AS i \gset
SELECT claim.enqueue('flow', '{"step": "j"}', run_at => clock_timestamp() + interval '1 day',
                     after => ARRAY[:i]) AS j \gset
SELECT token AS it FROM claim.claim_next('flow') \gset
SELECT claim.complete(:it);
SELECT (claim.item_state('flow', :j)).state AS j;
-- enqueue_batch with after
SELECT claim.enqueue('flow', '{"step": "k"}') AS k \gset
SELECT count(*) FROM claim.enqueue_many('flow', ARRAY['{"b": 1}', '{"b": 2}']::jsonb[], after => ARRAY[:k]);
SELECT waiting FROM claim.queue_stats WHERE queue = 'flow';
SELECT pg_temp.try($$SELECT claim.enqueue('flow', '{}', after => ARRAY[1, NULL])$$);
SELECT pg_temp.try($$SELECT claim.enqueue('flow', '{}', after => ARRAY[[1], [2]])$$);
SELECT claim.enqueue('flow', '{}', after => ARRAY[]::bigint[]) IS NOT NULL AS empty_after_is_ready;

-- dropping a queue cancels the items of other queues that wait for its items
SELECT claim.create_queue('doomed');
SELECT claim.enqueue('doomed', '{}') AS dp \gset
SELECT claim.enqueue('flow', '{"step": "orphan"}', after => ARRAY[:dp]) AS orphan \gset
SELECT claim.drop_queue('doomed');
SELECT (claim.item_state('flow', :orphan)).state AS orphan;
SELECT count(*) AS edges_left FROM claim.item_parents WHERE parent_id = :dp OR child_id = :orphan;

-- ---------------------------------------------------------------- claim_next(done)
SELECT claim.create_queue('loop', lease => '1 hour', retain => '1 hour');
SELECT claim.enqueue('loop', jsonb_build_object('n', g)) FROM generate_series(1, 3) g;
SELECT token AS l1 FROM claim.claim_next('loop') \gset
SELECT token AS l2 FROM claim.claim_next('loop', done => ARRAY[:l1]) \gset
SELECT (claim.item_state('loop', min(id))).state FROM claim.finished_items WHERE queue = 'loop';
-- a stale token in done: PC001, nothing completed and nothing claimed
SELECT pg_temp.try(format('SELECT * FROM claim.claim_next(%L, done => ARRAY[%s, %s])', 'loop', :l2, :l1));
SELECT count(*) AS still_claimed FROM claim.claimed_items WHERE queue = 'loop' AND token = :l2;
SELECT count(*) AS ready FROM claim.queue_stats WHERE queue = 'loop' AND ready = 1;
SELECT count(*) FROM claim.claim_next('loop', done => ARRAY[]::bigint[]);
SELECT pg_temp.try($$SELECT * FROM claim.claim_next('loop', done => ARRAY[1, NULL])$$);

-- ---------------------------------------------------------------- privileges
CREATE ROLE lifecycle_nobody;
GRANT USAGE ON SCHEMA claim TO lifecycle_nobody;
SET ROLE lifecycle_nobody;
SELECT pg_temp.try($$SELECT claim.pause('pq')$$);
SELECT pg_temp.try($$SELECT claim.resume('pq')$$);
SELECT pg_temp.try($$SELECT claim.alter_queue('pq', max_attempts => 2)$$);
SELECT pg_temp.try($$SELECT claim.cancel_many('pq', ARRAY[1])$$);
SELECT pg_temp.try($$SELECT claim.item_state('pq', 1)$$);
RESET ROLE;
DROP OWNED BY lifecycle_nobody;
DROP ROLE lifecycle_nobody;

DROP EXTENSION pg_claim;
