-- Durable steps (docs/steps.md): checkpoints with claim.step / step_done,
-- sleep and sleep_for, await_event / emit_event, await_children, the view
-- item_steps, and every error they raise. Tokens and ids vary: the queries
-- show booleans and relative values only.
CREATE EXTENSION pg_claim;

\getenv abs_srcdir PG_ABS_SRCDIR
\i :abs_srcdir/sql/include/try.sql

SELECT claim.create_queue('runs', retain => '1 hour');
SELECT claim.create_queue('kids', retain => '1 hour');
SELECT claim.enqueue('runs', '{"order": 1}') AS run \gset

-- ------------------------------------------------------------ step, step_done
SELECT token AS t1, attempt FROM claim.claim_next('runs') \gset
SELECT :attempt AS attempt;
-- not done yet: SQL NULL
SELECT claim.step(:t1, 'charge') IS NULL AS not_done;
SELECT claim.step_done(:t1, 'charge', '{"charge": "ch_1"}');
-- the first record wins
SELECT claim.step_done(:t1, 'charge', '{"charge": "ch_2"}');
SELECT claim.step(:t1, 'charge') AS charge;
-- a step without output records JSON null: done, not SQL NULL
SELECT claim.step_done(:t1, 'ship');
SELECT claim.step(:t1, 'ship') AS ship, claim.step(:t1, 'ship') IS NULL AS sql_null;
-- a step_done rolled back with the step's own writes leaves nothing
BEGIN;
SELECT claim.step_done(:t1, 'email', '"sent"');
ROLLBACK;
SELECT claim.step(:t1, 'email') IS NULL AS email_not_done;
SELECT queue, id = :run AS same_id, step, output, token = :t1 AS by_t1 FROM claim.item_steps ORDER BY step;
-- item_state shows them as {step: output}
SELECT state, steps FROM claim.item_state('runs', :run);

-- ------------------------------------------------------------ a crash: the lease ends
-- the next claim resumes with the steps; the old token records nothing
SELECT claim.release(:t1);
SELECT token AS t2 FROM claim.claim_next('runs') \gset
SELECT claim.step(:t2, 'charge') AS charge_again;
SELECT pg_temp.try(format('SELECT claim.step_done(%s, %L)', :t1, 'email')) AS stale_done;
SELECT pg_temp.try(format('SELECT claim.step(%s, %L)', :t1, 'charge')) AS stale_step;
SELECT count(*) AS steps FROM claim.steps WHERE step = 'email';

-- ------------------------------------------------------------ sleep, sleep_for
-- the attempt ends without counting: the item is scheduled with its steps
SELECT claim.sleep_for(:t2, '1 hour');
SELECT state, attempt FROM claim.item_state('runs', :run);
SELECT run_at > now() + interval '59 minutes' AS in_an_hour FROM claim.items WHERE id = :run;
SELECT pg_temp.try(format('SELECT claim.step(%s, %L)', :t2, 'charge')) AS after_sleep;
-- due now: the database's worker makes it ready (as it would at the hour);
-- the same attempt again
UPDATE claim.items SET run_at = now() - interval '1 second' WHERE id = :run;
SELECT token AS t3, attempt FROM claim.claim_next('runs', wait => '30 seconds') \gset
SELECT :attempt AS attempt, :t3 > :t2 AS newer_token;
SELECT claim.step(:t3, 'charge') AS charge;
-- sleep until a time that is past: ready at once
SELECT claim.sleep(:t3, now() - interval '1 minute');
SELECT state FROM claim.item_state('runs', :run);
SELECT token AS t4, attempt FROM claim.claim_next('runs') \gset
SELECT :attempt AS attempt;

-- ------------------------------------------------------------ events
-- not emitted: parked (SQL NULL), the token is stale
SELECT claim.await_event(:t4, 'paid:1', '1 hour') IS NULL AS parked;
SELECT state FROM claim.item_state('runs', :run);
SELECT event, until > since + interval '59 minutes' AS an_hour FROM claim.event_waits;
SELECT pg_temp.try(format('SELECT claim.step(%s, %L)', :t4, 'charge')) AS after_park;
-- the emit makes it ready at once and delivers the payload
SELECT claim.emit_event('paid:1', '{"amount": 5}') AS emitted;
SELECT claim.emit_event('paid:1', '{"amount": 6}') AS emitted_again;
SELECT state FROM claim.item_state('runs', :run);
SELECT count(*) AS waits FROM claim.event_waits;
SELECT token AS t5, attempt FROM claim.claim_next('runs') \gset
SELECT :attempt AS attempt;
SELECT claim.await_event(:t5, 'paid:1', '1 hour') AS payload;
-- an event emitted before the wait: at once
SELECT claim.emit_event('shipped:1');
SELECT claim.await_event(:t5, 'shipped:1') AS shipped;
-- a wait that times out: delivered again, then PC010 at every call
SELECT claim.await_event(:t5, 'never', '0') IS NULL AS parked;
SELECT token AS t6 FROM claim.claim_next('runs') \gset
SELECT regexp_replace(pg_temp.try(format('SELECT claim.await_event(%s, %L, %L)', :t6, 'never', '0')),
                      ' at .*', ' at T') AS timed_out;
SELECT regexp_replace(pg_temp.try(format('SELECT claim.await_event(%s, %L, %L)', :t6, 'never', '1 hour')),
                      ' at .*', ' at T') AS again;
SELECT step, output FROM claim.item_steps WHERE id = :run ORDER BY step;

