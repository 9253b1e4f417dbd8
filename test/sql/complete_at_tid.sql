-- A claim row keeps the tuple id of its item's row (claims.item_tid), and
-- complete reads the item there first. A version found there counts only
-- when it is visible and carries the claim's item id: an item updated since,
-- moved by VACUUM FULL, or a line now past the end of the table or holding
-- another item's row is looked up by id. Every item completes once, and a
-- retaining queue keeps each item's own row.
CREATE EXTENSION pg_claim;
SET client_min_messages = warning;
SELECT claim.create_queue('ct', retain => '1 hour');
SELECT count(*) FROM claim.enqueue_many('ct',
  ARRAY(SELECT jsonb_build_object('n', g, 'pad', repeat('x', 200)) FROM generate_series(1, 150) g));
CREATE TEMP TABLE held AS SELECT id, token, (payload->>'n')::int AS n FROM claim.claim_next('ct', n => 150);
SELECT count(*) AS held,
       count(*) FILTER (WHERE c.item_tid = i.ctid) AS tid_kept
FROM held h JOIN claim.claims c ON c.item_id = h.id JOIN claim.items i ON i.id = h.id;
SELECT count(DISTINCT (c.item_tid::text::point)[0]) > 2 AS items_on_several_pages FROM claim.claims c;

-- Where the claim row says: 95 of the first 100, one by one and as a
-- batch. Items 6 to 10 stay claimed.
SELECT sum(claim.complete(token)) AS completed_one_by_one FROM held WHERE n <= 5 OR n BETWEEN 11 AND 50;
SELECT claim.complete_many(ARRAY(SELECT token FROM held WHERE n > 50 AND n <= 100)) AS completed_batch;

-- The item's row updated since it was claimed (a new version elsewhere),
-- a claim row without a tuple id (as claims written through SQL have),
-- tuple ids that cannot be read.
UPDATE claim.items SET payload = payload || '{"updated": true}' WHERE id = (SELECT id FROM held WHERE n = 101);
UPDATE claim.claims SET item_tid = NULL WHERE item_id = (SELECT id FROM held WHERE n = 102);
UPDATE claim.claims SET item_tid = '(0,0)' WHERE item_id = (SELECT id FROM held WHERE n = 103);
UPDATE claim.claims SET item_tid = '(4294967294,1)' WHERE item_id = (SELECT id FROM held WHERE n = 104);
SELECT claim.complete(token) AS completed FROM held WHERE n BETWEEN 101 AND 104 ORDER BY n;

-- Tuple ids that hold another item's row: items 6 to 10 point at the rows
-- of items 146 to 150 (still claimed, completed last).
UPDATE claim.claims c SET item_tid = (SELECT i.ctid FROM claim.items i JOIN held o ON o.id = i.id
                                      WHERE o.n = h.n + 140)
FROM held h WHERE c.item_id = h.id AND h.n BETWEEN 6 AND 10;
SELECT count(*) AS tid_holds_another_item
FROM held h JOIN claim.claims c ON c.item_id = h.id JOIN claim.items i ON i.ctid = c.item_tid
WHERE i.id <> h.id;
-- VACUUM FULL moves every row left: where the kept tuple ids point depends
-- on what the rewrite kept, and every item still completes.
VACUUM FULL claim.items;
SELECT claim.complete_many(ARRAY(SELECT token FROM held WHERE n BETWEEN 6 AND 10 OR n BETWEEN 105 AND 130)) AS completed_batch;
SELECT sum(claim.complete(token)) AS completed_one_by_one FROM held WHERE n > 130;
-- The one-statement loop over what it claims after the move.
SELECT count(*) FROM claim.enqueue_many('ct', ARRAY(SELECT jsonb_build_object('n', 1000 + g) FROM generate_series(1, 3) g));
CREATE TEMP TABLE looped AS SELECT token FROM claim.claim_next('ct');
VACUUM FULL claim.items;
INSERT INTO looped SELECT token FROM claim.claim_next('ct', done => ARRAY(SELECT token FROM looped));
INSERT INTO looped SELECT token FROM claim.claim_next('ct', done => ARRAY(SELECT max(token) FROM looped));
SELECT claim.complete(max(token)) AS last_completed FROM looped;

-- Every item completed once, each with its own row in the history.
SELECT count(*) AS items_left FROM claim.items;
SELECT count(*) AS claims_left FROM claim.claims;
SELECT count(*) AS finished, count(DISTINCT id) AS distinct_ids,
       bool_and(state = 'completed') AS all_completed,
       bool_and((payload->>'updated') IS NULL OR (payload->>'n')::int = 101) AS updated_row_kept,
       count(*) FILTER (WHERE payload->>'updated' = 'true') AS updated_seen
FROM claim.finished_items WHERE queue = 'ct';
SELECT bool_and((f.payload->>'n')::int = h.n) AS each_item_its_own_payload
FROM claim.finished_items f JOIN held h USING (id);

-- complete knows the tokens this backend granted without reading
-- claims_token, and checks them under the item's lock: a token whose item
-- was claimed again (here by this backend, after its lease ran out) is
-- refused, alone and beside the newer token; the newer one completes.
SELECT claim.create_queue('cx', lease => '100 milliseconds');
SELECT claim.enqueue('cx', '{"x": 1}') > 0 AS enqueued;
SELECT token AS t1 FROM claim.claim_next('cx') \gset
SELECT pg_sleep(0.3);
SELECT token AS t2 FROM claim.claim_next('cx') \gset
SELECT :t2 > :t1 AS claimed_again;
\set VERBOSITY sqlstate
SELECT claim.complete(:t1);
SELECT claim.complete_many(ARRAY[:t1, :t2]::bigint[]);
\set VERBOSITY default
SELECT claim.complete(:t2) AS newer_completed;
SELECT claim.complete_many(ARRAY[:t2]::bigint[], skip_stale => true) AS completed_again;
DROP EXTENSION pg_claim;
