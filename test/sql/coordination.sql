-- The coordination service (docs/coordination.md): sessions, leader
-- election, latches and the revisioned watch, with every error they raise.
-- Ids, epochs and times vary between runs: the queries show booleans and
-- relative values only.
CREATE EXTENSION pg_claim;

\getenv abs_srcdir PG_ABS_SRCDIR
\i :abs_srcdir/sql/include/try.sql
\i :abs_srcdir/sql/include/tokens.sql
-- session ids vary: messages read "session N"
CREATE FUNCTION pg_temp.try_s(sql text) RETURNS text LANGUAGE sql AS
$$ SELECT regexp_replace(pg_temp.try(sql), 'session -?\d+', 'session N', 'g') $$;

-- ------------------------------------------------------------------ sessions
-- untyped positional parameters, as drivers send them
INSERT INTO t SELECT 's1', claim.session_open('30 seconds', 'worker-a', '0');
SELECT holder, expires - started AS ttl, lock_delay, leads FROM claim.sessions;
-- a session id is a fencing token: the next token of the database is higher
INSERT INTO t SELECT 'g1', claim.guard_begin('coord-probe', '1 minute');
SELECT pg_temp.tok('g1') > pg_temp.tok('s1') AS one_token_sequence;
-- keepalive: a new expiry from the server clock
SELECT claim.session_keepalive(pg_temp.tok('s1'))
       BETWEEN clock_timestamp() + interval '29 seconds' AND clock_timestamp() + interval '30 seconds'
       AS renewed;
-- a session never outlives its ttl, whether or not the worker ran
INSERT INTO t SELECT 's2', claim.session_open('0.2 seconds', 'short');
SELECT pg_sleep(0.3);
SELECT count(*) AS live_short FROM claim.sessions WHERE holder = 'short';
SELECT pg_temp.try_s(format('SELECT claim.session_keepalive(%s)', pg_temp.tok('s2')));
SELECT pg_temp.try_s(format('SELECT claim.session_close(%s)', pg_temp.tok('s2')));
-- errors
SELECT pg_temp.try('SELECT claim.session_open(''0''::interval)');
SELECT pg_temp.try('SELECT claim.session_open(''2 days''::interval)');
SELECT pg_temp.try('SELECT claim.session_open(''1 second'', NULL, ''-1 second''::interval)');
SELECT pg_temp.try('SELECT claim.session_keepalive(NULL)');
SELECT pg_temp.try_s('SELECT claim.session_keepalive(-1)');

-- ----------------------------------------------------------------- election
-- a leader with a ttl
INSERT INTO t SELECT 'e1', claim.elect('cron/nightly', '30 seconds', NULL, 'host-a');
SELECT holder, epoch = pg_temp.tok('e1') AS same_epoch, until - since AS ttl
FROM claim.leader('cron/nightly');
-- another candidate is refused at once (wait defaults to 0) ...
SELECT claim.elect('cron/nightly', '30 seconds', NULL, 'host-b') IS NULL AS refused;
-- ... and after waiting
SELECT claim.elect('cron/nightly', '30 seconds', NULL, 'host-b', '0.1 seconds') IS NULL AS refused_after_wait;
-- the same holder renews its leadership under the same epoch
SELECT claim.elect('cron/nightly', '1 hour', NULL, 'host-a') = pg_temp.tok('e1') AS same_epoch_renewed;
SELECT until - since > interval '59 minutes' AS extended FROM claim.leader('cron/nightly');
-- resign: only the live epoch
SELECT claim.resign('cron/nightly', pg_temp.tok('e1') + 1) AS wrong_epoch;
SELECT claim.resign('cron/nightly', pg_temp.tok('e1')) AS resigned;
SELECT claim.resign('cron/nightly', pg_temp.tok('e1')) AS resigned_twice;
SELECT count(*) AS leaders FROM claim.leader('cron/nightly');
-- the next leader's epoch is higher
INSERT INTO t SELECT 'e2', claim.elect('cron/nightly', '30 seconds', NULL, 'host-b');
SELECT pg_temp.tok('e2') > pg_temp.tok('e1') AS higher_epoch;
-- a ttl leader whose time ran out is replaced
INSERT INTO t SELECT 'e3', claim.elect('short/leader', '0.1 seconds', NULL, 'host-a');
SELECT claim.elect('short/leader', '30 seconds', NULL, 'host-b', '5 seconds') > pg_temp.tok('e3')
       AS replaced_after_ttl;
