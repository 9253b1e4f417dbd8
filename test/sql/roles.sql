-- Roles claim_producer, claim_worker and claim_admin: every function and
-- view of schema claim called as a member of each, and as a role with none
-- of them. Each call either works ("ok") or is refused with 42501. Every
-- call runs in a subtransaction that is rolled back, after a set-up run as
-- the installer in the same subtransaction (an item to claim, a token to
-- complete, a lease to renew). docs/roles.md shows the same table.
CREATE EXTENSION pg_claim;

-- The install creates the roles NOLOGIN, without attributes or memberships.
SELECT rolname, rolcanlogin, rolsuper, rolcreaterole, rolcreatedb, rolreplication, rolbypassrls,
       (SELECT count(*) FROM pg_auth_members m WHERE m.member = r.oid) AS member_of
FROM pg_roles r WHERE rolname LIKE 'claim\_%' ORDER BY rolname;

CREATE ROLE regress_claim_p NOLOGIN IN ROLE claim_producer;
CREATE ROLE regress_claim_w NOLOGIN IN ROLE claim_worker;
CREATE ROLE regress_claim_a NOLOGIN IN ROLE claim_admin;
CREATE ROLE regress_claim_none NOLOGIN;

SELECT claim.create_queue('rq', lease => '1 hour');
SELECT claim.create_queue('rone', lease => '1 hour', max_attempts => 1);
SELECT claim.create_queue('rkept', lease => '1 hour', retain => '1 hour');
SELECT claim.create_queue('rlim', lease => '1 hour', max_active => 5, group_limit => 2);
SELECT claim.create_queue('rrate', lease => '1 hour', rate => 1000, rate_per_group => true);
-- A dead item to redrive.
SELECT claim.enqueue('rone', '{"dead": true}') IS NOT NULL AS enqueued;
SELECT claim.fail((SELECT token FROM claim.claim_next('rone')), 'broken') AS failed;

-- An application table feeding a queue through enqueue_trigger.
CREATE TABLE public.roles_src (id int);
GRANT INSERT ON public.roles_src TO PUBLIC;
CREATE TRIGGER roles_src_enqueue AFTER INSERT ON public.roles_src
    FOR EACH ROW EXECUTE FUNCTION claim.enqueue_trigger('rq');

