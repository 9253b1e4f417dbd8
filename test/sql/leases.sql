-- Named leases and counting semaphores: the whole SQL API and
-- every error it raises. Tokens and times vary between runs: the queries
-- show booleans and relative values only.
CREATE EXTENSION pg_claim;

\getenv abs_srcdir PG_ABS_SRCDIR
\i :abs_srcdir/sql/include/try.sql

\i :abs_srcdir/sql/include/tokens.sql

-- ------------------------------------------------------------------ a mutex
INSERT INTO t SELECT 'm1', claim.lease_acquire('orders:42', '30 seconds', holder => 'worker-a');
SELECT token IS NOT NULL AS granted FROM t WHERE k = 'm1';
-- held: a second acquirer gets NULL at once (wait defaults to 0)
SELECT claim.lease_acquire('orders:42', '30 seconds') IS NULL AS refused;
-- the view shows live holders
SELECT name, token = pg_temp.tok('m1') AS same_token, holder, permits,
       expires_at - acquired_at AS ttl,
       expires_at > clock_timestamp() AS live
FROM claim.leases;
-- renew: a new expiry from the server clock
SELECT claim.lease_renew('orders:42', pg_temp.tok('m1'), '1 hour')
       BETWEEN clock_timestamp() + interval '59 minutes' AND clock_timestamp() + interval '1 hour'
       AS renewed;
SELECT expires_at - acquired_at > interval '59 minutes' AS extended FROM claim.leases;
SELECT pg_temp.try(format('SELECT claim.lease_assert(%L, %s)', 'orders:42', pg_temp.tok('m1')));
-- another name is another lease
INSERT INTO t SELECT 'm2', claim.lease_acquire('orders:43', '30 seconds');
SELECT pg_temp.tok('m2') > pg_temp.tok('m1') AS higher_token;
-- a token is bound to its name
SELECT pg_temp.try(format('SELECT claim.lease_renew(%L, %s, %L)', 'orders:43', pg_temp.tok('m1'), '1 minute'));
SELECT pg_temp.try(format('SELECT claim.lease_assert(%L, %s)', 'orders:43', pg_temp.tok('m1')));
SELECT claim.lease_release('orders:43', pg_temp.tok('m1')) AS released_wrong_name;
-- release: true once, then false; the token is stale afterwards
SELECT claim.lease_release('orders:42', pg_temp.tok('m1')) AS released;
SELECT claim.lease_release('orders:42', pg_temp.tok('m1')) AS released_again;
SELECT pg_temp.try(format('SELECT claim.lease_renew(%L, %s, %L)', 'orders:42', pg_temp.tok('m1'), '1 minute'));
SELECT pg_temp.try(format('SELECT claim.lease_assert(%L, %s)', 'orders:42', pg_temp.tok('m1')));
-- free again: granted with a higher token
INSERT INTO t SELECT 'm3', claim.lease_acquire('orders:42', '30 seconds');
SELECT pg_temp.tok('m3') > pg_temp.tok('m2') AS higher_token;
SELECT count(*) AS holders FROM claim.leases;
SELECT claim.lease_release('orders:42', pg_temp.tok('m3')), claim.lease_release('orders:43', pg_temp.tok('m2'));
-- unknown tokens
SELECT claim.lease_release('orders:42', 123456789) AS unknown_released;
SELECT pg_temp.try($$SELECT claim.lease_renew('orders:42', 123456789, '1 minute')$$);
SELECT pg_temp.try($$SELECT claim.lease_assert('orders:42', 123456789)$$);
SELECT pg_temp.try($$SELECT claim.lease_assert('never-used', 1)$$);

-- ---------------------------------------------------------- a semaphore of 3
SELECT claim.lease_acquire('pool', '30 seconds', permits => 3) IS NOT NULL AS granted
FROM generate_series(1, 4);
SELECT count(*) AS holders, min(permits) AS permits, count(DISTINCT token) AS tokens
FROM claim.leases WHERE name = 'pool';
-- a name with live holders keeps its permit count
SELECT pg_temp.try($$SELECT claim.lease_acquire('pool', '30 seconds')$$);
SELECT pg_temp.try($$SELECT claim.lease_acquire('pool', '30 seconds', permits => 4)$$);
-- release one: one slot frees
SELECT claim.lease_release('pool', min(token)) FROM claim.leases WHERE name = 'pool';
SELECT claim.lease_acquire('pool', '30 seconds', permits => 3) IS NOT NULL AS granted
FROM generate_series(1, 2);
-- once every holder is gone another count may be used
SELECT bool_and(claim.lease_release('pool', token)) AS released_all FROM claim.leases WHERE name = 'pool';
SELECT claim.lease_acquire('pool', '30 seconds', permits => 2) IS NOT NULL AS granted
FROM generate_series(1, 3);
SELECT bool_and(claim.lease_release('pool', token)) AS released_all FROM claim.leases WHERE name = 'pool';

