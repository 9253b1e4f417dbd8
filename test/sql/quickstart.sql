-- The README's quick start ("Quick start"), as written: test/version_check.py
-- (make version-check, run by make installcheck) checks that the block below
-- is the README's, byte for byte.
CREATE EXTENSION IF NOT EXISTS pg_claim;
SELECT claim.create_queue('emails', lease => '30 seconds');
CREATE TABLE sent_mail (item_id bigint PRIMARY KEY, address text NOT NULL);

-- a producer: transactional, workers see the item when this commits
SELECT claim.enqueue('emails', '{"to": "a@example.com"}') AS item_id \gset

-- a worker: take one item (waits up to 10 s inside the server for one)
SELECT id, token, payload->>'to' AS address, attempt
FROM claim.claim_next('emails', wait => '10 s') \gset
BEGIN;
SELECT claim.assert_token(:token);              -- fence: PC001 if the lease was lost
INSERT INTO sent_mail VALUES (:id, :'address');  -- the worker's own writes
SELECT claim.complete(:token);                   -- done: 1 item finished
COMMIT;

SELECT queue, ready, claimed, dead FROM claim.queue_stats WHERE queue = 'emails';
-- (not in the README) the worker's write is there, for the item the producer made
SELECT item_id = :item_id AS same_item, address FROM sent_mail;

DROP TABLE sent_mail;
DROP EXTENSION pg_claim;
