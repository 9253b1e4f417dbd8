-- claim.metrics(): its shape, and its counters after a known workload in
-- one session. Counters live in shared memory since server start; a queue
-- of a freshly created extension starts from zero.
CREATE EXTENSION pg_claim;

SELECT pg_get_function_result('claim.metrics()'::regprocedure);
SELECT pg_get_function_result('claim.queue_counters(integer)'::regprocedure);

-- The queue's row of claim.metrics() (counters without a slot read NULL: 0 here).
CREATE FUNCTION pg_temp.m(q text) RETURNS TABLE (enq bigint, clm bigint, cpl bigint, fld bigint,
    dead bigint, exp bigint, cxl bigint, ready bigint, sched bigint, in_flight bigint,
    dead_items bigint, waiting bigint, paused boolean, waiters integer)
LANGUAGE sql AS $$
    SELECT coalesce(enqueued, 0), coalesce(claimed, 0), coalesce(completed, 0),
           coalesce(failed, 0), coalesce(dead, 0), coalesce(expired, 0), coalesce(cancelled, 0),
           ready, scheduled, in_flight, dead_items, waiting, paused, waiters
    FROM claim.metrics() WHERE queue = q
$$;

SELECT claim.create_queue('m', lease => '1 hour', max_attempts => 2, backoff => '0');
-- A new queue: counters zero (NULL, shown as 0 here, until its first count
-- takes a slot).
SELECT * FROM pg_temp.m('m');

-- enqueue (direct path, dedup path, batch, after, trigger), claim,
-- complete, fail (retry, then dead), cancel, a scheduled item.
SELECT count(*) FROM (SELECT claim.enqueue('m', jsonb_build_object('n', g)) FROM generate_series(1, 6) g) x;
SELECT claim.enqueue('m', '{}', dedup_key => 'k') IS NOT NULL AS enqueued;
SELECT claim.enqueue('m', '{}', dedup_key => 'k') IS NOT NULL AS dedup_hit_not_counted;
SELECT count(*) FROM claim.enqueue_many('m', ARRAY['{}', '{}']::jsonb[]);
SELECT claim.enqueue('m', '{}', run_at => clock_timestamp() + interval '1 day') IS NOT NULL AS scheduled;
CREATE TABLE src (id int);
CREATE TRIGGER src_enqueue AFTER INSERT ON src FOR EACH ROW EXECUTE FUNCTION claim.enqueue_trigger('m');
INSERT INTO src VALUES (1), (2);
SELECT enq FROM pg_temp.m('m');

SELECT claim.complete_many(array_agg(token)) AS completed FROM claim.claim_next('m', n => 4);
SELECT claim.fail(token, 'again') AS failed FROM claim.claim_next('m', n => 1);
SELECT claim.fail(token, 'gone') AS failed_dead FROM claim.claim_next('m', n => 1) WHERE attempt = 2;
SELECT claim.cancel_many('m', ARRAY(SELECT id FROM claim.items i JOIN claim.queues q USING (queue_id)
                               WHERE q.name = 'm' AND i.state = 'r' AND i.run_at IS NULL
                               ORDER BY id LIMIT 2)) AS cancelled;
SELECT count(*) AS held FROM claim.claim_next('m', n => 2);
SELECT * FROM pg_temp.m('m');

-- Counted at the call: a rolled-back enqueue still counts.
BEGIN;
SELECT claim.enqueue('m', '{}') IS NOT NULL AS enqueued;
ROLLBACK;
SELECT enq FROM pg_temp.m('m');

-- A lease that runs out on the last attempt: dead and expired (by the
-- claimer or the background worker, whichever sees it first).
SELECT claim.create_queue('short', lease => '50 milliseconds', max_attempts => 1);
SELECT claim.enqueue('short', '{}') IS NOT NULL AS enqueued;
SELECT count(*) FROM claim.claim_next('short');
SELECT pg_sleep(0.2);
SELECT count(*) FROM claim.claim_next('short');
SELECT enq, clm, dead, exp, dead_items FROM pg_temp.m('short');

-- A lease that runs out with attempts left: counted as expired by the
-- background worker (it wakes at the lease's end).
SELECT claim.create_queue('retry', lease => '50 milliseconds', max_attempts => 5);
SELECT claim.enqueue('retry', '{}') IS NOT NULL AS enqueued;
SELECT count(*) FROM claim.claim_next('retry');
DO $$
BEGIN
    FOR i IN 1..100 LOOP
        EXIT WHEN (SELECT exp FROM pg_temp.m('retry')) > 0;
        PERFORM pg_sleep(0.1);
    END LOOP;
END $$;
SELECT enq, clm, exp, dead FROM pg_temp.m('retry');

-- drop_queue clears the queue's counters; a queue of a re-created
-- extension with the same id starts from zero.
SELECT claim.drop_queue('short');
SELECT claim.create_queue('short');
SELECT * FROM pg_temp.m('short');
DROP TABLE src;
DROP EXTENSION pg_claim;
CREATE EXTENSION pg_claim;
SELECT claim.create_queue('m');
SELECT enq, clm, cpl FROM pg_temp.m('m');
SELECT claim.enqueue('m', '{}') IS NOT NULL AS enqueued;
SELECT enq, clm, cpl FROM pg_temp.m('m');

DROP EXTENSION pg_claim;
