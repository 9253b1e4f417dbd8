-- Fencing tokens and partitions (docs/partitions.md): every token is at
-- most 2^53 - 1, carries its partition in bits 52..47, and only
-- claim.set_partition changes the partition of a database. A session or
-- role setting of pg_claim.partition that differs from it is refused
-- tokens (55000); it cannot make them go backwards.
CREATE EXTENSION pg_claim;
SET client_min_messages = warning;

\getenv abs_srcdir PG_ABS_SRCDIR
\i :abs_srcdir/sql/include/try.sql

SELECT claim.partition();
SELECT min_value, max_value FROM pg_sequences WHERE schemaname = 'claim' AND sequencename = 'token_seq';

-- The layout: partition in bits 52..47; a token of the older layout (above
-- 2^53 - 1: partition in bits 62..53) keeps its partition.
SELECT claim.token_partition(1) AS p0,
       claim.token_partition(3 * 140737488355328 + 5) AS p3,
       claim.token_partition(9007199254740991) AS p63,
       claim.token_partition(5 * 9007199254740992 + 7) AS old_p5,
       claim.token_partition(-1) AS negative;

SELECT claim.create_queue('tokens', lease => '1 minute');
SELECT count(claim.enqueue('tokens', '{}')) FROM generate_series(1, 3);
CREATE TEMP TABLE t AS SELECT token FROM claim.claim_next('tokens', 3);
INSERT INTO t SELECT claim.lease_acquire('tokens-lease', '1 minute');
INSERT INTO t SELECT claim.guard_begin('tokens-guard', '1 minute');
SELECT count(*) AS tokens, bool_and(token BETWEEN 1 AND 9007199254740991) AS all_safe,
       bool_and(claim.token_partition(token) = claim.partition()) AS all_of_this_partition
  FROM t;

-- A session that says another partition is refused tokens: its claims,
-- leases and guards are not handed out, so nothing goes backwards (once
-- hands out no token, and works).
SET pg_claim.partition = 5;
SELECT pg_temp.try($$SELECT claim.lease_acquire('tokens-lease-2', '1 minute')$$) AS lease;
SELECT pg_temp.try($$SELECT * FROM claim.claim_next('tokens')$$) AS claim;
SELECT pg_temp.try($$SELECT claim.once('tokens-once')$$) AS once;
SELECT pg_temp.try($$SELECT claim.guard_begin('tokens-guard-2', '1 minute')$$) AS guard;
RESET pg_claim.partition;
SELECT claim.lease_acquire('tokens-lease-2', '1 minute') > (SELECT max(token) FROM t) AS higher_after_reset;

-- claim.set_partition: out of range, lower, and not for PUBLIC.
SELECT pg_temp.try($$SELECT claim.set_partition(64)$$) AS too_high;
SELECT pg_temp.try($$SELECT claim.set_partition(-1)$$) AS negative;
SELECT pg_temp.try($$SELECT claim.set_partition(NULL)$$) AS null_partition;
SELECT has_function_privilege('public', 'claim.set_partition(integer)', 'EXECUTE') AS public_may_set;
-- Confirming the partition it has changes nothing.
SELECT claim.set_partition(claim.partition()) = claim.partition() AS confirmed;
RESET pg_claim.partition;

SELECT claim.complete(token) FROM claim.claimed_items WHERE queue = 'tokens' ORDER BY token;
SELECT claim.drop_queue('tokens');
DO $$ BEGIN EXECUTE format('ALTER DATABASE %I RESET pg_claim.partition', current_database()); END $$;

DROP EXTENSION pg_claim;
