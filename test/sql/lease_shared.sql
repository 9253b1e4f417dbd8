-- Shared and exclusive leases (docs/leases.md, "Shared and exclusive"):
-- claim.lease_acquire_shared and claim.lease_acquire on one name, the
-- takeover of an expired holder of the other mode, session_lease's mode,
-- and every error. Concurrency is in the isolation spec lease_shared.
CREATE EXTENSION pg_claim;

\getenv abs_srcdir PG_ABS_SRCDIR
\i :abs_srcdir/sql/include/try.sql
\i :abs_srcdir/sql/include/tokens.sql

-- ------------------------------------------------ the example of docs/leases.md, as written
-- readers: any number at once
SELECT claim.lease_acquire_shared('config', '30 seconds', 'reader-1') IS NOT NULL AS reading;
SELECT claim.lease_acquire_shared('config', '30 seconds', 'reader-2') IS NOT NULL AS reading;
-- a writer: NULL while a reader holds it (with wait, granted when the last one goes)
SELECT claim.lease_acquire('config', '30 seconds', 'writer');

-- ------------------------------------------------ shared holders coexist
INSERT INTO t SELECT 'r1', claim.lease_acquire_shared('rw', '1 minute', 'r1');
-- untyped positional parameters, as drivers send them
PREPARE sh(unknown, unknown, unknown, unknown) AS SELECT claim.lease_acquire_shared($1, $2, $3, $4);
EXECUTE sh('rw', '1 minute', 'r2', '0') \gset r2_
INSERT INTO t VALUES ('r2', :r2_lease_acquire_shared);
SELECT pg_temp.tok('r2') > pg_temp.tok('r1') AS higher_token;
-- the exclusive mode is claim.lease_acquire (1 permit): refused
SELECT claim.lease_acquire('rw', '1 minute', 'w') IS NULL AS exclusive_refused;
SELECT claim.lease_acquire('rw', '1 minute', 'w', wait => '100 ms') IS NULL AS exclusive_refused_after_wait;
-- the view: permits 0 marks a shared holder
SELECT name, holder, permits FROM claim.leases ORDER BY token;
-- both fence their writes, renew and release
SELECT claim.lease_assert('rw', pg_temp.tok('r1'))::text = '' AS asserted;
SELECT claim.lease_renew('rw', pg_temp.tok('r2'), '2 minutes') > now() AS renewed;
SELECT claim.lease_release('rw', pg_temp.tok('r1')) AS r1_released,
       claim.lease_release('rw', pg_temp.tok('r2')) AS r2_released;

-- ------------------------------------------------ the exclusive holder
INSERT INTO t SELECT 'w', claim.lease_acquire('rw', '1 minute', 'w');
SELECT pg_temp.tok('w') > pg_temp.tok('r2') AS higher_token;
SELECT claim.lease_acquire_shared('rw', '1 minute', 'r3') IS NULL AS shared_refused;
SELECT claim.lease_release('rw', pg_temp.tok('w')) AS released;
INSERT INTO t SELECT 'r3', claim.lease_acquire_shared('rw', '1 minute', 'r3');
SELECT pg_temp.tok('r3') > pg_temp.tok('w') AS shared_again;

-- a name is a semaphore or a shared/exclusive lease, not both (PC002)
SELECT pg_temp.try($$SELECT claim.lease_acquire('rw', '1 minute', permits => 2)$$);
SELECT claim.lease_acquire('pool', '1 minute', permits => 2) IS NOT NULL AS semaphore;
SELECT pg_temp.try($$SELECT claim.lease_acquire_shared('pool', '1 minute')$$);

-- ------------------------------------------------ expired holders of the other mode
-- An expired exclusive holder is retired when a shared request takes over:
-- its renew is refused (PC001), as after any takeover.
INSERT INTO t SELECT 'x1', claim.lease_acquire('ex', '150 ms', 'w');
SELECT pg_sleep(0.2);
SELECT claim.lease_acquire_shared('ex', '1 minute', 'r') IS NOT NULL AS shared_took_over;
SELECT pg_temp.try($$SELECT claim.lease_renew('ex', pg_temp.tok('x1'), '1 minute')$$);
SELECT pg_temp.try($$SELECT claim.lease_assert('ex', pg_temp.tok('x1'))$$);
-- and the other way round
INSERT INTO t SELECT 'x2', claim.lease_acquire_shared('ex2', '150 ms', 'r');
SELECT pg_sleep(0.2);
SELECT claim.lease_acquire('ex2', '1 minute', 'w') IS NOT NULL AS exclusive_took_over;
SELECT pg_temp.try($$SELECT claim.lease_renew('ex2', pg_temp.tok('x2'), '1 minute')$$);
-- a shared request waits in the server until the exclusive holder expires
SELECT claim.lease_acquire('ex3', '200 ms', 'w') IS NOT NULL AS exclusive;
SELECT claim.lease_acquire_shared('ex3', '1 minute', 'r', '5 seconds') IS NOT NULL AS shared_after_wait;