-- ------------------------------------------------------------------- expiry
INSERT INTO t SELECT 'e1', claim.lease_acquire('short', '100 milliseconds');
SELECT pg_sleep(0.2);
SELECT count(*) AS live_holders FROM claim.leases WHERE name = 'short';
SELECT pg_temp.try(format('SELECT claim.lease_renew(%L, %s, %L)', 'short', pg_temp.tok('e1'), '1 minute'));
SELECT pg_temp.try(format('SELECT claim.lease_assert(%L, %s)', 'short', pg_temp.tok('e1')));
-- the expired slot is granted again with a higher token
INSERT INTO t SELECT 'e2', claim.lease_acquire('short', '30 seconds');
SELECT pg_temp.tok('e2') > pg_temp.tok('e1') AS higher_token;
SELECT claim.lease_release('short', pg_temp.tok('e1')) AS stale_released;
SELECT claim.lease_release('short', pg_temp.tok('e2')) AS released;
-- expired but not granted again: release removes it and says false
INSERT INTO t SELECT 'e3', claim.lease_acquire('short', '100 milliseconds');
SELECT pg_sleep(0.2);
SELECT claim.lease_release('short', pg_temp.tok('e3')) AS released;
-- released and expired rows stay for the next grant of their slot ...
SELECT count(*) AS rows_left FROM claim.lease_holders WHERE name = 'short';
-- ... until claim.lease_purge removes those older than its argument, never a live one
INSERT INTO t SELECT 'p1', claim.lease_acquire('keep', '30 seconds');
SELECT claim.lease_purge() AS purged_none;
SELECT claim.lease_purge('-1 hour') > 0 AS purged;
SELECT name FROM claim.lease_holders;
SELECT count(*) AS markers_left FROM claim.lease_released;
SELECT claim.lease_release('keep', pg_temp.tok('p1')) AS released;

-- ------------------------------------------------------------ blocking waits
INSERT INTO t SELECT 'w1', claim.lease_acquire('busy', '30 seconds');
SELECT clock_timestamp() AS t0 \gset
SELECT claim.lease_acquire('busy', '30 seconds', wait => '300 milliseconds') IS NULL AS timed_out;
SELECT clock_timestamp() - :'t0' >= interval '300 milliseconds' AS waited;
-- a wait ends as soon as the holder expires
INSERT INTO t SELECT 'w2', claim.lease_acquire('expiring', '300 milliseconds');
SELECT clock_timestamp() AS t0 \gset
SELECT claim.lease_acquire('expiring', '30 seconds', wait => '10 seconds') > pg_temp.tok('w2') AS granted;
SELECT clock_timestamp() - :'t0' < interval '5 seconds' AS soon;
-- statement_timeout ends a wait
\set VERBOSITY terse
SET statement_timeout = '200ms';
SELECT claim.lease_acquire('busy', '30 seconds', wait => '10 seconds');
RESET statement_timeout;
\set VERBOSITY default

-- ------------------------------------------------------------ transactions
-- a grant rolled back never happened
BEGIN;
SELECT claim.lease_acquire('tx', '30 seconds') IS NOT NULL AS granted;
ROLLBACK;
SELECT count(*) AS holders FROM claim.leases WHERE name = 'tx';
-- lease_assert keeps a lock on the holder's slot until the transaction ends
INSERT INTO t SELECT 'a1', claim.lease_acquire('tx', '30 seconds');
BEGIN;
SELECT claim.lease_assert('tx', pg_temp.tok('a1'));
SELECT held AS slot_locks FROM claim.lock_table();
COMMIT;
SELECT held AS slot_locks FROM claim.lock_table();

-- tokens come from the same sequence as queue claims
SELECT claim.create_queue('lq');
SELECT claim.enqueue('lq') > 0 AS enqueued;
INSERT INTO t SELECT 'c1', token FROM claim.claim_next('lq');
INSERT INTO t SELECT 'c2', claim.lease_acquire('after-claim', '30 seconds');
SELECT pg_temp.tok('c2') > pg_temp.tok('c1') AS higher_than_claim;

-- names: free text up to 1024 bytes
SELECT claim.lease_acquire('invoices:customer é/✓ 7', '1 minute') IS NOT NULL AS unicode;
SELECT claim.lease_acquire(repeat('x', 1024), '1 minute') IS NOT NULL AS longest;
SELECT claim.lease_acquire(repeat('é', 512), '1 minute') IS NOT NULL AS longest_multibyte;
SELECT claim.lease_acquire('week', '7 days') IS NOT NULL AS longest_ttl;

