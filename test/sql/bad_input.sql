-- Bad input: every function of schema claim called with every kind of wrong
-- argument. Each case shows the SQLSTATE and message it gives ("ok: value"
-- when the input is accepted). None may give XX000 or crash the backend.
-- Tokens, ids and times vary between runs: they are hidden or compared.
CREATE EXTENSION pg_claim;
-- a call that would wait past this is a bug in the argument checks
SET statement_timeout = '20s';

-- pg_temp.try (test/sql/include/try_value.sql)
\getenv abs_srcdir PG_ABS_SRCDIR
\i :abs_srcdir/sql/include/try_value.sql

-- Tokens of each kind, for the token cases.
CREATE TEMP TABLE t (k text PRIMARY KEY, v bigint);
CREATE FUNCTION pg_temp.v(k text) RETURNS bigint LANGUAGE sql AS
$$ SELECT v FROM t WHERE t.k = $1 $$;

SELECT claim.create_queue('q', lease => '1 hour', max_attempts => 3, backoff => '1 second');
SELECT count(*) FROM (SELECT claim.enqueue('q', jsonb_build_object('n', g)) FROM generate_series(1, 5) g) s;
INSERT INTO t SELECT 'claim', token FROM claim.claim_next('q');
INSERT INTO t SELECT 'lease', claim.lease_acquire('lk', '1 minute');
INSERT INTO t SELECT 'guard', claim.guard_begin('gk', '1 minute');
SELECT k, v > 0 AS positive FROM t ORDER BY k;

-- ================================================================ create_queue
-- NULL in each position
SELECT pg_temp.try($$SELECT claim.create_queue(NULL)$$);
SELECT pg_temp.try($$SELECT claim.create_queue('c1', lease => NULL)$$);
SELECT pg_temp.try($$SELECT claim.create_queue('c1', max_attempts => NULL)$$);
SELECT pg_temp.try($$SELECT claim.create_queue('c1', backoff => NULL)$$);
-- empty, oversized and hostile names
SELECT pg_temp.try($$SELECT claim.create_queue('')$$);
SELECT pg_temp.try($$SELECT claim.create_queue(repeat('x', 1000000))$$);
SELECT pg_temp.try($$SELECT claim.create_queue('a''b')$$);
SELECT pg_temp.try($$SELECT claim.create_queue('a"b')$$);
SELECT pg_temp.try($$SELECT claim.create_queue(E'a\\b')$$);
SELECT pg_temp.try($$SELECT claim.create_queue(E'a\tb')$$);
SELECT pg_temp.try($$SELECT claim.create_queue(E'a\x01b')$$);
SELECT pg_temp.try($$SELECT claim.create_queue(E'q\n; DROP TABLE claim.items; --')$$);
SELECT pg_temp.try($$SELECT claim.create_queue(' q')$$);
SELECT pg_temp.try($$SELECT claim.create_queue('Q')$$);
SELECT pg_temp.try($$SELECT claim.create_queue('ü')$$);
SELECT pg_temp.try($$SELECT claim.create_queue(repeat('ü', 100000))$$);
-- intervals and counts out of range
SELECT pg_temp.try($$SELECT claim.create_queue('c1', lease => '0')$$);
SELECT pg_temp.try($$SELECT claim.create_queue('c1', lease => '-1 microsecond')$$);
SELECT pg_temp.try($$SELECT claim.create_queue('c1', lease => '1 month')$$);
SELECT pg_temp.try($$SELECT claim.create_queue('c1', lease => '1 mon -30 days')$$);
SELECT pg_temp.try($$SELECT claim.create_queue('c1', lease => '1 mon -29 days')$$);
SELECT pg_temp.try($$SELECT claim.create_queue('c1', lease => '178000000 years')$$);
SELECT pg_temp.try($$SELECT claim.create_queue('c1', lease => '-178000000 years')$$);
SELECT pg_temp.try($$SELECT claim.create_queue('c1', max_attempts => 0)$$);
SELECT pg_temp.try($$SELECT claim.create_queue('c1', max_attempts => -2147483648)$$);
SELECT pg_temp.try($$SELECT claim.create_queue('c1', max_attempts => 2147483647)$$);
SELECT pg_temp.try($$SELECT claim.create_queue('c1', backoff => '-1 second')$$);
SELECT pg_temp.try($$SELECT claim.create_queue('c1', backoff => '178000000 years')$$);
-- none of these made a queue
SELECT string_agg(name, ',' ORDER BY name) AS queues FROM claim.queues;