-- ------------------------------------------------ session_lease(mode => ...)
SELECT claim.session_open('10 seconds', 'sess') AS s \gset
SELECT claim.session_lease(:s, 'cfg', mode => 'shared') IS NOT NULL AS first_shared,
       claim.session_lease(:s, 'cfg', mode => 'shared') IS NOT NULL AS second_shared;
SELECT claim.session_lease(:s, 'cfg') IS NULL AS exclusive_refused;
SELECT leases FROM claim.sessions WHERE session = :s;
SELECT claim.session_close(:s) AS released;
SELECT claim.lease_acquire('cfg', '1 minute') IS NOT NULL AS exclusive_after_close;

-- ------------------------------------------------ errors
SELECT pg_temp.try($$SELECT claim.lease_acquire_shared(NULL, '1 minute')$$);
SELECT pg_temp.try($$SELECT claim.lease_acquire_shared('', '1 minute')$$);
SELECT pg_temp.try($$SELECT claim.lease_acquire_shared('x', NULL)$$);
SELECT pg_temp.try($$SELECT claim.lease_acquire_shared('x', '0')$$);
SELECT pg_temp.try($$SELECT claim.lease_acquire_shared('x', '1 minute', wait => NULL)$$);
SELECT pg_temp.try($$SELECT claim.lease_acquire_shared('x', '1 minute', wait => '-1 second')$$);
SELECT pg_temp.try($$SELECT claim.lease_acquire_shared('x', '1 minute', repeat('h', 1025))$$);
SELECT claim.session_open() AS s \gset
SELECT pg_temp.try(format($$SELECT claim.session_lease(%s, 'x', mode => 'bogus')$$, :s));
SELECT pg_temp.try(format($$SELECT claim.session_lease(%s, 'x', mode => NULL)$$, :s));
SELECT pg_temp.try(format($$SELECT claim.session_lease(%s, 'x', permits => 2, mode => 'shared')$$, :s));
SELECT claim.session_close(:s) AS released;
BEGIN TRANSACTION READ ONLY;
SELECT pg_temp.try($$SELECT claim.lease_acquire_shared('x', '1 minute')$$);
ROLLBACK;

-- ------------------------------------------------ rights
SELECT has_function_privilege('public', 'claim.lease_acquire_shared(text, interval, text, interval)', 'EXECUTE') AS public_may,
       has_function_privilege('claim_worker', 'claim.lease_acquire_shared(text, interval, text, interval)', 'EXECUTE') AS worker_may,
       has_function_privilege('claim_producer', 'claim.lease_acquire_shared(text, interval, text, interval)', 'EXECUTE') AS producer_may;

-- ------------------------------------------------ session leases in the watch
SELECT claim.revision() AS rev \gset
SELECT claim.session_open('10 seconds', 'a') AS s \gset
SELECT claim.session_lease(:s, 'cfg/x', mode => 'shared') AS tx \gset
SELECT claim.session_lease(:s, 'cfg/y') AS ty \gset
-- released early with lease_release: not recorded again at the close
SELECT claim.lease_release('cfg/y', :ty) AS released_early;
SELECT claim.session_close(:s) AS released;
-- a session that expires: its lease is recorded as expired, held for lock_delay
SELECT claim.session_open('0.2 seconds', 'b', '1 minute') AS s \gset
SELECT claim.session_lease(:s, 'cfg/z') AS tz \gset
SELECT claim.revision() AS rev2 \gset
SELECT pg_sleep(0.3);
-- the session is ended by the database's worker, or by this call (the
-- watch below waits for the worker's commit when it is ending it now)
SELECT claim._coord_maintain() IS NULL OR true AS maintained;
SELECT event FROM claim.watch('cfg/z', :rev2, '5 seconds');
SELECT kind, name, event, token = CASE name WHEN 'cfg/x' THEN :tx WHEN 'cfg/y' THEN :ty ELSE :tz END AS its_token,
       holder
  FROM claim.watch('cfg/', :rev) ORDER BY revision;
SELECT claim.lease_acquire('cfg/z', '1 minute') IS NULL AS held_for_lock_delay;

DROP EXTENSION pg_claim;
