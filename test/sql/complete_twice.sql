-- A token used again after its item was completed: PC001, and a hint that
-- does not promise a redelivery that will not come (issue 40).
CREATE EXTENSION pg_claim;
SELECT claim.create_queue('twice');
SELECT claim.enqueue('twice', '{}') AS id \gset
SELECT token FROM claim.claim_next('twice') \gset
SELECT claim.complete(:token);
SELECT set_config('my.token', :'token', false) IS NOT NULL AS token_set;
DO $$
DECLARE st text; msg text; hint text;
BEGIN
    PERFORM claim.complete(pg_catalog.current_setting('my.token')::bigint);
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE, msg = MESSAGE_TEXT, hint = PG_EXCEPTION_HINT;
    RAISE NOTICE '% %', st, regexp_replace(msg, '\d+', 'N');
    RAISE NOTICE 'hint: %', hint;
END $$;
DROP EXTENSION pg_claim;