-- ================================================================ drop_queue
SELECT pg_temp.try($$SELECT claim.drop_queue(NULL)$$);
SELECT pg_temp.try($$SELECT claim.drop_queue('')$$);
SELECT pg_temp.try($$SELECT claim.drop_queue('nope')$$);
SELECT pg_temp.try($$SELECT claim.drop_queue(E'q\x01')$$);
SELECT pg_temp.try($$SELECT claim.drop_queue(repeat('q', 1000000))$$);

-- ================================================================ enqueue
SELECT pg_temp.try($$SELECT claim.enqueue(NULL, '{}')$$);
SELECT pg_temp.try($$SELECT claim.enqueue('q', NULL)$$);
SELECT pg_temp.try($$SELECT claim.enqueue('q', '{}', priority => NULL)$$);
SELECT pg_temp.try($$SELECT claim.enqueue('', '{}')$$);
SELECT pg_temp.try($$SELECT claim.enqueue('nope', '{}')$$);
SELECT pg_temp.try($$SELECT claim.enqueue(E'q''; --', '{}')$$);
SELECT pg_temp.try($$SELECT claim.enqueue(repeat('q', 1000000), '{}')$$);
SELECT pg_temp.try($$SELECT claim.enqueue('q', '{}', group_key => '')$$);
SELECT pg_temp.try($$SELECT claim.enqueue('q', '{}', group_key => repeat('g', 1025))$$);
SELECT pg_temp.try($$SELECT claim.enqueue('q', '{}', group_key => repeat('ü', 513))$$);
SELECT pg_temp.try($$SELECT claim.enqueue('q', '{}', dedup_key => '')$$);
SELECT pg_temp.try($$SELECT claim.enqueue('q', '{}', dedup_key => repeat('d', 1025))$$);
SELECT pg_temp.try($$SELECT claim.enqueue('q', '{}', run_at => 'infinity')$$);
SELECT pg_temp.try($$SELECT claim.enqueue('q', '{}', run_at => '-infinity')$$);
-- extreme but finite run_at: accepted (far past = ready now, far future = scheduled)
SELECT pg_temp.try($$SELECT claim.enqueue('q', '{"far": "past"}', run_at => '4713-01-01 00:00:00+00 BC') > 0$$);
SELECT pg_temp.try($$SELECT claim.enqueue('q', '{"far": "future"}', run_at => '294276-12-31 23:59:59+00') > 0$$);
-- the highest priority
SELECT pg_temp.try($$SELECT claim.enqueue('q', '{"p": "max"}', priority => 2147483647) > 0$$);
-- hostile keys are free text: accepted and stored as given
SELECT pg_temp.try($$SELECT claim.enqueue('q', '{}', group_key => E'g''\\"\x01', dedup_key => E'd''\\"\x01') > 0$$);
SELECT group_key = E'g''\\"\x01' AS group_kept, dedup_key = E'd''\\"\x01' AS dedup_kept
FROM claim.items WHERE dedup_key IS NOT NULL;
-- JSON that is not an object: accepted as given
SELECT pg_temp.try($$SELECT claim.enqueue('q', 'null') > 0$$);
SELECT pg_temp.try($$SELECT claim.enqueue('q', '"text"') > 0$$);
SELECT pg_temp.try($$SELECT claim.enqueue('q', '[1, [2, [3]]]') > 0$$);

-- ================================================================ enqueue_batch
SELECT pg_temp.try($$SELECT claim.enqueue_many(NULL, ARRAY['{}']::jsonb[])$$);
SELECT pg_temp.try($$SELECT claim.enqueue_many('q', NULL)$$);
SELECT pg_temp.try($$SELECT claim.enqueue_many('q', ARRAY[NULL]::jsonb[])$$);
SELECT pg_temp.try($$SELECT claim.enqueue_many('q', ARRAY['{}', NULL]::jsonb[])$$);
SELECT pg_temp.try($$SELECT claim.enqueue_many('q', ARRAY[['{}', '{}'], ['{}', '{}']]::jsonb[])$$);
-- an array whose subscripts do not start at 1: its elements in order
SELECT pg_temp.try($$SELECT count(*) FROM claim.enqueue_many('q', '[5:6]={"{}","{}"}'::jsonb[])$$);
SELECT pg_temp.try($$SELECT claim.enqueue_many('q', ARRAY['{}']::jsonb[], group_keys => ARRAY['a', 'b'])$$);
SELECT pg_temp.try($$SELECT claim.enqueue_many('q', ARRAY['{}']::jsonb[], group_keys => ARRAY[['a']])$$);
SELECT pg_temp.try($$SELECT claim.enqueue_many('q', ARRAY['{}']::jsonb[], run_at => 'infinity')$$);
SELECT pg_temp.try($$SELECT claim.enqueue_many('q', ARRAY['{}']::jsonb[], priority => NULL)$$);
SELECT pg_temp.try($$SELECT claim.enqueue_many('nope', ARRAY['{}']::jsonb[])$$);
SELECT pg_temp.try($$SELECT claim.enqueue_many('', ARRAY['{}']::jsonb[])$$);
-- an empty array and a NULL group key element are fine
SELECT pg_temp.try($$SELECT count(*) FROM claim.enqueue_many('q', ARRAY[]::jsonb[])$$);
SELECT pg_temp.try($$SELECT count(*) FROM claim.enqueue_many('q', ARRAY['{}', '{}']::jsonb[], group_keys => ARRAY['g', NULL])$$);

