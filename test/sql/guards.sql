-- Once-only guards: claim.once and the guard ledger
-- (guard_begin / guard_finish / guard_abandon / guard_result), with every
-- error they raise. Tokens and times vary between runs: the queries show
-- booleans and relative values only.
CREATE EXTENSION pg_claim;

\getenv abs_srcdir PG_ABS_SRCDIR
\i :abs_srcdir/sql/include/try.sql

\i :abs_srcdir/sql/include/tokens.sql

-- --------------------------------------------------------------------- once
-- true for exactly one caller per key
SELECT claim.once('welcome-mail:42') AS first, claim.once('welcome-mail:42') AS second;
SELECT claim.once('welcome-mail:43') AS other_key;
-- transactional: a rolled-back caller leaves the key free
BEGIN;
SELECT claim.once('import:2024-05') AS first_in_tx;
ROLLBACK;
SELECT claim.once('import:2024-05') AS after_rollback;
SELECT claim.once('import:2024-05') AS again;
-- inside a transaction that commits: taken for good
BEGIN;
SELECT claim.once('job:7') AS first_in_tx, claim.once('job:7') AS second_in_tx;
COMMIT;
SELECT claim.once('job:7') AS after_commit;
-- with a ttl: taken until it elapses, then free for one more caller
SELECT claim.once('digest:daily', '200 milliseconds') AS first,
       claim.once('digest:daily', '200 milliseconds') AS second;
SELECT pg_sleep(0.3);
SELECT claim.once('digest:daily', '200 milliseconds') AS after_ttl,
       claim.once('digest:daily', '200 milliseconds') AS second_after_ttl;
-- a key taken without ttl never frees, whatever ttl a later caller passes
SELECT claim.once('welcome-mail:42', '1 second') AS with_ttl_later;
-- an expired key taken again without ttl is taken for good
SELECT claim.once('short-lived', '100 milliseconds') AS first;
SELECT pg_sleep(0.2);
SELECT claim.once('short-lived') AS retaken, claim.once('short-lived', '1 millisecond') AS again;
SELECT count(*) AS keys, count(*) FILTER (WHERE expires_at IS NULL) AS permanent
FROM claim.once_keys;

-- ------------------------------------------------------------- guard ledger
-- nothing recorded yet
SELECT claim.guard_result('charge:order-1') IS NULL AS no_result;
-- begin: a token; a second begin while the attempt is live gets NULL
INSERT INTO t SELECT 'g1', claim.guard_begin('charge:order-1', '30 seconds');
SELECT pg_temp.tok('g1') IS NOT NULL AS began;
SELECT claim.guard_begin('charge:order-1', '30 seconds') IS NULL AS busy;
SELECT claim.guard_result('charge:order-1') IS NULL AS still_no_result;
-- finish records the result for good
SELECT claim.guard_finish('charge:order-1', pg_temp.tok('g1'), '{"charge_id": "ch_1", "amount": 990}');
SELECT claim.guard_result('charge:order-1') AS result;
SELECT claim.guard_begin('charge:order-1', '30 seconds') IS NULL AS finished_for_good;
SELECT pg_temp.try(format('SELECT claim.guard_finish(%L, %s)', 'charge:order-1', pg_temp.tok('g1')));
SELECT pg_temp.try(format('SELECT claim.guard_abandon(%L, %s)', 'charge:order-1', pg_temp.tok('g1')));
SELECT claim.guard_result('charge:order-1') AS result_unchanged;
-- finished without a result: JSON null (SQL NULL means "not finished")
INSERT INTO t SELECT 'g2', claim.guard_begin('charge:order-2', '30 seconds');
SELECT claim.guard_finish('charge:order-2', pg_temp.tok('g2'));
SELECT claim.guard_result('charge:order-2') AS result,
       claim.guard_result('charge:order-2') IS NULL AS sql_null;
