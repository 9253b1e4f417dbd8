-- Fair share between keys inside a queue (docs/fairness.md).
CREATE EXTENSION pg_claim;
SET client_min_messages = warning;

-- A fair queue; items of three keys and the default key.
SELECT claim.create_queue('fair_q', fair => true);
SELECT fair FROM claim.queues WHERE name = 'fair_q';
SELECT count(*) FROM (SELECT claim.enqueue('fair_q', jsonb_build_object('k', 'A', 'i', g), fair_key => 'A')
                        FROM generate_series(1, 50) g) s;
SELECT count(*) FROM (SELECT claim.enqueue('fair_q', jsonb_build_object('k', 'B', 'i', g), fair_key => 'B')
                        FROM generate_series(1, 5) g) s;
SELECT count(*) > 0 AS ok FROM (SELECT claim.enqueue('fair_q', '{"k": "-"}')) s;

-- One batch of 12 holds every key that has items: the keys with few items
-- are served whatever A's backlog.
SELECT payload->>'k' AS k, count(*)
  FROM claim.claim_next('fair_q', n => 12) GROUP BY 1 ORDER BY 1;

-- Within a key: priority first, then the oldest.
SELECT claim.create_queue('fair_p', fair => true);
SELECT count(*) FROM (
    SELECT claim.enqueue('fair_p', jsonb_build_object('i', g), priority => g % 3, fair_key => 'x')
      FROM generate_series(1, 6) g) s;
SELECT payload->>'i' AS i FROM claim.claim_next('fair_p', n => 6);

-- Weights 3:1 over 400 claims of two backlogged keys.
SELECT claim.create_queue('fair_w', fair => true);
SELECT claim.set_fair_weight('fair_w', 'heavy', 3);
SELECT count(*) FROM (
    SELECT claim.enqueue_many('fair_w', array_agg(jsonb_build_object('k', k)), fair_key => k)
      FROM (SELECT k, g FROM unnest(ARRAY['heavy', 'light']) k, generate_series(1, 400) g) x
     GROUP BY k) s;
CREATE TEMP TABLE got (k text);
DO $$
BEGIN
    FOR r IN 1 .. 100 LOOP
        INSERT INTO got SELECT payload->>'k' FROM claim.claim_next('fair_w', n => 4);
    END LOOP;
END
$$;
SELECT k, count(*) FROM got GROUP BY k ORDER BY k;
SELECT queue, fair_key, weight, ready, claimed, handed_last_minute
  FROM claim.fair_stats WHERE queue = 'fair_w' AND fair_key IS NOT NULL ORDER BY fair_key;

-- A queue that is not fair keeps its order; alter_queue turns it fair and
-- its items without a key share the default key.
SELECT claim.create_queue('plain_q');
SELECT count(*) FROM (SELECT claim.enqueue('plain_q', jsonb_build_object('i', g), fair_key => 'A')
                        FROM generate_series(1, 3) g) s;
SELECT count(*) FROM (SELECT claim.enqueue('plain_q', jsonb_build_object('i', g))
                        FROM generate_series(4, 6) g) s;
SELECT payload->>'i' AS i FROM claim.claim_next('plain_q', n => 2);
SELECT claim.alter_queue('plain_q', fair => true);
SELECT fair_key_id IS NOT NULL AS keyed, count(*) FROM claim.items i
  JOIN claim.queues q USING (queue_id) WHERE q.name = 'plain_q' GROUP BY 1;
SELECT payload->>'i' AS i FROM claim.claim_next('plain_q', n => 4) ORDER BY 1;

-- Combined with group_key, dedup and after.
SELECT claim.create_queue('fair_c', fair => true);
SELECT claim.enqueue('fair_c', '{"n": 1}', group_key => 'g', fair_key => 'T') > 0 AS ok;
SELECT claim.enqueue('fair_c', '{"n": 2}', group_key => 'g', fair_key => 'T') > 0 AS ok;
SELECT claim.enqueue('fair_c', '{"n": 3}', dedup_key => 'd', fair_key => 'U') =
       claim.enqueue('fair_c', '{"n": 3}', dedup_key => 'd', fair_key => 'U') AS deduped;
