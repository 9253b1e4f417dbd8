-- The claim walk reads the ready index in stretches (src/pg/direct_read.cpp):
-- first the entries of the walk's priority up to a few ids past where it
-- starts, then stretches 8 and 64 times longer, then the rest of the queue.
-- Whatever the stretches hold, the walk takes what one scan of the whole
-- index would: delivery order across priorities, ids far apart (another
-- queue's items in between), items held by others or completed on the way.
CREATE EXTENSION pg_claim;
SET client_min_messages = warning;
SELECT claim.create_queue('ws');
SELECT claim.create_queue('other');
-- 60 items of 'ws' in three priorities, their ids 1 to 300 apart: 'other'
-- takes the ids in between.
DO $$ BEGIN
  FOR r IN 1..60 LOOP
    PERFORM claim.enqueue('ws', jsonb_build_object('r', r), priority => r % 3);
    PERFORM claim.enqueue_many('other', ARRAY(SELECT '{}'::jsonb FROM generate_series(1, (r * 37) % 300)));
  END LOOP;
END $$;
CREATE TEMP TABLE want AS
  SELECT id, row_number() OVER (ORDER BY priority DESC, id) AS pos
  FROM claim.items WHERE queue_id = (SELECT queue_id FROM claim.queues WHERE name = 'ws');

-- Three held (not completed) by a first claimer, then the one-statement loop
-- for one item at a time, then batches of 7: every other item once, in order.
CREATE TEMP TABLE held AS SELECT id, token FROM claim.claim_next('ws', n => 3);
CREATE TEMP TABLE got (seq serial, id bigint);
DO $$ DECLARE prev bigint[] := '{}'; r record; BEGIN
  FOR i IN 1..20 LOOP
    SELECT id, token INTO r FROM claim.claim_next('ws', done => prev);
    INSERT INTO got (id) VALUES (r.id);
    prev := ARRAY[r.token];
  END LOOP;
  PERFORM claim.complete(prev[1]);
  LOOP
    prev := '{}';
    FOR r IN SELECT id, token FROM claim.claim_next('ws', n => 7) LOOP
      INSERT INTO got (id) VALUES (r.id);
      prev := prev || r.token;
    END LOOP;
    EXIT WHEN cardinality(prev) = 0;
    PERFORM claim.complete_many(prev);
  END LOOP;
END $$;
SELECT array_agg(w.pos ORDER BY w.pos) AS held_positions FROM held h JOIN want w USING (id);
SELECT count(*) AS taken, count(DISTINCT id) AS distinct_items,
       bool_and(w.pos = g.seq + 3) AS in_delivery_order
FROM got g JOIN want w USING (id);
SELECT claim.complete_many(ARRAY(SELECT token FROM held)) AS held_completed;
SELECT count(*) AS left_in_ws FROM claim.items
WHERE queue_id = (SELECT queue_id FROM claim.queues WHERE name = 'ws');

-- An item of a higher priority than the items the walks have reached: the
-- next claim takes it first (its enqueue forgets the queue's scan positions
-- when it commits), with enqueue and with enqueue_many.
SELECT count(*) FROM claim.enqueue_many('ws', ARRAY(SELECT jsonb_build_object('late', g) FROM generate_series(1, 5) g));
SELECT claim.enqueue('ws', '{"urgent": true}', priority => 9) > 0 AS enqueued;
SELECT payload FROM claim.claim_next('ws');
SELECT payload->>'late' AS late FROM claim.claim_next('ws', n => 10);
SELECT count(*) FROM claim.enqueue_many('ws', ARRAY(SELECT jsonb_build_object('low', g) FROM generate_series(1, 3) g));
SELECT payload FROM claim.claim_next('ws');
SELECT count(*) FROM claim.enqueue_many('ws', ARRAY['{"high": 1}'::jsonb, '{"high": 2}'], priority => 5);
SELECT payload FROM claim.claim_next('ws', n => 3);
-- The same for items a trigger writes, row by row and per statement.
CREATE TABLE urgent_rows (id int);
CREATE TRIGGER urgent_row AFTER INSERT ON urgent_rows
    FOR EACH ROW EXECUTE FUNCTION claim.enqueue_trigger('ws', '', 'priority=20');
INSERT INTO urgent_rows VALUES (1);
SELECT payload->'new'->>'id' AS urgent_row FROM claim.claim_next('ws');
DROP TRIGGER urgent_row ON urgent_rows;
CREATE TRIGGER urgent_stmt AFTER INSERT ON urgent_rows REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION claim.enqueue_trigger('ws', '', 'priority=30');
INSERT INTO urgent_rows VALUES (2), (3);
SELECT payload->'new'->>'id' AS urgent_stmt FROM claim.claim_next('ws', n => 3);
DROP TABLE urgent_rows;
DROP EXTENSION pg_claim;
