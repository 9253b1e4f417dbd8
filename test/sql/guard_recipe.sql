-- The guard recipe of docs/leases.md ("Once-only guards"), as written,
-- against a payment service that deduplicates by idempotency key (as Stripe
-- does), with a crash after the call and before guard_finish. The key is the
-- idempotency key and the token fences: the retry after the crash charges
-- nothing more. The last part shows why the token must not be the key.
CREATE EXTENSION pg_claim;

-- The service: one charge per idempotency key; a repeated key gets the
-- first charge back.
CREATE SCHEMA provider;
CREATE TABLE provider.charges (idempotency_key text PRIMARY KEY, charge_id text NOT NULL, amount int NOT NULL);
CREATE SEQUENCE provider.charge_ids;
CREATE FUNCTION provider.charge(idempotency_key text, amount int) RETURNS jsonb LANGUAGE sql AS $$
    WITH made AS (
        INSERT INTO provider.charges
        VALUES ($1, 'ch_' || nextval('provider.charge_ids'), $2)
        ON CONFLICT (idempotency_key) DO NOTHING
        RETURNING charge_id)
    SELECT jsonb_build_object('charge_id', coalesce(
        (SELECT charge_id FROM made),
        (SELECT c.charge_id FROM provider.charges c WHERE c.idempotency_key = $1)))
$$;

-- ------------------------------------------ attempt 1: the worker crashes
-- 1. (as in the docs, with a short lease so that the test need not wait)
SELECT claim.guard_begin('charge:order-17', lease => '100 milliseconds') AS token \gset
SELECT :token IS NOT NULL AS began;
-- 2. the call, with the key as idempotency key
SELECT provider.charge('charge:order-17', 990) AS charge;
-- The worker dies here: its session ends, guard_finish never runs.
\c
\getenv abs_srcdir PG_ABS_SRCDIR
\i :abs_srcdir/sql/include/try.sql
\set crashed_token :token
SELECT claim.guard_result('charge:order-17') IS NULL AS not_finished;
-- while the crashed attempt's lease runs, nobody else begins
SELECT claim.guard_begin('charge:order-17', lease => '2 minutes') IS NULL AS busy;
SELECT pg_sleep(0.15);

-- ------------------------------------------------ attempt 2: the retry
-- 1. as written in the docs
SELECT claim.guard_begin('charge:order-17', lease => '2 minutes') AS token \gset
SELECT :token > :crashed_token AS newer_token;
-- 2. the same key: the service answers with the first charge
SELECT provider.charge('charge:order-17', 990) AS charge;
-- 3. as written in the docs
SELECT claim.guard_finish('charge:order-17', :token, '{"charge_id": "ch_1"}');
SELECT claim.guard_result('charge:order-17');
-- one charge in all
SELECT count(*) AS charges, sum(amount) AS charged FROM provider.charges;
-- the token fences: the crashed attempt cannot finish or abandon any more
SELECT pg_temp.try(format('SELECT claim.guard_finish(%L, %s, %L)', 'charge:order-17', :crashed_token, '{"charge_id": "ch_2"}'));
SELECT pg_temp.try(format('SELECT claim.guard_abandon(%L, %s)', 'charge:order-17', :crashed_token));
-- and a finished key begins no new attempt
SELECT claim.guard_begin('charge:order-17', lease => '2 minutes') IS NULL AS finished_for_good;

-- ------------------------- the wrong recipe: the token as idempotency key
SELECT claim.guard_begin('charge:order-18', lease => '100 milliseconds') AS token \gset
SELECT provider.charge(:'token', 990) IS NOT NULL AS charged;
\c
SELECT pg_sleep(0.15);
SELECT claim.guard_begin('charge:order-18', lease => '2 minutes') AS token \gset
SELECT provider.charge(:'token', 990) IS NOT NULL AS charged_again;
SELECT claim.guard_finish('charge:order-18', :token, '{}');
-- two charges for one order
SELECT count(*) AS charges FROM provider.charges WHERE idempotency_key <> 'charge:order-17';

DROP SCHEMA provider CASCADE;
DROP EXTENSION pg_claim;