CREATE TABLE pg_temp.calls (n serial, label text, setup text, call text);
INSERT INTO pg_temp.calls (label, setup, call) VALUES
 ('enqueue', NULL, $$SELECT claim.enqueue('rq', '{}')$$),
 ('enqueue(after)', $$SELECT claim.enqueue('rq', '{}')$$, $$SELECT claim.enqueue('rq', '{}', after => ARRAY[$v])$$),
 ('enqueue(dedup_key)', $$SELECT claim.enqueue('rq', '{}', dedup_key => 'd')$$, $$SELECT claim.enqueue('rq', '{}', dedup_key => 'd')$$),
 ('enqueue_batch', NULL, $$SELECT claim.enqueue_many('rq', ARRAY['{}'::jsonb, '{}'])$$),
 ('enqueue_trigger (INSERT)', NULL, $$INSERT INTO public.roles_src VALUES (1)$$),
 ('item_state', $$SELECT claim.enqueue('rq', '{}')$$, $$SELECT claim.item_state('rq', $v)$$),
 ('claim_next', $$SELECT claim.enqueue('rq', '{}')$$, $$SELECT claim.claim_next('rq')$$),
 ('claim_next(done)', $$SELECT claim.enqueue('rq', '{}'); SELECT token FROM claim.claim_next('rq')$$, $$SELECT claim.claim_next('rq', done => ARRAY[$v])$$),
 ('complete', $$SELECT claim.enqueue('rq', '{}'); SELECT token FROM claim.claim_next('rq')$$, $$SELECT claim.complete($v)$$),
 ('complete(result, retained)', $$SELECT claim.enqueue('rkept', '{}'); SELECT token FROM claim.claim_next('rkept')$$, $$SELECT claim.complete($v, '{"r": 1}')$$),
 ('complete(tokens[])', $$SELECT claim.enqueue('rq', '{}'); SELECT token FROM claim.claim_next('rq')$$, $$SELECT claim.complete_many(ARRAY[$v])$$),
 ('complete(parent of a waiting item)', $$SELECT claim.enqueue('rq', '{}', after => ARRAY[claim.enqueue('rq', '{}', priority => 9)]); SELECT token FROM claim.claim_next('rq')$$, $$SELECT claim.complete($v)$$),
 ('fail', $$SELECT claim.enqueue('rq', '{}'); SELECT token FROM claim.claim_next('rq')$$, $$SELECT claim.fail($v, 'e')$$),
 ('fail (last attempt: dead)', $$SELECT claim.enqueue('rone', '{}'); SELECT token FROM claim.claim_next('rone')$$, $$SELECT claim.fail($v, 'e')$$),
 ('extend', $$SELECT claim.enqueue('rq', '{}'); SELECT token FROM claim.claim_next('rq')$$, $$SELECT claim.extend($v)$$),
 ('release', $$SELECT claim.enqueue('rq', '{}'); SELECT token FROM claim.claim_next('rq')$$, $$SELECT claim.release($v)$$),
 ('assert_token', $$SELECT claim.enqueue('rq', '{}'); SELECT token FROM claim.claim_next('rq')$$, $$SELECT claim.assert_token($v)$$),
 ('claim_next (max_active, group_limit)', $$SELECT claim.enqueue('rlim', '{}', group_key => 'g')$$, $$SELECT claim.claim_next('rlim')$$),
 ('claim_next (rate per group)', $$SELECT claim.enqueue('rrate', '{}', group_key => 'g')$$, $$SELECT claim.claim_next('rrate')$$),
 ('group_claim', $$SELECT claim.enqueue('rq', '{}', group_key => 'g')$$, $$SELECT claim.group_claim('rq')$$),
 ('cancel', $$SELECT claim.enqueue('rq', '{}')$$, $$SELECT claim.cancel_many('rq', ARRAY[$v])$$),
 ('cancel (claimed)', $$SELECT claim.enqueue('rq', '{}'); SELECT id FROM claim.claim_next('rq')$$, $$SELECT claim.cancel_many('rq', ARRAY[$v])$$),
 ('lease_acquire', NULL, $$SELECT claim.lease_acquire('l', '1 minute')$$),
 ('lease_renew', $$SELECT claim.lease_acquire('l', '1 minute')$$, $$SELECT claim.lease_renew('l', $v, '1 minute')$$),
 ('lease_release', $$SELECT claim.lease_acquire('l', '1 minute')$$, $$SELECT claim.lease_release('l', $v)$$),
 ('lease_assert', $$SELECT claim.lease_acquire('l', '1 minute')$$, $$SELECT claim.lease_assert('l', $v)$$),
 ('once', NULL, $$SELECT claim.once('k')$$),
 ('guard_begin', NULL, $$SELECT claim.guard_begin('gk', '1 minute')$$),
 ('guard_finish', $$SELECT claim.guard_begin('gk', '1 minute')$$, $$SELECT claim.guard_finish('gk', $v)$$),
 ('guard_abandon', $$SELECT claim.guard_begin('gk', '1 minute')$$, $$SELECT claim.guard_abandon('gk', $v)$$),
 ('guard_result', NULL, $$SELECT claim.guard_result('gk')$$),
 ('create_queue', NULL, $$SELECT claim.create_queue('rnew')$$),
 ('alter_queue', NULL, $$SELECT claim.alter_queue('rq', lease => '2 hours')$$),
 ('pause', NULL, $$SELECT claim.pause('rq')$$),
 ('resume', $$SELECT claim.pause('rq')$$, $$SELECT claim.resume('rq')$$),
 ('redrive', NULL, $$SELECT claim.redrive('rone')$$),
 ('drop_queue', NULL, $$SELECT claim.drop_queue('rq')$$),
 ('lease_purge', NULL, $$SELECT claim.lease_purge()$$),
 ('worker_status', NULL, $$SELECT claim.worker_status()$$),
 ('token_partition', NULL, $$SELECT claim.token_partition(1)$$),
 ('view queue_stats', NULL, $$SELECT count(*) FROM claim.queue_stats$$),
 ('view dead_items', NULL, $$SELECT count(*) FROM claim.dead_items$$),
 ('view claimed_items', NULL, $$SELECT count(*) FROM claim.claimed_items$$),
 ('view finished_items', NULL, $$SELECT count(*) FROM claim.finished_items$$),
 ('view blocked_groups', NULL, $$SELECT count(*) FROM claim.blocked_groups$$),
 ('view leases', NULL, $$SELECT count(*) FROM claim.leases$$);