-- ================================================================ claim_next
SELECT pg_temp.try($$SELECT claim.claim_next(NULL)$$);
SELECT pg_temp.try($$SELECT claim.claim_next('q', n => NULL)$$);
SELECT pg_temp.try($$SELECT claim.claim_next('q', wait => NULL)$$);
SELECT pg_temp.try($$SELECT claim.claim_next('')$$);
SELECT pg_temp.try($$SELECT claim.claim_next('nope')$$);
SELECT pg_temp.try($$SELECT claim.claim_next(repeat('ü', 100000))$$);
SELECT pg_temp.try($$SELECT claim.claim_next('q', n => 0)$$);
SELECT pg_temp.try($$SELECT claim.claim_next('q', n => -1)$$);
SELECT pg_temp.try($$SELECT claim.claim_next('q', n => 2147483647)$$);
SELECT pg_temp.try($$SELECT claim.claim_next('q', lease => '0')$$);
SELECT pg_temp.try($$SELECT claim.claim_next('q', lease => '-1 second')$$);
SELECT pg_temp.try($$SELECT claim.claim_next('q', lease => '178000000 years')$$);
SELECT pg_temp.try($$SELECT claim.claim_next('q', wait => '-1 second')$$);
SELECT pg_temp.try($$SELECT claim.claim_next('q', wait => '1 hour 1 second')$$);
SELECT pg_temp.try($$SELECT claim.claim_next('q', wait => '178000000 years')$$);

-- ================================================================ group_claim
SELECT pg_temp.try($$SELECT claim.group_claim(NULL)$$);
SELECT pg_temp.try($$SELECT claim.group_claim('q', max_items => NULL)$$);
SELECT pg_temp.try($$SELECT claim.group_claim('q', wait => NULL)$$);
SELECT pg_temp.try($$SELECT claim.group_claim('nope')$$);
SELECT pg_temp.try($$SELECT claim.group_claim('q', max_items => 0)$$);
SELECT pg_temp.try($$SELECT claim.group_claim('q', max_items => -1)$$);
SELECT pg_temp.try($$SELECT claim.group_claim('q', lease => '-1 second')$$);
SELECT pg_temp.try($$SELECT claim.group_claim('q', lease => '8 days')$$);
SELECT pg_temp.try($$SELECT claim.group_claim('q', wait => '-1 second')$$);
SELECT pg_temp.try($$SELECT claim.group_claim('q', group_key => '')$$);
SELECT pg_temp.try($$SELECT claim.group_claim('q', group_key => repeat('g', 1025))$$);

-- ================================================================ complete(token)
SELECT pg_temp.try($$SELECT claim.complete(NULL::bigint)$$);
SELECT pg_temp.try($$SELECT claim.complete(0)$$);
SELECT pg_temp.try($$SELECT claim.complete(-1)$$);
SELECT pg_temp.try($$SELECT claim.complete(-9223372036854775808)$$);
SELECT pg_temp.try($$SELECT claim.complete(9223372036854775807)$$);
SELECT pg_temp.try(format('SELECT claim.complete(%s::bigint)', pg_temp.v('lease')));
SELECT pg_temp.try(format('SELECT claim.complete(%s::bigint)', pg_temp.v('guard')));

-- ================================================================ complete(tokens[])
SELECT pg_temp.try($$SELECT claim.complete_many(NULL::bigint[])$$);
SELECT pg_temp.try($$SELECT claim.complete_many(ARRAY[]::bigint[])$$);
SELECT pg_temp.try($$SELECT claim.complete_many(ARRAY[NULL]::bigint[])$$);
SELECT pg_temp.try($$SELECT claim.complete_many(ARRAY[NULL]::bigint[], skip_stale => true)$$);
SELECT pg_temp.try($$SELECT claim.complete_many(ARRAY[[1, 2], [3, 4]]::bigint[])$$);
SELECT pg_temp.try($$SELECT claim.complete_many(ARRAY[0, -1]::bigint[])$$);
SELECT pg_temp.try($$SELECT claim.complete_many(ARRAY[0, -1]::bigint[], skip_stale => true)$$);
SELECT pg_temp.try(format('SELECT claim.complete_many(ARRAY[%s]::bigint[])', pg_temp.v('lease')));