SELECT claim.enqueue('fair_c', '{"n": 4}', fair_key => 'U',
                     after => ARRAY[(SELECT min(id) FROM claim.items i JOIN claim.queues q USING (queue_id)
                                     WHERE q.name = 'fair_c')]) > 0 AS ok;
SELECT payload->>'n' AS n FROM claim.claim_next('fair_c', n => 10) ORDER BY 1;
SELECT f.fair_key, count(*) FROM claim.items i JOIN claim.queues q USING (queue_id)
  JOIN claim.fair_keys f ON f.key_id = i.fair_key_id WHERE q.name = 'fair_c' GROUP BY 1 ORDER BY 1;

-- In a fair queue every path gives an item without a key the default key:
-- row and statement triggers (also packed batches).
SELECT claim.create_queue('fair_t', fair => true);
CREATE TABLE fair_src (id int, grp text);
CREATE TRIGGER fair_row AFTER INSERT ON fair_src
    FOR EACH ROW EXECUTE FUNCTION claim.enqueue_trigger('fair_t');
CREATE TRIGGER fair_stmt AFTER UPDATE ON fair_src REFERENCING NEW TABLE AS n
    FOR EACH STATEMENT EXECUTE FUNCTION claim.enqueue_trigger('fair_t');
CREATE TRIGGER fair_packed AFTER DELETE ON fair_src REFERENCING OLD TABLE AS o
    FOR EACH STATEMENT EXECUTE FUNCTION claim.enqueue_trigger('fair_t', 'grp', 'batch=2');
INSERT INTO fair_src SELECT g, 'g' || (g % 2) FROM generate_series(1, 3) g;
UPDATE fair_src SET id = id + 10;
DELETE FROM fair_src;
SELECT count(*) AS items, count(*) FILTER (WHERE i.fair_key_id IS NULL) AS without_key
  FROM claim.items i JOIN claim.queues q USING (queue_id) WHERE q.name = 'fair_t';
SELECT count(*) AS claimed FROM claim.claim_next('fair_t', n => 100);
DROP TABLE fair_src;
-- fair_key=column: the item's key is the column's text (NULL: the default
-- key), row and statement level; not with coalesce or batch.
CREATE TABLE fair_orders (id int, tenant text);
CREATE TRIGGER fair_row_key AFTER INSERT ON fair_orders
    FOR EACH ROW EXECUTE FUNCTION claim.enqueue_trigger('fair_t', '', 'fair_key=tenant');
CREATE TRIGGER fair_stmt_key AFTER DELETE ON fair_orders REFERENCING OLD TABLE AS o
    FOR EACH STATEMENT EXECUTE FUNCTION claim.enqueue_trigger('fair_t', '', 'fair_key=tenant');
INSERT INTO fair_orders VALUES (1, 'acme'), (2, 'bob'), (3, NULL), (4, 'acme');
DELETE FROM fair_orders;
SELECT coalesce(f.fair_key, '(none)') AS fair_key, count(*)
  FROM claim.items i JOIN claim.queues q USING (queue_id)
  LEFT JOIN claim.fair_keys f ON f.queue_id = i.queue_id AND f.key_id = i.fair_key_id
 WHERE q.name = 'fair_t' GROUP BY 1 ORDER BY 1;
\set VERBOSITY sqlstate
CREATE TRIGGER fair_bad AFTER INSERT ON fair_orders
    FOR EACH ROW EXECUTE FUNCTION claim.enqueue_trigger('fair_t', '', 'fair_key=nope');
INSERT INTO fair_orders VALUES (5, 'x');
DROP TRIGGER fair_bad ON fair_orders;
CREATE TRIGGER fair_bad AFTER INSERT ON fair_orders
    FOR EACH ROW EXECUTE FUNCTION claim.enqueue_trigger('fair_t', 'id', 'coalesce', 'fair_key=tenant');
INSERT INTO fair_orders VALUES (5, 'x');
\set VERBOSITY default
DROP TABLE fair_orders;
SELECT claim.drop_queue('fair_t');

