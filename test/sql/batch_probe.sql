-- The batch path reads the claim, token and item rows of a batch in one
-- range scan of their index when their keys lie close together, and one
-- probe per key otherwise (src/pg/direct_probe.cpp). Both give what a probe
-- per key gives: stale and repeated tokens in complete_many, expired claims
-- taken again by claim_next(n), sparse token sets.
CREATE EXTENSION pg_claim;
SET client_min_messages = warning;
SELECT claim.create_queue('bp', max_attempts => 3);
SELECT count(*) FROM claim.enqueue_many('bp', ARRAY(SELECT jsonb_build_object('i', g) FROM generate_series(1, 1000) g));

-- 40 claims; 10 of them completed one by one: their tokens are stale now.
CREATE TEMP TABLE got AS SELECT id, token FROM claim.claim_next('bp', n => 40);
SELECT count(*), count(DISTINCT token) FROM got;
SELECT sum(claim.complete(token)::int) FROM (SELECT token FROM got ORDER BY id LIMIT 10) s;
-- the 40 tokens, two of them twice, and a token never handed out: without
-- skip_stale, PC001 and nothing completed
\set ON_ERROR_STOP 0
\set VERBOSITY terse
SELECT claim.complete_many(ARRAY(SELECT token FROM got) || ARRAY(SELECT token FROM got ORDER BY id DESC LIMIT 2));
\set ON_ERROR_STOP 1
\set VERBOSITY default
SELECT count(*) AS still_claimed FROM claim.claims c JOIN got USING (token);
-- with skip_stale: the 30 live ones, each once
SELECT claim.complete_many(ARRAY(SELECT token FROM got) || ARRAY(SELECT token FROM got ORDER BY id DESC LIMIT 2) || ARRAY[0::bigint],
                           skip_stale => true) AS completed;
SELECT count(*) AS left_of_40 FROM claim.items i JOIN got USING (id);

-- Expired claims in the stretch a claim_next(n) takes: the next claim takes
-- them again (attempt 2) under new tokens; the old tokens are refused.
CREATE TEMP TABLE first AS SELECT id, token, attempt FROM claim.claim_next('bp', n => 30, lease => '10 ms');
SELECT pg_sleep(0.05);
CREATE TEMP TABLE second AS SELECT id, token, attempt FROM claim.claim_next('bp', n => 50);
SELECT count(*) AS retaken, min(s.attempt) AS attempt, bool_and(s.token > f.token) AS newer
FROM second s JOIN first f USING (id);
SELECT count(*) FILTER (WHERE attempt = 1) AS fresh FROM second;
SELECT claim.complete_many(ARRAY(SELECT token FROM first), skip_stale => true) AS stale_completed;
SELECT claim.complete_many(ARRAY(SELECT token FROM second)) AS completed;

-- A sparse set of tokens (far apart: many tokens handed out in between):
-- one probe per key, the same outcome.
CREATE TEMP TABLE a AS SELECT id, token FROM claim.claim_next('bp', n => 10);
SELECT sum(claim.complete(token)::int) AS between_ones
FROM (SELECT (claim.claim_next('bp')).token FROM generate_series(1, 400)) s;
CREATE TEMP TABLE b AS SELECT id, token FROM claim.claim_next('bp', n => 10);
SELECT (SELECT max(token) FROM b) - (SELECT min(token) FROM a) > 16 * 20 AS sparse;
SELECT claim.complete_many(ARRAY(SELECT token FROM a UNION ALL SELECT token FROM b ORDER BY 1 DESC)) AS completed;
SELECT ready, claimed FROM claim.queue_stats WHERE queue = 'bp';
DROP EXTENSION pg_claim;