-- ================================================================ fail
SELECT pg_temp.try($$SELECT claim.fail(NULL)$$);
SELECT pg_temp.try($$SELECT claim.fail(0)$$);
SELECT pg_temp.try($$SELECT claim.fail(-1, 'boom')$$);
SELECT pg_temp.try(format('SELECT claim.fail(%s)', pg_temp.v('lease')));
SELECT pg_temp.try(format('SELECT claim.fail(%s, %L, %L)', pg_temp.v('claim'), 'x', '-1 second'));
SELECT pg_temp.try(format('SELECT claim.fail(%s, %L, %L)', pg_temp.v('claim'), 'x', '178000000 years'));

-- ================================================================ extend
SELECT pg_temp.try($$SELECT claim.extend(NULL)$$);
SELECT pg_temp.try($$SELECT claim.extend(-1)$$);
SELECT pg_temp.try(format('SELECT claim.extend(%s)', pg_temp.v('lease')));
SELECT pg_temp.try(format('SELECT claim.extend(%s, %L)', pg_temp.v('claim'), '0'));
SELECT pg_temp.try(format('SELECT claim.extend(%s, %L)', pg_temp.v('claim'), '-1 second'));
SELECT pg_temp.try(format('SELECT claim.extend(%s, %L)', pg_temp.v('claim'), '8 days'));
SELECT pg_temp.try(format('SELECT claim.extend(%s, %L)', pg_temp.v('claim'), '178000000 years'));

-- ================================================================ release
SELECT pg_temp.try($$SELECT claim.release(NULL)$$);
SELECT pg_temp.try($$SELECT claim.release(0)$$);
SELECT pg_temp.try(format('SELECT claim.release(%s)', pg_temp.v('guard')));

-- ================================================================ assert_token
SELECT pg_temp.try($$SELECT claim.assert_token(NULL)$$);
SELECT pg_temp.try($$SELECT claim.assert_token(-1)$$);
SELECT pg_temp.try(format('SELECT claim.assert_token(%s)', pg_temp.v('lease')));

-- the claim survived every bad call above and is still live
SELECT pg_temp.try(format('SELECT claim.assert_token(%s)', pg_temp.v('claim')));

-- ================================================================ redrive
SELECT pg_temp.try($$SELECT claim.redrive(NULL)$$);
SELECT pg_temp.try($$SELECT claim.redrive('')$$);
SELECT pg_temp.try($$SELECT claim.redrive('nope')$$);
SELECT pg_temp.try($$SELECT claim.redrive('q', ARRAY[]::bigint[])$$);
SELECT pg_temp.try($$SELECT claim.redrive('q', ARRAY[-1, 0]::bigint[])$$);

-- ================================================================ lease_acquire
SELECT pg_temp.try($$SELECT claim.lease_acquire(NULL, '1 minute')$$);
SELECT pg_temp.try($$SELECT claim.lease_acquire('x', NULL)$$);
SELECT pg_temp.try($$SELECT claim.lease_acquire('x', '1 minute', permits => NULL)$$);
SELECT pg_temp.try($$SELECT claim.lease_acquire('x', '1 minute', wait => NULL)$$);
SELECT pg_temp.try($$SELECT claim.lease_acquire('', '1 minute')$$);
SELECT pg_temp.try($$SELECT claim.lease_acquire(repeat('ü', 100000), '1 minute')$$);
SELECT pg_temp.try($$SELECT claim.lease_acquire('x', '1 minute', holder => repeat('h', 1000000))$$);
SELECT pg_temp.try($$SELECT claim.lease_acquire('x', '0')$$);
SELECT pg_temp.try($$SELECT claim.lease_acquire('x', '-178000000 years')$$);
SELECT pg_temp.try($$SELECT claim.lease_acquire('x', '178000000 years')$$);
SELECT pg_temp.try($$SELECT claim.lease_acquire('x', '1 minute', permits => -1)$$);
SELECT pg_temp.try($$SELECT claim.lease_acquire('x', '1 minute', permits => 2147483647)$$);
SELECT pg_temp.try($$SELECT claim.lease_acquire('x', '1 minute', wait => '-178000000 years')$$);
-- hostile names are free text: accepted and kept as given
SELECT pg_temp.try($$SELECT claim.lease_acquire(E'x''";\\\x01', '1 minute', holder => E'h''\\') > 0$$);
SELECT name = E'x''";\\\x01' AS name_kept, holder = E'h''\\' AS holder_kept
FROM claim.leases WHERE holder IS NOT NULL;

