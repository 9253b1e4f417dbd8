-- The recipes of docs/coordination.md, as written there.
CREATE EXTENSION pg_claim;

-- Leader election for a cron runner
SELECT claim.session_open('15 seconds', 'runner-a') AS s \gset
SELECT claim.elect('cron/runner', session => :s, wait => '1 second') AS epoch \gset
-- every 5 seconds, while running:
SELECT claim.session_keepalive(:s) > clock_timestamp() AS alive;
-- anyone may ask who runs the jobs:
SELECT holder, epoch = :epoch AS current FROM claim.leader('cron/runner');
-- on shutdown (leadership ends at once, the next runner is elected):
SELECT claim.session_close(:s) AS released;

-- A read-mostly config lock
SELECT claim.session_open('15 seconds', 'reader-1') AS r1 \gset
SELECT claim.session_open('15 seconds', 'reader-2') AS r2 \gset
SELECT claim.session_lease(:r1, 'config/app', mode => 'shared') IS NOT NULL AS reading;
SELECT claim.session_lease(:r2, 'config/app', mode => 'shared') IS NOT NULL AS reading;
-- the writer: NULL while readers hold it
SELECT claim.lease_acquire('config/app', '30 seconds', 'writer') IS NULL AS readers_in_the_way;
-- the readers finish
SELECT claim.session_close(:r1), claim.session_close(:r2);
SELECT claim.lease_acquire('config/app', '30 seconds', 'writer', wait => '5 seconds') AS w \gset
BEGIN;
SELECT claim.lease_assert('config/app', :w);
-- UPDATE app_config SET ... ;
COMMIT;
SELECT claim.lease_release('config/app', :w) AS released;

-- A rolling deploy gate
SELECT claim.latch('deploy/v42', 3);
-- on each of the three hosts, in its own transaction:
SELECT claim.count_down('deploy/v42');
SELECT claim.count_down('deploy/v42');
SELECT claim.count_down('deploy/v42');
-- the deployer:
SELECT claim.latch_wait('deploy/v42', '10 minutes') AS all_hosts_done;

-- A watch-driven cache
SELECT claim.revision() AS rev \gset
SELECT holder, epoch FROM claim.leader('cron/runner');   -- the cached state
SELECT claim.elect('cron/runner', '30 seconds', holder => 'runner-b') IS NOT NULL AS elected;
SELECT name, event, holder FROM claim.watch('cron/', :rev, '30 seconds');
SELECT max(revision) AS rev FROM claim.watch('cron/', :rev) \gset
SELECT count(*) AS nothing_new FROM claim.watch('cron/', :rev, '0.1 seconds');

DROP EXTENSION pg_claim;