SELECT holder FROM claim.leader('short/leader');

-- a leader carried by a session: it leads as long as the session lives
INSERT INTO t SELECT 'e4', claim.elect('svc/primary', NULL, pg_temp.tok('s1'));
SELECT holder, until = (SELECT expires FROM claim.sessions WHERE session = pg_temp.tok('s1')) AS until_session
FROM claim.leader('svc/primary');
SELECT leads FROM claim.sessions WHERE session = pg_temp.tok('s1');
-- electing again with the same session keeps the epoch
SELECT claim.elect('svc/primary', NULL, pg_temp.tok('s1')) = pg_temp.tok('e4') AS same_epoch;
-- closing the session releases what it carried, and counts it
SELECT claim.session_close(pg_temp.tok('s1')) AS released;
SELECT count(*) AS leaders FROM claim.leader('svc/primary');
SELECT pg_temp.try_s(format('SELECT claim.session_keepalive(%s)', pg_temp.tok('s1')));
SELECT pg_temp.try_s(format('SELECT claim.elect(''x'', NULL, %s)', pg_temp.tok('s1')));

-- lock_delay: the leadership of a session that expired is not granted again
-- before the session's expiry + lock_delay
SELECT clock_timestamp() AS before_open \gset
INSERT INTO t SELECT 's3', claim.session_open('0.2 seconds', 'paused', '1 second');
INSERT INTO t SELECT 'e5', claim.elect('svc/delayed', NULL, pg_temp.tok('s3'));
SELECT holder FROM claim.leader('svc/delayed');
SELECT pg_sleep(0.3);
SELECT count(*) AS leaders_after_expiry FROM claim.leader('svc/delayed');
SELECT claim.elect('svc/delayed', '30 seconds', NULL, 'next') IS NULL AS delayed;
INSERT INTO t SELECT 'e6', claim.elect('svc/delayed', '30 seconds', NULL, 'next', '5 seconds');
SELECT clock_timestamp() >= :'before_open'::timestamptz + interval '1.2 seconds'
       AS granted_after_expiry_and_delay;
SELECT holder, epoch > pg_temp.tok('e5') AS higher_epoch FROM claim.leader('svc/delayed');

-- errors
SELECT pg_temp.try('SELECT claim.elect(''a'')');
SELECT pg_temp.try('SELECT claim.elect(''a'', ''1 second'', 1)');
SELECT pg_temp.try('SELECT claim.elect(NULL, ''1 second'')');
SELECT pg_temp.try(format('SELECT claim.elect(%L, ''1 second'')', repeat('x', 1025)));
SELECT pg_temp.try('SELECT claim.elect(''a'', ''0''::interval)');
SELECT pg_temp.try('SELECT claim.elect(''a'', ''1 second'', NULL, NULL, ''-1 second''::interval)');