-- ================================================================ lease_renew / release / assert
SELECT pg_temp.try($$SELECT claim.lease_renew(NULL, 1, '1 minute')$$);
SELECT pg_temp.try($$SELECT claim.lease_renew('lk', NULL, '1 minute')$$);
SELECT pg_temp.try($$SELECT claim.lease_renew('lk', 1, NULL)$$);
SELECT pg_temp.try($$SELECT claim.lease_renew('lk', -1, '1 minute')$$);
SELECT pg_temp.try(format('SELECT claim.lease_renew(%L, %s, %L)', 'lk', pg_temp.v('claim'), '1 minute'));
SELECT pg_temp.try(format('SELECT claim.lease_renew(%L, %s, %L)', 'other', pg_temp.v('lease'), '1 minute'));
SELECT pg_temp.try(format('SELECT claim.lease_renew(%L, %s, %L)', 'lk', pg_temp.v('lease'), '0'));
SELECT pg_temp.try(format('SELECT claim.lease_renew(%L, %s, %L)', 'lk', pg_temp.v('lease'), '178000000 years'));
SELECT pg_temp.try($$SELECT claim.lease_release(NULL, 1)$$);
SELECT pg_temp.try($$SELECT claim.lease_release('lk', NULL)$$);
SELECT pg_temp.try($$SELECT claim.lease_release('', 1)$$);
SELECT pg_temp.try(format('SELECT claim.lease_release(%L, %s)', 'lk', pg_temp.v('claim')));
SELECT pg_temp.try(format('SELECT claim.lease_release(%L, %s)', 'lk', pg_temp.v('guard')));
SELECT pg_temp.try($$SELECT claim.lease_assert(NULL, 1)$$);
SELECT pg_temp.try($$SELECT claim.lease_assert('lk', NULL)$$);
SELECT pg_temp.try($$SELECT claim.lease_assert('lk', 0)$$);
SELECT pg_temp.try(format('SELECT claim.lease_assert(%L, %s)', 'lk', pg_temp.v('claim')));
-- the lease survived every bad call above
SELECT pg_temp.try(format('SELECT claim.lease_assert(%L, %s)', 'lk', pg_temp.v('lease')));


-- ================================================================ once
SELECT pg_temp.try($$SELECT claim.once(NULL)$$);
SELECT pg_temp.try($$SELECT claim.once('')$$);
SELECT pg_temp.try($$SELECT claim.once(repeat('k', 1025))$$);
SELECT pg_temp.try($$SELECT claim.once(repeat('ü', 100000))$$);
SELECT pg_temp.try($$SELECT claim.once('k1', '0')$$);
SELECT pg_temp.try($$SELECT claim.once('k1', '-1 second')$$);
SELECT pg_temp.try($$SELECT claim.once('k1', '178000000 years')$$);
SELECT pg_temp.try($$SELECT claim.once(E'k''\\\x01')$$);
SELECT pg_temp.try($$SELECT claim.once(E'k''\\\x01')$$);

-- ================================================================ guards
SELECT pg_temp.try($$SELECT claim.guard_begin(NULL, '1 minute')$$);
SELECT pg_temp.try($$SELECT claim.guard_begin('g1', NULL)$$);
SELECT pg_temp.try($$SELECT claim.guard_begin('', '1 minute')$$);
SELECT pg_temp.try($$SELECT claim.guard_begin(repeat('k', 1025), '1 minute')$$);
SELECT pg_temp.try($$SELECT claim.guard_begin('g1', '0')$$);
SELECT pg_temp.try($$SELECT claim.guard_begin('g1', '178000000 years')$$);
SELECT pg_temp.try($$SELECT claim.guard_finish(NULL, 1)$$);
SELECT pg_temp.try($$SELECT claim.guard_finish('gk', NULL)$$);
SELECT pg_temp.try($$SELECT claim.guard_finish('gk', -1)$$);
SELECT pg_temp.try(format('SELECT claim.guard_finish(%L, %s)', 'gk', pg_temp.v('claim')));
SELECT pg_temp.try(format('SELECT claim.guard_finish(%L, %s)', 'gk', pg_temp.v('lease')));
SELECT pg_temp.try(format('SELECT claim.guard_finish(%L, %s)', 'nope', pg_temp.v('guard')));
SELECT pg_temp.try($$SELECT claim.guard_abandon(NULL, 1)$$);
SELECT pg_temp.try($$SELECT claim.guard_abandon('gk', NULL)$$);
SELECT pg_temp.try($$SELECT claim.guard_abandon('gk', 0)$$);
SELECT pg_temp.try(format('SELECT claim.guard_abandon(%L, %s)', 'gk', pg_temp.v('lease')));
SELECT pg_temp.try($$SELECT claim.guard_result(NULL)$$);
SELECT pg_temp.try($$SELECT claim.guard_result('')$$);
SELECT pg_temp.try($$SELECT claim.guard_result(repeat('k', 1025))$$);
SELECT pg_temp.try($$SELECT claim.guard_result('never-used')$$);
-- the guard survived every bad call above
SELECT pg_temp.try(format('SELECT claim.guard_finish(%L, %s, %L)', 'gk', pg_temp.v('guard'), '{"r": 1}'));
SELECT pg_temp.try($$SELECT claim.guard_result('gk')$$);