-- ------------------------------------------------------------ children
SELECT claim.enqueue('kids', '{"k": 1}') AS k1 \gset
SELECT claim.enqueue('kids', '{"k": 2}') AS k2 \gset
SELECT claim.step_done(:t6, 'fan-out', jsonb_build_array(:k1, :k2));
SELECT claim.await_children(:t6, ARRAY[:k1, :k2]::bigint[]) IS NULL AS waiting;
SELECT state FROM claim.item_state('runs', :run);
SELECT token AS kt FROM claim.claim_next('kids') \gset
SELECT claim.complete(:kt, '"first"');
SELECT state FROM claim.item_state('runs', :run);
SELECT token AS kt FROM claim.claim_next('kids') \gset
SELECT claim.complete(:kt, '"second"');
SELECT state FROM claim.item_state('runs', :run);
SELECT token AS t7, attempt FROM claim.claim_next('runs') \gset
SELECT :attempt AS attempt;
-- the results in the order given
SELECT claim.await_children(:t7, ARRAY(SELECT x::bigint FROM jsonb_array_elements_text(
    claim.step(:t7, 'fan-out')) WITH ORDINALITY AS a(x, o) ORDER BY o DESC)) AS results_reversed;
SELECT claim.await_children(:t7, '{}') AS none;
SELECT pg_temp.try(format('SELECT claim.await_children(%s, ARRAY[%s]::bigint[])', :t7, :run)) AS itself;
-- a run with a dedup_key cannot wait (its key would be free meanwhile)
SELECT claim.enqueue('runs', '{}', dedup_key => 'd1') AS dr \gset
SELECT token AS dt FROM claim.claim_next('runs') \gset
SELECT pg_temp.try(format('SELECT claim.await_children(%s, ARRAY[%s]::bigint[])', :dt, :k1)) AS dedup_run;
SELECT claim.complete(:dt);
-- a child that died
SELECT claim.create_queue('once', max_attempts => 1);
SELECT claim.enqueue('once', '{}') AS k3 \gset
SELECT token AS kt FROM claim.claim_next('once') \gset
SELECT claim.fail(:kt, 'boom');
SELECT pg_temp.try(format('SELECT claim.await_children(%s, ARRAY[%s]::bigint[])', :t7, :k3)) AS dead_child;

-- ------------------------------------------------------------ retain and purge
SELECT claim.complete(:t7, '"done"');
SELECT count(*) AS kept_with_result FROM claim.item_steps WHERE id = :run;
-- a queue without retain: the steps go with the item (the worker purges
-- orphans; the view never shows them)
SELECT claim.create_queue('plain');
SELECT claim.enqueue('plain', '{}') AS p1 \gset
SELECT token AS pt FROM claim.claim_next('plain') \gset
SELECT claim.step_done(:pt, 'a');
SELECT count(*) AS while_running FROM claim.item_steps WHERE queue = 'plain';
SELECT claim.complete(:pt);
SELECT count(*) AS after_complete FROM claim.item_steps WHERE queue = 'plain';

-- ------------------------------------------------------------ errors
SELECT pg_temp.try('SELECT claim.step(NULL, ''x'')') AS null_token;
SELECT pg_temp.try('SELECT claim.step(1, NULL)') AS null_step;
SELECT pg_temp.try('SELECT claim.step(123456789, ''x'')') AS unknown_token;
SELECT claim.enqueue('runs', '{}') AS r2 \gset
SELECT token AS rt FROM claim.claim_next('runs') \gset
SELECT pg_temp.try(format('SELECT claim.sleep(%s, NULL)', :rt)) AS null_until;
SELECT pg_temp.try(format('SELECT claim.sleep(%s, %L)', :rt, 'infinity')) AS infinite;
SELECT pg_temp.try(format('SELECT claim.sleep_for(%s, %L)', :rt, '-1 second')) AS negative;
SELECT pg_temp.try(format('SELECT claim.await_event(%s, NULL)', :rt)) AS null_event;
SELECT pg_temp.try(format('SELECT claim.await_event(%s, %L, %L)', :rt, 'e', '-1 second')) AS negative_timeout;
SELECT pg_temp.try('SELECT claim.emit_event(NULL)') AS null_emit;
SELECT pg_temp.try(format('SELECT claim.await_children(%s, NULL)', :rt)) AS null_children;
-- a token of several items (group_claim)
SELECT claim.create_queue('grouped');
SELECT count(*) FROM (SELECT claim.enqueue('grouped', '{}', group_key => 'g') FROM generate_series(1, 2)) x;
SELECT min(token) AS gt FROM claim.group_claim('grouped') \gset
SELECT pg_temp.try(format('SELECT claim.step(%s, %L)', :gt, 'x')) AS group_token;

-- ------------------------------------------------------------ untyped parameters
-- every function resolves with untyped positional parameters
PREPARE s1 AS SELECT claim.step($1, $2);
PREPARE s2 AS SELECT claim.step_done($1, $2, $3);
PREPARE s3 AS SELECT claim.sleep($1, $2);
PREPARE s4 AS SELECT claim.sleep_for($1, $2);
PREPARE s5 AS SELECT claim.await_event($1, $2, $3);
PREPARE s6 AS SELECT claim.emit_event($1, $2);
PREPARE s7 AS SELECT claim.await_children($1, $2);
SELECT name, parameter_types FROM pg_prepared_statements ORDER BY name;

DEALLOCATE ALL;
DROP EXTENSION pg_claim;
