-- Moving with logical replication (docs/operations.md): rows applied by a
-- subscription (session_replication_role = replica, as its apply worker has)
-- move pg_claim's sequences past their ids and tokens; the source's own
-- writes (origin) fire nothing. TAP test 160_switchover runs a real
-- subscription.
CREATE EXTENSION pg_claim;
SET client_min_messages = warning;

\getenv abs_srcdir PG_ABS_SRCDIR
\i :abs_srcdir/sql/include/try.sql

-- The trigger is on every logged table that carries an id or a token, and
-- fires only in replica mode.
SELECT c.relname, t.tgenabled, pg_catalog.encode(t.tgargs, 'escape') AS args
  FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
 WHERE t.tgname = 'follow_copy' ORDER BY 1;

-- Not callable but as a trigger, and not by PUBLIC.
SELECT has_function_privilege('public', 'claim._follow_copy()', 'EXECUTE') AS public_may_call;
SELECT pg_temp.try($$SELECT claim._follow_copy()$$) AS direct_call;
CREATE TABLE not_ours (id bigint);
CREATE TRIGGER wrong AFTER INSERT ON not_ours FOR EACH ROW EXECUTE FUNCTION claim._follow_copy('id', 'item_id_seq');
SELECT pg_temp.try($$INSERT INTO not_ours VALUES (1)$$) AS after_trigger;
DROP TRIGGER wrong ON not_ours;
CREATE TRIGGER wrong BEFORE INSERT ON not_ours FOR EACH ROW EXECUTE FUNCTION claim._follow_copy('nope', 'item_id_seq');
SELECT pg_temp.try($$INSERT INTO not_ours VALUES (1)$$) AS no_such_column;
DROP TABLE not_ours;

-- The source's own writes move nothing.
SELECT claim.create_queue('sw');
INSERT INTO claim.items (id, queue_id) SELECT 50000, queue_id FROM claim.queues WHERE name = 'sw';
SELECT last_value < 50000 AS origin_moves_nothing FROM claim.item_id_seq;
DELETE FROM claim.items WHERE id = 50000;

-- Applied rows move the sequences past them: ids by up to 1024 more,
-- tokens 2^32 (and up to 2^20) past the copied one.
SET session_replication_role = replica;
INSERT INTO claim.queues (queue_id, name, lease, max_attempts, backoff)
    OVERRIDING SYSTEM VALUE VALUES (700, 'copied', '1 minute', 5, '1 second');
INSERT INTO claim.items (id, queue_id) VALUES (90000, 700);
INSERT INTO claim.token_marks VALUES ('copied/1', 1000000, clock_timestamp());
INSERT INTO claim.lease_holders (name, slot, token, permits, acquired_at, expires_at)
    VALUES ('copied-lease', 0, 2000000, 1, now(), now() + interval '1 hour');
-- A token of another partition: refused (55000), with a hint.
SELECT pg_temp.try($$INSERT INTO claim.guards (key, token, state, attempts, started_at, lease_until)
    VALUES ('copied-guard', 5 * 140737488355328 + 1, 'r', 1, now(), now())$$) AS other_partition;
SET client_min_messages = notice;
DO $$ BEGIN
    INSERT INTO claim.guards (key, token, state, attempts, started_at, lease_until)
        VALUES ('copied-guard', 5 * 140737488355328 + 1, 'r', 1, now(), now());
EXCEPTION WHEN OTHERS THEN
    DECLARE h text;
    BEGIN
        GET STACKED DIAGNOSTICS h = PG_EXCEPTION_HINT;
        RAISE NOTICE 'hint: %', h;
    END;
END $$;
SET client_min_messages = warning;
RESET session_replication_role;

SELECT (SELECT last_value FROM claim.queues_queue_id_seq) BETWEEN 700 AND 700 + 1024 AS queue_ids,
       (SELECT last_value FROM claim.item_id_seq) BETWEEN 90000 AND 90000 + 1024 AS item_ids,
       (SELECT last_value FROM claim.token_seq) BETWEEN 2000000 + 4294967296
                                                    AND 2000000 + 4294967296 + 1048576 AS tokens;
SELECT claim.enqueue('copied', '{}') > 90000 AS new_item_past_copied;
SELECT claim.lease_acquire('new-lease', '1 minute') > 2000000 + 4294967296 AS new_token_past_margin;
SELECT pg_temp.try($$SELECT claim.create_queue('after_copy')$$) AS new_queue;
SELECT queue_id > 700 AS new_queue_id_past_copied FROM claim.queues WHERE name = 'after_copy';

DROP EXTENSION pg_claim;