-- ================================================================ retain, alter_queue, pause, resume
SELECT pg_temp.try($$SELECT claim.create_queue('c2', retain => NULL)$$);
SELECT pg_temp.try($$SELECT claim.create_queue('c2', retain => '-1 second')$$);
SELECT pg_temp.try($$SELECT claim.create_queue('c2', retain => '178000000 years')$$);
SELECT pg_temp.try($$SELECT claim.alter_queue(NULL)$$);
SELECT pg_temp.try($$SELECT claim.alter_queue('')$$);
SELECT pg_temp.try($$SELECT claim.alter_queue('nope', lease => '1 minute')$$);
SELECT pg_temp.try($$SELECT claim.alter_queue(E'q''\x01', lease => '1 minute')$$);
SELECT pg_temp.try($$SELECT claim.alter_queue('q')$$);
SELECT pg_temp.try($$SELECT claim.alter_queue('q', lease => '0')$$);
SELECT pg_temp.try($$SELECT claim.alter_queue('q', lease => '8 days')$$);
SELECT pg_temp.try($$SELECT claim.alter_queue('q', max_attempts => 0)$$);
SELECT pg_temp.try($$SELECT claim.alter_queue('q', max_attempts => 1000001)$$);
SELECT pg_temp.try($$SELECT claim.alter_queue('q', backoff => '-1 second')$$);
SELECT pg_temp.try($$SELECT claim.alter_queue('q', retain => '-1 second')$$);
SELECT pg_temp.try($$SELECT claim.alter_queue('q', retain => '178000000 years')$$);
-- none of these changed queue q
SELECT name, lease, max_attempts, backoff FROM claim.queues WHERE name = 'q';
SELECT pg_temp.try($$SELECT claim.pause(NULL)$$);
SELECT pg_temp.try($$SELECT claim.pause('')$$);
SELECT pg_temp.try($$SELECT claim.pause('nope')$$);
SELECT pg_temp.try($$SELECT claim.pause(repeat('ü', 100000))$$);
SELECT pg_temp.try($$SELECT claim.resume(NULL)$$);
SELECT pg_temp.try($$SELECT claim.resume('nope')$$);
-- resuming a queue that is not paused, pausing twice
SELECT pg_temp.try($$SELECT claim.resume('q')$$);
SELECT pg_temp.try($$SELECT claim.pause('q')$$);
SELECT pg_temp.try($$SELECT claim.pause('q')$$);
SELECT pg_temp.try($$SELECT claim.resume('q')$$);

-- ================================================================ cancel
SELECT pg_temp.try($$SELECT claim.cancel_many(NULL, ARRAY[1]::bigint[])$$);
SELECT pg_temp.try($$SELECT claim.cancel_many('q', NULL)$$);
SELECT pg_temp.try($$SELECT claim.cancel_many('nope', ARRAY[1]::bigint[])$$);
SELECT pg_temp.try($$SELECT claim.cancel_many('q', ARRAY[]::bigint[])$$);
SELECT pg_temp.try($$SELECT claim.cancel_many('q', ARRAY[NULL]::bigint[])$$);
SELECT pg_temp.try($$SELECT claim.cancel_many('q', ARRAY[[1], [2]]::bigint[])$$);
SELECT pg_temp.try($$SELECT claim.cancel_many('q', ARRAY[-1, 0, 9223372036854775807]::bigint[])$$);