-- abandon frees the key for a new attempt with a higher token
INSERT INTO t SELECT 'g3', claim.guard_begin('charge:order-3', '30 seconds');
SELECT claim.guard_abandon('charge:order-3', pg_temp.tok('g3'));
SELECT claim.guard_result('charge:order-3') IS NULL AS no_result;
SELECT pg_temp.try(format('SELECT claim.guard_finish(%L, %s)', 'charge:order-3', pg_temp.tok('g3')));
SELECT pg_temp.try(format('SELECT claim.guard_abandon(%L, %s)', 'charge:order-3', pg_temp.tok('g3')));
INSERT INTO t SELECT 'g4', claim.guard_begin('charge:order-3', '30 seconds');
SELECT pg_temp.tok('g4') > pg_temp.tok('g3') AS higher_token;
SELECT claim.guard_finish('charge:order-3', pg_temp.tok('g4'), '"done"');
SELECT claim.guard_result('charge:order-3') AS result;
-- an attempt whose lease expired frees the key: a new attempt, a higher
-- token, and the old token is refused
INSERT INTO t SELECT 'g5', claim.guard_begin('charge:order-5', '100 milliseconds');
SELECT pg_sleep(0.2);
INSERT INTO t SELECT 'g6', claim.guard_begin('charge:order-5', '30 seconds');
SELECT pg_temp.tok('g6') > pg_temp.tok('g5') AS higher_token;
SELECT pg_temp.try(format('SELECT claim.guard_finish(%L, %s, %L)', 'charge:order-5', pg_temp.tok('g5'), '{"late": true}'));
SELECT pg_temp.try(format('SELECT claim.guard_abandon(%L, %s)', 'charge:order-5', pg_temp.tok('g5')));
SELECT claim.guard_finish('charge:order-5', pg_temp.tok('g6'), '{"late": false}');
SELECT claim.guard_result('charge:order-5') AS result;
-- expired but not superseded: the attempt may still record what happened
INSERT INTO t SELECT 'g7', claim.guard_begin('charge:order-7', '100 milliseconds');
SELECT pg_sleep(0.2);
SELECT claim.guard_finish('charge:order-7', pg_temp.tok('g7'), '{"slow": true}');
SELECT claim.guard_result('charge:order-7') AS result;
-- transactional: a begin rolled back never happened
BEGIN;
SELECT claim.guard_begin('charge:order-8', '30 seconds') IS NOT NULL AS began;
ROLLBACK;
SELECT count(*) AS rows FROM claim.guards WHERE key = 'charge:order-8';
-- a finish rolled back leaves the attempt running
INSERT INTO t SELECT 'g8', claim.guard_begin('charge:order-8', '30 seconds');
BEGIN;
SELECT claim.guard_finish('charge:order-8', pg_temp.tok('g8'), '1');
ROLLBACK;
SELECT claim.guard_result('charge:order-8') IS NULL AS not_finished,
       claim.guard_begin('charge:order-8', '30 seconds') IS NULL AS still_running;
-- unknown keys and tokens
SELECT pg_temp.try($$SELECT claim.guard_finish('never-begun', 1)$$);
SELECT pg_temp.try($$SELECT claim.guard_abandon('never-begun', 1)$$);
SELECT pg_temp.try(format('SELECT claim.guard_finish(%L, %s)', 'charge:order-8', pg_temp.tok('g8') + 1000));
-- the ledger
SELECT key, state, attempts, result FROM claim.guards ORDER BY key;
-- guard tokens come from the same sequence as leases and claims
SELECT claim.lease_acquire('after-guards', '1 minute') > (SELECT max(token) FROM claim.guards) AS higher;

-- ------------------------------------------------------------------- errors
-- NULL arguments: 22004
SELECT pg_temp.try($$SELECT claim.once(NULL)$$);
SELECT pg_temp.try($$SELECT claim.guard_begin(NULL, '1 minute')$$);
SELECT pg_temp.try($$SELECT claim.guard_begin('k', NULL)$$);
SELECT pg_temp.try($$SELECT claim.guard_finish(NULL, 1)$$);
SELECT pg_temp.try($$SELECT claim.guard_finish('k', NULL)$$);
SELECT pg_temp.try($$SELECT claim.guard_abandon(NULL, 1)$$);
SELECT pg_temp.try($$SELECT claim.guard_abandon('k', NULL)$$);
SELECT pg_temp.try($$SELECT claim.guard_result(NULL)$$);
-- keys: 1 to 1024 bytes (22023)
SELECT pg_temp.try($$SELECT claim.once('')$$);
SELECT pg_temp.try($$SELECT claim.once(repeat('k', 1025))$$);
SELECT claim.once(repeat('k', 1024)) AS longest_key;
SELECT pg_temp.try($$SELECT claim.guard_begin('', '1 minute')$$);
SELECT pg_temp.try($$SELECT claim.guard_begin(repeat('k', 1025), '1 minute')$$);
SELECT pg_temp.try($$SELECT claim.guard_finish('', 1)$$);
SELECT pg_temp.try($$SELECT claim.guard_abandon('', 1)$$);
SELECT pg_temp.try($$SELECT claim.guard_result('')$$);
-- durations (22023): once ttl up to 366 days, guard lease up to 7 days
SELECT pg_temp.try($$SELECT claim.once('k', '0 seconds')$$);
SELECT pg_temp.try($$SELECT claim.once('k', '-1 second')$$);
SELECT pg_temp.try($$SELECT claim.once('k', '367 days')$$);
SELECT claim.once('yearly', '366 days') AS longest_ttl;
SELECT pg_temp.try($$SELECT claim.guard_begin('k', '0 seconds')$$);
SELECT pg_temp.try($$SELECT claim.guard_begin('k', '7 days 1 second')$$);
SELECT claim.guard_begin('weekly', '7 days') IS NOT NULL AS longest_lease;
-- nothing above was recorded under 'k'
SELECT (SELECT count(*) FROM claim.once_keys WHERE key = 'k') AS once_rows,
       (SELECT count(*) FROM claim.guards WHERE key = 'k') AS guard_rows;

-- privileges: the functions are callable, the tables are not PUBLIC's
SELECT has_function_privilege('public', 'claim.once(text, interval)', 'EXECUTE') AS public_once,
       has_table_privilege('public', 'claim.guards', 'SELECT') AS public_guards;

DROP EXTENSION pg_claim;