-- ---------------------------------------------------- leases of a session
-- claim.session_lease: a lease with no ttl of its own, held until the
-- session's expiry + lock_delay, renewed by its keepalives, released when
-- the session is closed.
INSERT INTO t SELECT 's4', claim.session_open('30 seconds', 'lessee');
INSERT INTO t SELECT 'l1', claim.session_lease(pg_temp.tok('s4'), 'res/a');
INSERT INTO t SELECT 'l2', claim.session_lease(pg_temp.tok('s4'), 'res/b', 'h', 2, '0');
SELECT h.name, h.holder, h.expires_at = s.expires AS until_session
FROM claim.leases h, claim.sessions s WHERE s.session = pg_temp.tok('s4') ORDER BY h.name;
SELECT leases FROM claim.sessions WHERE session = pg_temp.tok('s4');
SELECT claim.lease_acquire('res/a', '10 seconds') IS NULL AS held;
SELECT pg_temp.try(format('SELECT claim.lease_assert(%L, %s)', 'res/a', pg_temp.tok('l1')));
SELECT claim.session_keepalive(pg_temp.tok('s4')) AS renewed_to \gset
SELECT bool_and(expires_at = :'renewed_to') AS keepalive_renews_leases
FROM claim.leases WHERE name IN ('res/a', 'res/b');
SELECT claim.session_close(pg_temp.tok('s4')) AS released;
SELECT count(*) AS leases_left FROM claim.leases WHERE name LIKE 'res/%';
SELECT pg_temp.try_s(format('SELECT claim.session_lease(%s, %L)', pg_temp.tok('s4'), 'res/c'));
SELECT pg_temp.try('SELECT claim.session_lease(NULL, ''res/c'')');
-- a session that expires leaves its leases held for lock_delay more
INSERT INTO t SELECT 's5', claim.session_open('0.2 seconds', 'paused', '1 second');
INSERT INTO t SELECT 'l3', claim.session_lease(pg_temp.tok('s5'), 'res/d');
SELECT pg_sleep(0.3);
SELECT count(*) AS session_gone FROM claim.sessions WHERE session = pg_temp.tok('s5');
SELECT claim.lease_acquire('res/d', '10 seconds') IS NULL AS delayed;
SELECT claim.lease_acquire('res/d', '10 seconds', wait => '5 seconds') > pg_temp.tok('l3') AS granted_after_delay;

-- ---------------------------------------------------- claims of a session
-- claim.session_claim: claims that run out with the session, renewed by its
-- keepalives (one statement for all of them), given back by session_close.
SELECT claim.create_queue('coord_jobs');
SELECT count(claim.enqueue('coord_jobs', jsonb_build_object('i', g))) AS enqueued FROM generate_series(1, 5) g;
INSERT INTO t SELECT 's6', claim.session_open('30 seconds', 'worker-7');
SELECT count(*) AS claimed, bool_and(c.lease_until = s.expires) AS until_session
FROM claim.session_claim(pg_temp.tok('s6'), 'coord_jobs', 3) c, claim.sessions s
WHERE s.session = pg_temp.tok('s6');
SELECT claims FROM claim.sessions WHERE session = pg_temp.tok('s6');
SELECT DISTINCT worker FROM claim.claims;
SELECT claim.session_keepalive(pg_temp.tok('s6')) AS renewed_to \gset
SELECT bool_and(lease_until = :'renewed_to') AS keepalive_renews_claims FROM claim.claims;
SELECT claim.session_close(pg_temp.tok('s6')) AS given_back;
SELECT count(*) AS live_claims FROM claim.claims WHERE lease_until > clock_timestamp();
-- a session that expires: its claims run out with it (no lock_delay)
INSERT INTO t SELECT 's7', claim.session_open('0.2 seconds', 'worker-8', '1 hour');
SELECT count(*) AS claimed FROM claim.session_claim(pg_temp.tok('s7'), 'coord_jobs', 2);
SELECT pg_sleep(0.3);
SELECT count(*) AS claimable_again FROM claim.claim_next('coord_jobs', 5);
SELECT pg_temp.try_s(format('SELECT claim.session_claim(%s, %L)', pg_temp.tok('s7'), 'coord_jobs'));
-- group_claim too: a group's head items, attached to the session
SELECT count(claim.enqueue('coord_jobs', '{}', group_key => 'g1')) AS enqueued FROM generate_series(1, 3);
INSERT INTO t SELECT 's8', claim.session_open('30 seconds', 'grouper');
SELECT count(*) AS group_claimed, bool_and(c.lease_until = s.expires) AS until_session
FROM claim.session_group_claim(pg_temp.tok('s8'), 'coord_jobs', 10) c, claim.sessions s
WHERE s.session = pg_temp.tok('s8');
SELECT claims FROM claim.sessions WHERE session = pg_temp.tok('s8');
SELECT claim.session_close(pg_temp.tok('s8')) AS given_back;
SELECT claim.drop_queue('coord_jobs');