-- ================================================================ item_state
SELECT pg_temp.try($$SELECT claim.item_state(NULL, 1)$$);
SELECT pg_temp.try($$SELECT claim.item_state('q', NULL)$$);
SELECT pg_temp.try($$SELECT claim.item_state('q', 1, wait => NULL)$$);
SELECT pg_temp.try($$SELECT claim.item_state('nope', 1)$$);
SELECT pg_temp.try($$SELECT claim.item_state('', 1)$$);
SELECT pg_temp.try($$SELECT (claim.item_state('q', -1)).state$$);
SELECT pg_temp.try($$SELECT (claim.item_state('q', 9223372036854775807)).state$$);
SELECT pg_temp.try($$SELECT claim.item_state('q', 1, wait => '-1 second')$$);
SELECT pg_temp.try($$SELECT claim.item_state('q', 1, wait => '1 hour 1 second')$$);
SELECT pg_temp.try($$SELECT claim.item_state('q', 1, wait => '178000000 years')$$);

-- ================================================================ results, done, after
SELECT pg_temp.try($$SELECT claim.complete(NULL::bigint, '{}'::jsonb)$$);
SELECT pg_temp.try($$SELECT claim.complete(0::bigint, '{}'::jsonb)$$);
SELECT pg_temp.try($$SELECT claim.complete_many(ARRAY[0]::bigint[], false, ARRAY['{}', '{}']::jsonb[])$$);
SELECT pg_temp.try($$SELECT claim.complete_many(ARRAY[0]::bigint[], false, ARRAY[['{}']]::jsonb[])$$);
SELECT pg_temp.try($$SELECT claim.complete_many(ARRAY[0, 0]::bigint[], true, ARRAY['{}']::jsonb[])$$);
SELECT pg_temp.try($$SELECT claim.claim_next('q', done => ARRAY[NULL]::bigint[])$$);
SELECT pg_temp.try($$SELECT claim.claim_next('q', done => ARRAY[[1], [2]]::bigint[])$$);
SELECT pg_temp.try($$SELECT claim.claim_next('q', done => ARRAY[0]::bigint[])$$);
SELECT pg_temp.try(format('SELECT claim.claim_next(%L, done => ARRAY[%s]::bigint[])', 'q', pg_temp.v('lease')));
SELECT pg_temp.try($$SELECT claim.enqueue('q', '{}', after => ARRAY[NULL]::bigint[])$$);
SELECT pg_temp.try($$SELECT claim.enqueue('q', '{}', after => ARRAY[[1], [2]]::bigint[])$$);
-- an unknown parent holds nothing back
SELECT pg_temp.try($$SELECT claim.enqueue('q', '{}', after => ARRAY[-1]::bigint[]) > 0$$);
SELECT pg_temp.try($$SELECT claim.enqueue('q', '{}', after => ARRAY[]::bigint[]) > 0$$);
SELECT pg_temp.try($$SELECT count(*) FROM claim.enqueue_many('q', ARRAY['{}']::jsonb[], after => ARRAY[NULL]::bigint[])$$);
SELECT pg_temp.try($$SELECT count(*) FROM claim.enqueue_many('q', ARRAY['{}']::jsonb[], after => ARRAY[[1]]::bigint[])$$);

-- ================================================================ enqueue_trigger
SELECT pg_temp.try($$SELECT claim.enqueue_trigger()$$);
CREATE TABLE bad_trg (id int PRIMARY KEY, g text);
CREATE TRIGGER t_noargs AFTER INSERT ON bad_trg FOR EACH ROW EXECUTE FUNCTION claim.enqueue_trigger();
SELECT pg_temp.try($$INSERT INTO bad_trg VALUES (1)$$);
DROP TRIGGER t_noargs ON bad_trg;
CREATE TRIGGER t_badq AFTER INSERT ON bad_trg FOR EACH ROW EXECUTE FUNCTION claim.enqueue_trigger('q''; --');
SELECT pg_temp.try($$INSERT INTO bad_trg VALUES (1)$$);
DROP TRIGGER t_badq ON bad_trg;
CREATE TRIGGER t_unknownq AFTER INSERT ON bad_trg FOR EACH ROW EXECUTE FUNCTION claim.enqueue_trigger('nope');
SELECT pg_temp.try($$INSERT INTO bad_trg VALUES (1)$$);
DROP TRIGGER t_unknownq ON bad_trg;
CREATE TRIGGER t_nocol AFTER INSERT ON bad_trg FOR EACH ROW EXECUTE FUNCTION claim.enqueue_trigger('q', 'no_such_column');
SELECT pg_temp.try($$INSERT INTO bad_trg VALUES (1)$$);
DROP TRIGGER t_nocol ON bad_trg;
CREATE TRIGGER t_longcol AFTER INSERT ON bad_trg FOR EACH ROW EXECUTE FUNCTION claim.enqueue_trigger('q', 'g', 'priority=x');
SELECT pg_temp.try($$INSERT INTO bad_trg VALUES (1)$$);
DROP TRIGGER t_longcol ON bad_trg;
CREATE TRIGGER t_opt AFTER INSERT ON bad_trg FOR EACH ROW EXECUTE FUNCTION claim.enqueue_trigger('q', 'g', E'\x01');
SELECT pg_temp.try($$INSERT INTO bad_trg VALUES (1)$$);
DROP TRIGGER t_opt ON bad_trg;
CREATE TRIGGER t_before BEFORE INSERT ON bad_trg FOR EACH ROW EXECUTE FUNCTION claim.enqueue_trigger('q');
SELECT pg_temp.try($$INSERT INTO bad_trg VALUES (1)$$);
DROP TRIGGER t_before ON bad_trg;
-- a group key too long for the index (incompressible, about 10 kB)
CREATE TRIGGER t_bigkey AFTER INSERT ON bad_trg FOR EACH ROW EXECUTE FUNCTION claim.enqueue_trigger('q', 'g');
SELECT pg_temp.try($$INSERT INTO bad_trg SELECT 1, string_agg(md5(g::text), '') FROM generate_series(1, 300) g$$);
DROP TRIGGER t_bigkey ON bad_trg;
-- no row got in through any of the failing triggers
SELECT count(*) AS rows_in FROM bad_trg;
DROP TABLE bad_trg;

