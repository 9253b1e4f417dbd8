-- pg_claim's lock table: a claim holds its items in pg_claim's own table in
-- shared memory, not in PostgreSQL's lock table; a savepoint's rollback
-- gives back what it took; PREPARE keeps the locks of claims and refuses
-- what it cannot keep (reservations under max_active, lease grants).
CREATE EXTENSION pg_claim;
SELECT claim.create_queue('lt', lease => '1 hour');
SELECT count(*) FROM (SELECT claim.enqueue('lt', jsonb_build_object('n', g)) FROM generate_series(1, 600) g) s;

-- the census: 500 claimed items, no entry per item in pg_locks (one for
-- the transaction: its anchor, which waiters wait on, field4 0x5041)
BEGIN;
SELECT count(*) AS claimed FROM claim.claim_next('lt', n => 500);
SELECT held, in_use >= held AS in_use_counts_them, capacity > 0 AS has_capacity FROM claim.lock_table();
SELECT count(*) FILTER (WHERE locktype = 'advisory' AND objsubid = 20545) AS anchors,
       count(*) FILTER (WHERE locktype = 'advisory' AND objsubid <> 20545) AS advisory_locks,
       count(*) FILTER (WHERE NOT fastpath) < 10 AS few_shared_entries
FROM pg_locks WHERE pid = pg_backend_pid();
COMMIT;
SELECT held FROM claim.lock_table();

-- assert_token and complete lock the items of their token until the end of
-- the transaction, re-entrantly
SELECT token AS tok FROM claim.claim_next('lt') \gset
BEGIN;
SELECT claim.assert_token(:tok);
SELECT claim.assert_token(:tok);
SELECT held FROM claim.lock_table();
SELECT claim.complete(:tok);
SELECT held FROM claim.lock_table();
COMMIT;
SELECT held FROM claim.lock_table();

-- a savepoint's rollback gives back its claims' locks; the claims are undone
BEGIN;
SELECT count(*) FROM claim.claim_next('lt', n => 3);
SAVEPOINT s;
SELECT count(*) FROM claim.claim_next('lt', n => 5);
SELECT held FROM claim.lock_table();
ROLLBACK TO SAVEPOINT s;
SELECT held FROM claim.lock_table();
SAVEPOINT t;
SELECT count(*) FROM claim.claim_next('lt', n => 2);
RELEASE SAVEPOINT t;
SELECT held FROM claim.lock_table();
COMMIT;
SELECT count(*) AS live_claims FROM claim.claimed_items WHERE queue = 'lt' AND live;

-- an error inside a savepoint (PL/pgSQL exception block) gives back too
DO $$
BEGIN
    BEGIN
        PERFORM claim.claim_next('lt', n => 4);
        RAISE EXCEPTION 'handler failed';
    EXCEPTION WHEN OTHERS THEN
        NULL;
    END;
    IF (SELECT held FROM claim.lock_table()) <> 0 THEN
        RAISE EXCEPTION 'locks kept after the block rolled back';
    END IF;
END $$;

-- PREPARE: a claim can be prepared and keeps its item until resolved
BEGIN;
SELECT count(*) FROM claim.claim_next('lt', n => 2);
PREPARE TRANSACTION 'lt_claim';
SELECT held FROM claim.lock_table();
ROLLBACK PREPARED 'lt_claim';

-- reservations under max_active and lease grants cannot be prepared: the
-- transaction rolls back with 0A000, and nothing stays reserved
SELECT claim.create_queue('lt_limited', max_active => 1);
SELECT claim.enqueue('lt_limited', '{}') FROM generate_series(1, 2);
\set VERBOSITY sqlstate
BEGIN;
SELECT count(*) FROM claim.claim_next('lt_limited');
PREPARE TRANSACTION 'lt_limited';
BEGIN;
SELECT claim.lease_acquire('lt_lease', '1 minute') IS NOT NULL AS granted;
PREPARE TRANSACTION 'lt_lease';
\set VERBOSITY default
SELECT count(*) AS claimed_after_refusal FROM claim.claim_next('lt_limited');
SELECT claim.lease_acquire('lt_lease', '1 minute', permits => 2) IS NOT NULL AS granted_after_refusal;
SELECT count(*) AS prepared FROM pg_prepared_xacts;

DROP EXTENSION pg_claim;