-- Functions of the 0.2.0 API that other parts add (metrics, schedules)
-- join the matrix when they exist.
INSERT INTO pg_temp.calls (label, setup, call)
SELECT x.label, NULL, x.call
FROM (VALUES ('metrics', 'claim.metrics()', $$SELECT count(*) FROM claim.metrics()$$),
             ('schedule', 'claim.schedule(text,text,text,jsonb,text,integer,text)', $$SELECT claim.schedule('s', '* * * * *', 'rq')$$),
             ('unschedule', 'claim.unschedule(text)', $$SELECT claim.unschedule('s')$$),
             ('cron_next', 'claim.cron_next(text,timestamptz,text)', $$SELECT claim.cron_next('* * * * *')$$),
             ('view schedules', 'claim.schedules', $$SELECT count(*) FROM claim.schedules$$))
     AS x(label, obj, call)
WHERE CASE WHEN x.obj LIKE '%)' THEN to_regprocedure(x.obj) IS NOT NULL
           ELSE to_regclass(x.obj) IS NOT NULL END;

-- 'ok', or the SQLSTATE of the refusal (with its message when it is not 42501).
CREATE FUNCTION pg_temp.as_role(r text, setup text, call text) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    v text;
    res text;
BEGIN
    BEGIN
        IF setup IS NOT NULL THEN
            EXECUTE setup INTO v;
        END IF;
        EXECUTE format('SET LOCAL ROLE %I', r);
        EXECUTE replace(call, '$v', coalesce(v, 'NULL'));
        RAISE EXCEPTION USING ERRCODE = 'PCOK0';
    EXCEPTION WHEN OTHERS THEN
        res := CASE WHEN SQLSTATE = 'PCOK0' THEN 'ok'
                    WHEN SQLSTATE = '42501' THEN '42501'
                    ELSE SQLSTATE || ' ' || SQLERRM END;
    END;
    RETURN res;
END $$;

-- The matrix.
SELECT c.label AS call,
       pg_temp.as_role('regress_claim_p', c.setup, c.call) AS producer,
       pg_temp.as_role('regress_claim_w', c.setup, c.call) AS worker,
       pg_temp.as_role('regress_claim_a', c.setup, c.call) AS admin,
       pg_temp.as_role('regress_claim_none', c.setup, c.call) AS "none"
FROM pg_temp.calls c ORDER BY c.n;

-- The worker role is enough to run a worker loop: claim, heartbeat,
-- assert under the caller's own transaction, complete.
SELECT claim.enqueue('rq', '{"job": 1}') IS NOT NULL AS enqueued;
SET ROLE regress_claim_w;
CREATE FUNCTION pg_temp.loop_once() RETURNS text LANGUAGE plpgsql AS $$
DECLARE t bigint;
BEGIN
    SELECT token INTO t FROM claim.claim_next('rq', lease => '1 minute', wait => '0');
    PERFORM claim.extend(t, '2 minutes');
    PERFORM claim.assert_token(t);
    RETURN claim.complete(t)::text;
END $$;
SELECT pg_temp.loop_once() AS completed;
RESET ROLE;
DROP FUNCTION pg_temp.loop_once();

-- A pre-existing role of one of these names is reused only when it could
-- have been made by the install: NOLOGIN, no attributes, no memberships.
DROP TABLE public.roles_src;
DROP EXTENSION pg_claim;
SELECT count(*) AS roles_left FROM pg_roles WHERE rolname IN ('claim_producer', 'claim_worker', 'claim_admin');
ALTER ROLE claim_worker LOGIN;
\set VERBOSITY default
-- no CONTEXT lines: PostgreSQL 18 adds the extension script's line to them
\set SHOW_CONTEXT never
CREATE EXTENSION pg_claim;
ALTER ROLE claim_worker NOLOGIN;
GRANT pg_read_all_data TO claim_admin;
CREATE EXTENSION pg_claim;
\set VERBOSITY terse
\set SHOW_CONTEXT errors
REVOKE pg_read_all_data FROM claim_admin;
CREATE EXTENSION pg_claim;
SELECT pg_has_role('regress_claim_w', 'claim_worker', 'USAGE') AS membership_kept;

DROP ROLE regress_claim_p, regress_claim_w, regress_claim_a, regress_claim_none;
DROP EXTENSION pg_claim;