-- ================================================================ read-only transaction
BEGIN READ ONLY;
SELECT pg_temp.try($$SELECT claim.enqueue('q', '{}')$$);
SELECT pg_temp.try($$SELECT claim.claim_next('q')$$);
SELECT pg_temp.try($$SELECT claim.lease_acquire('ro', '1 minute')$$);
SELECT pg_temp.try($$SELECT claim.once('ro')$$);
ROLLBACK;

-- ================================================================ a 100 MB payload
-- Below the server's 1 GB limit per value: accepted, stored compressed, and
-- handed to a claimer whole. Nothing crashes; the backend keeps working.
SELECT claim.create_queue('big');
SELECT pg_temp.try($$SELECT claim.enqueue('big', jsonb_build_object('x', repeat('x', 100 * 1024 * 1024))) > 0$$);
SELECT pg_temp.try($$SELECT count(*) FROM claim.enqueue_many('big', ARRAY[jsonb_build_object('y', repeat('y', 100 * 1024 * 1024))])$$);
SELECT octet_length(payload->>'x') AS x_len, octet_length(payload->>'y') AS y_len
FROM claim.claim_next('big', n => 2) ORDER BY id;
-- a 100 MB group key or guard result
SELECT pg_temp.try($$SELECT claim.enqueue('big', '{}', group_key => repeat('g', 100 * 1024 * 1024))$$);
SELECT pg_temp.try(format('SELECT claim.guard_finish(%L, claim.guard_begin(%L, %L), jsonb_build_object(%L, repeat(%L, 100 * 1024 * 1024)))',
                          'bigk', 'bigk', '1 minute', 'z', 'z'));
SELECT octet_length(claim.guard_result('bigk')->>'z') AS result_len;
-- a 100 MB error text of fail()
SELECT pg_temp.try(format('SELECT claim.fail(%s, repeat(%L, 100 * 1024 * 1024))', pg_temp.v('claim'), 'e'));
SELECT 'still alive' AS backend;


-- ================================================================ a token of another database
-- Tokens are per database: one handed out elsewhere is unknown here.
\set main_db :DBNAME
CREATE DATABASE bad_input_other;
\c bad_input_other
SET client_min_messages = warning;
CREATE EXTENSION pg_claim;
SELECT setval('claim.token_seq', 1000000000);
SELECT claim.create_queue('q');
SELECT claim.enqueue('q', '{}') > 0 AS enqueued;
SELECT token AS other_token FROM claim.claim_next('q') \gset
SELECT claim.lease_acquire('lk', '1 minute') AS other_lease \gset
\c :main_db
SET statement_timeout = '20s';
\i :abs_srcdir/sql/include/try_value.sql
SELECT pg_temp.try('SELECT claim.complete(' || :other_token || '::bigint)');
SELECT pg_temp.try('SELECT claim.assert_token(' || :other_token || ')');
SELECT pg_temp.try('SELECT claim.lease_assert(''lk'', ' || :other_lease || ')');
DROP DATABASE bad_input_other;

-- Queue names are case-sensitive: a name that differs in case only gets a hint.
SELECT claim.create_queue('Orders');
SELECT claim.enqueue('orders', '{}');
SELECT claim.enqueue('nothing_like_it', '{}');
SELECT claim.drop_queue('Orders');

DROP EXTENSION pg_claim;
