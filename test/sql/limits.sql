-- Flow control: max_active, group_limit, rate (per queue and per group),
-- enforced at the claim; alter_queue changes them; every error.
CREATE EXTENSION pg_claim;

\getenv abs_srcdir PG_ABS_SRCDIR
\i :abs_srcdir/sql/include/try.sql

-- ---------------------------------------------------------------- errors
SELECT pg_temp.try($$SELECT claim.create_queue('bad', max_active => 0)$$);
SELECT pg_temp.try($$SELECT claim.create_queue('bad', max_active => -3)$$);
SELECT pg_temp.try($$SELECT claim.create_queue('bad', group_limit => 0)$$);
SELECT pg_temp.try($$SELECT claim.create_queue('bad', group_limit => NULL)$$);
SELECT pg_temp.try($$SELECT claim.create_queue('bad', rate => 0)$$);
SELECT pg_temp.try($$SELECT claim.create_queue('bad', rate => 10, rate_per => '0 s')$$);
SELECT pg_temp.try($$SELECT claim.create_queue('bad', rate => 10, rate_per => '-1 s')$$);
SELECT pg_temp.try($$SELECT claim.create_queue('bad', rate_per_group => NULL)$$);
SELECT count(*) AS none_created FROM claim.queues WHERE name = 'bad';
-- an item's order is -priority: the smallest int4 has no negation
SELECT claim.create_queue('prio');
SELECT pg_temp.try($$SELECT claim.enqueue('prio', '{}', priority => -2147483648)$$);
SELECT pg_temp.try($$SELECT claim.enqueue_many('prio', ARRAY['{}']::jsonb[], priority => -2147483648)$$);
SELECT claim.enqueue('prio', '{}', priority => -2147483647) > 0 AS lowest_priority_works;

-- ---------------------------------------------------------------- max_active
SELECT claim.create_queue('two', lease => '1 hour', max_active => 2);
SELECT name, max_active, group_limit, rate, rate_per, rate_per_group FROM claim.queues WHERE name = 'two';
SELECT count(claim.enqueue('two', jsonb_build_object('n', g))) FROM generate_series(1, 5) g;
SELECT count(*) AS first_call FROM claim.claim_next('two', n => 5);
SELECT count(*) AS at_the_limit FROM claim.claim_next('two', n => 5);
SELECT count(*) AS waited_at_the_limit FROM claim.claim_next('two', wait => '50 ms');
SELECT claim.complete(min(token)) FROM claim.claimed_items WHERE queue = 'two';
SELECT count(*) AS after_one_completed FROM claim.claim_next('two', n => 5);
-- a released claim frees its slot too
SELECT claim.release(min(token)) FROM claim.claimed_items WHERE queue = 'two' AND live;
SELECT count(*) AS after_release FROM claim.claim_next('two', n => 5);
-- raising the limit lets more in; 0 removes it
SELECT claim.alter_queue('two', max_active => 3);
SELECT count(*) AS after_raise FROM claim.claim_next('two', n => 5);
SELECT claim.alter_queue('two', max_active => 0);
SELECT max_active IS NULL AS no_limit FROM claim.queues WHERE name = 'two';
SELECT count(*) AS unlimited FROM claim.claim_next('two', n => 5);
SELECT pg_temp.try($$SELECT claim.alter_queue('two', max_active => -1)$$);
-- group_claim cannot keep such a limit
SELECT claim.alter_queue('two', max_active => 10);
SELECT pg_temp.try($$SELECT * FROM claim.group_claim('two')$$);

-- ---------------------------------------------------------------- group_limit
SELECT claim.create_queue('tenants', lease => '1 hour', group_limit => 2);
SELECT claim.enqueue('tenants', jsonb_build_object('n', g), group_key => 'acme') FROM generate_series(1, 4) g;
SELECT claim.enqueue('tenants', '{"n": 9}', group_key => 'other');
-- one item per group per call, started in enqueue order, at most 2 of acme in flight
SELECT payload->>'n' AS n, group_key FROM claim.claim_next('tenants', n => 10) ORDER BY id;
SELECT payload->>'n' AS n, group_key FROM claim.claim_next('tenants', n => 10) ORDER BY id;
SELECT count(*) AS third_of_acme FROM claim.claim_next('tenants', n => 10);
SELECT claim.complete(token) FROM claim.claimed_items c WHERE queue = 'tenants'
  AND id = (SELECT min(id) FROM claim.claimed_items WHERE queue = 'tenants');
SELECT payload->>'n' AS n FROM claim.claim_next('tenants', n => 10);
SELECT pg_temp.try($$SELECT claim.alter_queue('tenants', group_limit => 0)$$);

-- ---------------------------------------------------------------- rate
-- 10 per hour: a burst of 1, then the next one in 6 minutes
SELECT claim.create_queue('slow', lease => '1 hour', rate => 10, rate_per => '1 hour');
SELECT count(claim.enqueue('slow', jsonb_build_object('n', g))) FROM generate_series(1, 5) g;
SELECT count(*) AS first FROM claim.claim_next('slow', n => 5);
SELECT count(*) AS over_the_rate FROM claim.claim_next('slow', n => 5);
SELECT count(*) AS waited_over_the_rate FROM claim.claim_next('slow', wait => '50 ms');
-- per group: each group key has its own allowance
SELECT claim.create_queue('per_group', lease => '1 hour', rate => 10, rate_per => '1 hour',
                          rate_per_group => true);
SELECT count(claim.enqueue('per_group', '{}', group_key => k)) FROM unnest(ARRAY['a', 'a', 'b', 'b']) k;
SELECT claim.complete(token) FROM claim.claim_next('per_group', n => 10);
SELECT count(*) AS next_round FROM claim.claim_next('per_group', n => 10);
-- removing the rate lets the rest go
SELECT claim.alter_queue('slow', rate => 0);
SELECT count(*) AS unlimited FROM claim.claim_next('slow', n => 5);

DROP EXTENSION pg_claim;