-- Untyped positional calls resolve to one function.
PREPARE e(unknown, unknown, unknown, unknown, unknown, unknown, unknown, unknown) AS
    SELECT claim.enqueue($1, $2, $3, $4, $5, $6, $7, $8) > 0 AS ok;
EXECUTE e('fair_c', '{}', NULL, NULL, 0, NULL, NULL, 'V');
PREPARE w(unknown, unknown, unknown) AS SELECT claim.set_fair_weight($1, $2, $3);
EXECUTE w('fair_c', 'V', '2');

-- Errors.
\set VERBOSITY sqlstate
SELECT claim.set_fair_weight('fair_c', 'V', 0);
SELECT claim.set_fair_weight('fair_c', 'V', 10001);
SELECT claim.set_fair_weight('no_such_queue', 'V', 1);
SELECT claim.set_fair_weight('fair_c', '', 1);
SELECT claim.set_fair_weight('fair_c', NULL, 1);
SELECT claim.enqueue('fair_c', '{}', fair_key => '');
SELECT claim.enqueue('fair_c', '{}', fair_key => repeat('x', 1025));
\set VERBOSITY default

-- Rights: set_fair_weight is for claim_admin.
SELECT has_function_privilege('claim_producer', 'claim.set_fair_weight(text, text, integer)', 'EXECUTE') AS producer,
       has_function_privilege('claim_admin', 'claim.set_fair_weight(text, text, integer)', 'EXECUTE') AS admin,
       has_function_privilege('public', 'claim.set_fair_weight(text, text, integer)', 'EXECUTE') AS public;

-- A fair key added in a savepoint that rolls back goes with it: an item
-- enqueued later with the same key gets a key that claim.fair_keys has.
SELECT claim.create_queue('fair_s', fair => true);
BEGIN;
SAVEPOINT s;
SELECT claim.enqueue('fair_s', '{"n": 1}', fair_key => 'S') > 0 AS ok;
ROLLBACK TO SAVEPOINT s;
SELECT claim.enqueue('fair_s', '{"n": 2}', fair_key => 'S') > 0 AS ok;
COMMIT;
SELECT count(*) AS items_without_their_key FROM claim.items i
 WHERE i.queue_id = (SELECT queue_id FROM claim.queues WHERE name = 'fair_s')
   AND NOT EXISTS (SELECT FROM claim.fair_keys f WHERE f.key_id = i.fair_key_id);

-- Fair share holds inside one transaction: 2,000 items of A, then one of
-- B; fifty claims in one statement, and fifty in one transaction, each
-- hand B out.
SELECT count(*) FROM claim.enqueue_many('fair_s', (SELECT array_agg(jsonb_build_object('k', 'A')) FROM generate_series(1, 2000)), fair_key => 'A');
SELECT claim.enqueue('fair_s', '{"k": "B"}', fair_key => 'B') > 0 AS ok;
BEGIN;
SELECT count(*) FILTER (WHERE payload->>'k' = 'B') AS b_in_one_statement FROM claim.claim_next('fair_s', n => 50);
ROLLBACK;
BEGIN;
CREATE TEMP TABLE got_fair (k text) ON COMMIT DROP;
DO $$ BEGIN FOR i IN 1..50 LOOP INSERT INTO got_fair SELECT payload->>'k' FROM claim.claim_next('fair_s'); END LOOP; END $$;
SELECT count(*) FILTER (WHERE k = 'B') AS b_in_one_transaction FROM got_fair;
COMMIT;
SELECT claim.drop_queue('fair_s');

-- drop_queue takes the queue's keys with it.
SELECT claim.drop_queue('fair_c');
SELECT count(*) FROM claim.fair_keys f WHERE NOT EXISTS (SELECT FROM claim.queues q WHERE q.queue_id = f.queue_id);

SELECT claim.drop_queue(q) FROM unnest(ARRAY['fair_q', 'fair_p', 'fair_w', 'plain_q']) q;
DROP EXTENSION pg_claim;