-- ------------------------------------------------------------------- errors
-- NULL arguments: 22004
SELECT pg_temp.try($$SELECT claim.lease_acquire(NULL, '1 minute')$$);
SELECT pg_temp.try($$SELECT claim.lease_acquire('x', NULL)$$);
SELECT pg_temp.try($$SELECT claim.lease_acquire('x', '1 minute', permits => NULL)$$);
SELECT pg_temp.try($$SELECT claim.lease_acquire('x', '1 minute', wait => NULL)$$);
SELECT pg_temp.try($$SELECT claim.lease_renew(NULL, 1, '1 minute')$$);
SELECT pg_temp.try($$SELECT claim.lease_renew('x', NULL, '1 minute')$$);
SELECT pg_temp.try($$SELECT claim.lease_renew('x', 1, NULL)$$);
SELECT pg_temp.try($$SELECT claim.lease_release(NULL, 1)$$);
SELECT pg_temp.try($$SELECT claim.lease_release('x', NULL)$$);
SELECT pg_temp.try($$SELECT claim.lease_assert(NULL, 1)$$);
SELECT pg_temp.try($$SELECT claim.lease_assert('x', NULL)$$);
-- names: 42602
SELECT pg_temp.try($$SELECT claim.lease_acquire('', '1 minute')$$);
SELECT pg_temp.try($$SELECT claim.lease_acquire(repeat('x', 1025), '1 minute')$$);
SELECT pg_temp.try($$SELECT claim.lease_acquire(repeat('é', 513), '1 minute')$$);
SELECT pg_temp.try($$SELECT claim.lease_renew('', 1, '1 minute')$$);
SELECT pg_temp.try($$SELECT claim.lease_release(repeat('x', 1025), 1)$$);
SELECT pg_temp.try($$SELECT claim.lease_assert('', 1)$$);
-- ttl, permits, wait, holder: 22023
SELECT pg_temp.try($$SELECT claim.lease_acquire('x', '0 seconds')$$);
SELECT pg_temp.try($$SELECT claim.lease_acquire('x', '-1 seconds')$$);
SELECT pg_temp.try($$SELECT claim.lease_acquire('x', '7 days 1 second')$$);
SELECT pg_temp.try($$SELECT claim.lease_acquire('x', '1 minute', permits => 0)$$);
SELECT pg_temp.try($$SELECT claim.lease_acquire('x', '1 minute', permits => 1001)$$);
SELECT pg_temp.try($$SELECT claim.lease_acquire('x', '1 minute', wait => '-1 second')$$);
SELECT pg_temp.try($$SELECT claim.lease_acquire('x', '1 minute', wait => '1 hour 1 second')$$);
SELECT pg_temp.try($$SELECT claim.lease_acquire('x', '1 minute', holder => repeat('h', 1025))$$);
SELECT pg_temp.try($$SELECT claim.lease_acquire('x', '1 minute', wait => '300000 years')$$);
SELECT pg_temp.try($$SELECT claim.lease_renew('x', 1, '0 seconds')$$);
SELECT pg_temp.try($$SELECT claim.lease_renew('x', 1, '8 days')$$);
-- nothing above was granted
SELECT count(*) AS holders FROM claim.leases WHERE name = 'x';

-- A grant whose new row version does not fit on its page (not a HOT
-- update) gives it index entries: releases, which look holders up by name
-- through the primary key, find every one.
SELECT count(*) FILTER (WHERE claim.lease_release('wide' || g, claim.lease_acquire('wide' || g, '1 minute', repeat('h', 1000)))) AS released
FROM generate_series(1, 12) g;
BEGIN;
SELECT count(claim.lease_acquire('wide' || g, '1 minute', repeat('k', 1000))) AS granted
FROM generate_series(1, 12) g;
SELECT pg_stat_get_xact_tuples_updated('claim.lease_holders'::regclass)
     > pg_stat_get_xact_tuples_hot_updated('claim.lease_holders'::regclass) AS some_not_hot;
COMMIT;
SELECT count(*) FILTER (WHERE claim.lease_release(name, token)) AS released
FROM claim.lease_holders WHERE name LIKE 'wide%' AND holder LIKE 'k%';

-- privileges: the functions are callable, the tables are not PUBLIC's
SELECT has_function_privilege('public', 'claim.lease_acquire(text, interval, text, integer, interval)', 'EXECUTE') AS public_acquire,
       has_function_privilege('public', 'claim.lease_purge(interval)', 'EXECUTE') AS public_purge,
       has_table_privilege('public', 'claim.lease_holders', 'SELECT') AS public_holders;

DROP EXTENSION pg_claim;