-- ------------------------------------------------------------------ latches
SELECT claim.latch('deploy/ready', 2);
SELECT claim.latch_wait('deploy/ready') AS open_at_once;
SELECT claim.count_down('deploy/ready') AS left_1;
SELECT claim.latch_wait('deploy/ready', '0.05 seconds') AS open_after_wait;
SELECT claim.count_down('deploy/ready') AS left_0;
SELECT claim.count_down('deploy/ready') AS stays_0;
SELECT claim.latch_wait('deploy/ready', '1 second') AS open;
SELECT pg_temp.try('SELECT claim.count_down(''nope'')');
SELECT pg_temp.try('SELECT claim.latch_wait(''nope'')');
SELECT pg_temp.try('SELECT claim.latch(''x'', -1)');

-- ----------------------------------------------------------------- barriers
-- (the parties' race: test/isolation/specs/coordination.spec)
SELECT claim.barrier('solo', 1, '0') AS order_alone;
SELECT claim.barrier('solo', 1, '0') AS next_generation;
SELECT claim.barrier('pair', 2, '0.05 seconds') IS NULL AS timed_out;
SELECT claim.barrier('pair', 1, '0') AS left_after_timeout;
SELECT pg_temp.try('SELECT claim.barrier(''x'', 0, ''0'')');
SELECT pg_temp.try('SELECT claim.barrier(''x'', 2, ''-1 second''::interval)');
SELECT pg_temp.try('SELECT claim.barrier(NULL, 2, ''1 second'')');
SELECT pg_temp.try('SELECT claim.barrier(''x'', 2, NULL)');

-- -------------------------------------------------------------------- watch
-- every change under a prefix, in revision order
SELECT kind, name, event, holder FROM claim.watch('cron/') ORDER BY revision;
SELECT kind, name, event FROM claim.watch('deploy/') ORDER BY revision;
-- revisions rise; resuming after one returns only what came later
SELECT bool_and(revision > 0) AND count(*) = count(DISTINCT revision) AS distinct_revisions
FROM claim.watch('');
SELECT max(revision) = claim.revision() AS revision_is_last FROM claim.watch('');
SELECT count(*) AS after_last FROM claim.watch('', claim.revision());
SELECT name, event FROM claim.watch('cron/',
       (SELECT max(revision) FROM claim.watch('cron/') WHERE event = 'resigned'));
-- a wait that nothing ends returns nothing when its time is up
SELECT count(*) AS nothing_new FROM claim.watch('cron/', claim.revision(), '0.05 seconds');
SELECT pg_temp.try('SELECT * FROM claim.watch(''a'', -1)');
-- compaction: revisions older than pg_claim.watch_retention are deleted by
-- the worker (here by its function), and a watch from one of them raises
-- PC004, never a silent gap
SELECT claim.revision() AS before_compaction \gset
SELECT pg_sleep(1.05);
SET pg_claim.watch_retention = '1s';
DO $$  -- the worker may hold the log's lock for a moment: then look again
BEGIN
    FOR i IN 1 .. 100 LOOP
        PERFORM claim._coord_maintain();
        EXIT WHEN claim._coord_compacted() > 0;
        PERFORM pg_sleep(0.02);
    END LOOP;
END $$;
RESET pg_claim.watch_retention;
SELECT claim._coord_compacted() >= :before_compaction AS compacted;
SELECT pg_temp.try('SELECT * FROM claim.watch(''cron/'', 1)');
SELECT count(*) AS from_current FROM claim.watch('', claim.revision());

-- -------------------------------------------------------------------- roles
-- Workers and admins use the service; producers and roles with neither get
-- 42501. A session is its owner's: another worker role may not keep it
-- alive, close it or elect with it; an admin may.
SELECT claim.create_queue('roles_q');
CREATE ROLE regress_coord_w1 NOLOGIN IN ROLE claim_worker;
CREATE ROLE regress_coord_w2 NOLOGIN IN ROLE claim_worker;
CREATE ROLE regress_coord_a NOLOGIN IN ROLE claim_admin;
CREATE ROLE regress_coord_p NOLOGIN IN ROLE claim_producer;
CREATE ROLE regress_coord_none NOLOGIN;
GRANT ALL ON t TO PUBLIC;
SET ROLE regress_coord_w1;
INSERT INTO t SELECT 'w1', claim.session_open('30 seconds', 'w1');
SELECT claim.elect('roles/leader', '30 seconds', NULL, 'w1') IS NOT NULL AS worker_elects;
SELECT count(*) AS worker_reads_leader FROM claim.leader('roles/leader');
SELECT claim.latch('roles/latch', 1) IS NULL AS worker_latch;
SELECT claim.count_down('roles/latch') AS worker_count_down;
SELECT claim.session_lease(pg_temp.tok('w1'), 'roles/lease') IS NOT NULL AS worker_session_lease;
SELECT count(*) AS worker_session_claim FROM claim.session_claim(pg_temp.tok('w1'), 'roles_q');
SELECT claim.barrier('roles/b', 1, '0') AS worker_barrier;
SELECT count(*) > 0 AS worker_watches FROM claim.watch('roles/');
SELECT count(*) AS worker_sees_sessions FROM claim.sessions WHERE holder = 'w1';
SET ROLE regress_coord_w2;
SELECT pg_temp.try_s(format('SELECT claim.session_keepalive(%s)', pg_temp.tok('w1')));
SELECT pg_temp.try_s(format('SELECT claim.session_close(%s)', pg_temp.tok('w1')));
SELECT pg_temp.try_s(format('SELECT claim.elect(''roles/other'', NULL, %s)', pg_temp.tok('w1')));
SELECT pg_temp.try_s(format('SELECT claim.session_lease(%s, ''roles/other'')', pg_temp.tok('w1')));
SELECT pg_temp.try_s(format('SELECT claim.session_claim(%s, ''roles_q'')', pg_temp.tok('w1')));
SET ROLE regress_coord_a;
SELECT pg_temp.try_s(format('SELECT claim.session_keepalive(%s)', pg_temp.tok('w1')));
SET ROLE regress_coord_p;
SELECT pg_temp.try('SELECT claim.session_open()');
SELECT pg_temp.try('SELECT claim.session_claim(1, ''roles_q'')');
SELECT pg_temp.try('SELECT claim.session_group_claim(1, ''roles_q'')');
SELECT pg_temp.try('SELECT claim.elect(''roles/leader'', ''1 second'')');
SELECT pg_temp.try('SELECT * FROM claim.leader(''roles/leader'')');
SELECT pg_temp.try('SELECT * FROM claim.watch('''')');
SELECT pg_temp.try('SELECT * FROM claim.sessions');
SELECT pg_temp.try('SELECT claim.barrier(''roles/b'', 1, ''0'')');
SET ROLE regress_coord_none;
SELECT pg_temp.try('SELECT claim.session_open()');
SELECT pg_temp.try('SELECT claim.latch_wait(''roles/latch'')');
SELECT pg_temp.try('SELECT claim._coord_maintain()');
RESET ROLE;
SELECT claim.session_close(pg_temp.tok('w1')) AS closed_by_installer;

-- writes need a primary: a read-only transaction behaves like a standby for
-- the checks below only where it writes (a standby raises 25006)
BEGIN TRANSACTION READ ONLY;
SELECT pg_temp.try('SELECT claim.session_open()');
ROLLBACK;
DROP EXTENSION pg_claim;
DROP ROLE regress_coord_w1, regress_coord_w2, regress_coord_a, regress_coord_p, regress_coord_none;
