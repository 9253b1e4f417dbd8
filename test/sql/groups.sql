-- Groups: claim.group_claim, the group rule shared with claim_next,
-- claim.blocked_groups, and every error. Tokens and times vary between runs:
-- the queries show payloads, counts and booleans.
CREATE EXTENSION pg_claim;

\getenv abs_srcdir PG_ABS_SRCDIR
\i :abs_srcdir/sql/include/try.sql

-- The last non-empty claim of this session, kept to act on its token.
CREATE TEMP TABLE got (id bigint, token bigint, group_key text, payload jsonb, attempt int);
CREATE TEMP TABLE cur (LIKE got);
-- One line per call: payload numbers in order, the group, whether all rows
-- carry one token, the attempts. Empty columns: nothing was claimed.
CREATE FUNCTION pg_temp.show(q text, max_items int DEFAULT 1000, group_key text DEFAULT NULL,
                             lease interval DEFAULT NULL)
RETURNS TABLE (items text, grp text, one_token boolean, attempts text)
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM cur;
    INSERT INTO cur SELECT c.id, c.token, c.group_key, c.payload, c.attempt
    FROM claim.group_claim(q, max_items, lease, group_key => group_key) c;
    IF FOUND THEN
        DELETE FROM got;
        INSERT INTO got SELECT * FROM cur;
    END IF;
    RETURN QUERY SELECT string_agg(g.payload->>'n', ',' ORDER BY g.id), min(g.group_key),
                        count(DISTINCT g.token) = 1, string_agg(g.attempt::text, ',' ORDER BY g.id)
                 FROM cur g HAVING count(*) > 0;
END $$;
CREATE FUNCTION pg_temp.token() RETURNS bigint LANGUAGE sql AS $$ SELECT min(token) FROM got $$;
-- Make scheduled items due (claimers promote them).
CREATE FUNCTION pg_temp.due(q text) RETURNS void LANGUAGE sql AS $$
    UPDATE claim.items SET run_at = clock_timestamp() - interval '1 second'
    WHERE run_at IS NOT NULL AND queue_id = (SELECT queue_id FROM claim.queues WHERE name = q)
$$;

-- Each scenario has its own queue, filled before its first claim.
SELECT claim.create_queue('g', lease => '30 seconds', max_attempts => 2, backoff => '1 hour');

-- ------------------------------------------------------------ the head rule
-- groups a (1, 2, 4, 6), b (3), no group (5)
SELECT count(*) FROM (
    SELECT claim.enqueue('g', '{"n": 1}', 'a'), claim.enqueue('g', '{"n": 2}', 'a'),
           claim.enqueue('g', '{"n": 3}', 'b'), claim.enqueue('g', '{"n": 4}', 'a'),
           claim.enqueue('g', '{"n": 5}'),      claim.enqueue('g', '{"n": 6}', 'a')) x;
-- claim_next returns at most one item per group per call, and only heads
SELECT string_agg(payload->>'n', ',' ORDER BY id) AS claim_next_items FROM claim.claim_next('g', 10);
-- while the head of a is claimed, nothing of a can be claimed
SELECT * FROM pg_temp.show('g');
SELECT * FROM pg_temp.show('g', group_key => 'a');
SELECT sum(claim.complete(token)) AS completed FROM claim.claimed_items;
-- then the followers go together, under one token
SELECT * FROM pg_temp.show('g');
SELECT count(*) AS claimed_rows, count(DISTINCT token) AS tokens FROM claim.claimed_items;
SELECT * FROM pg_temp.show('g');
SELECT claim.complete(pg_temp.token()) AS completed;
SELECT count(*) AS left_in_queue FROM claim.items;

-- ------------------------------------------------------------ order and limits
SELECT claim.create_queue('p');
SELECT count(*) FROM claim.enqueue_many('p',
    ARRAY['{"n": 10}', '{"n": 11}', '{"n": 12}', '{"n": 13}', '{"n": 14}']::jsonb[],
    ARRAY['c', 'd', 'c', 'c', 'd']);
-- a high-priority item that is a head goes first
SELECT claim.enqueue('p', '{"n": 15}', 'e', priority => 5) > 0 AS enqueued;
SELECT * FROM pg_temp.show('p');
SELECT claim.complete(pg_temp.token()) AS completed;
-- max_items
SELECT * FROM pg_temp.show('p', 2);
-- the rest of c waits behind the claimed part: d is next
SELECT * FROM pg_temp.show('p');
SELECT * FROM pg_temp.show('p', group_key => 'c');
SELECT claim.complete(token) FROM (SELECT DISTINCT token FROM claim.claimed_items) t ORDER BY 1;
-- a named group
SELECT * FROM pg_temp.show('p', group_key => 'c');
SELECT claim.complete(pg_temp.token()) AS completed;
-- a named group that does not exist or is empty
SELECT * FROM pg_temp.show('p', group_key => 'zzz');
SELECT * FROM pg_temp.show('p', group_key => 'c');
-- an item without a group key is a group of one
SELECT claim.enqueue('p', '{"n": 16}') > 0, claim.enqueue('p', '{"n": 17}') > 0;
SELECT * FROM pg_temp.show('p');
SELECT claim.complete(pg_temp.token()) AS completed;

-- ------------------------------------------------------------ scheduled items
SELECT claim.create_queue('f');
-- a scheduled item stops the claim; a scheduled head holds its group back
SELECT claim.enqueue('f', '{"n": 20}', 'f') > 0,
       claim.enqueue('f', '{"n": 21}', 'f', run_at => clock_timestamp() + interval '1 hour') > 0,
       claim.enqueue('f', '{"n": 22}', 'f') > 0;
SELECT * FROM pg_temp.show('f');
SELECT claim.complete(pg_temp.token()) AS completed;
SELECT * FROM pg_temp.show('f');
SELECT * FROM pg_temp.show('f', group_key => 'f');
SELECT queue, group_key, reason, since <= clock_timestamp() AS since_past,
       until > clock_timestamp() + interval '59 minutes' AS until_later, waiting
FROM claim.blocked_groups WHERE queue = 'f';
SELECT pg_temp.due('f');
SELECT * FROM pg_temp.show('f');
SELECT claim.complete(pg_temp.token()) AS completed;
SELECT count(*) FROM claim.blocked_groups WHERE queue = 'f';

-- ------------------------------------------------------------ one token for all
SELECT claim.create_queue('h', max_attempts => 2, backoff => '1 hour');
SELECT claim.enqueue('h', '{"n": 30}', 'h') > 0, claim.enqueue('h', '{"n": 31}', 'h') > 0,
       claim.enqueue('h', '{"n": 32}', 'h') > 0;
SELECT * FROM pg_temp.show('h');
SELECT claim.extend(pg_temp.token(), '1 hour') > clock_timestamp() + interval '59 minutes' AS extended;
SELECT count(*), bool_and(lease_until > clock_timestamp() + interval '59 minutes') AS all_extended
FROM claim.claimed_items WHERE queue = 'h';
SELECT claim.assert_token(pg_temp.token());
-- release gives all back without using an attempt
SELECT claim.release(pg_temp.token()) AS released;
SELECT * FROM pg_temp.show('h');
-- fail counts an attempt for each item; the backoff holds the group back
SELECT claim.fail(pg_temp.token(), 'boom') AS failed;
SELECT group_key, reason, waiting FROM claim.blocked_groups WHERE queue = 'h';
SELECT * FROM pg_temp.show('h');
SELECT pg_temp.due('h');
SELECT * FROM pg_temp.show('h');
-- the second failure is the last attempt: all dead, the group moves on
SELECT claim.enqueue('h', '{"n": 33}', 'h') > 0 AS enqueued_behind;
SELECT claim.fail(pg_temp.token(), 'boom again') AS failed;
SELECT string_agg(payload->>'n', ',' ORDER BY id) AS dead, min(attempts), min(last_error)
FROM claim.dead_items WHERE queue = 'h';
CREATE TEMP TABLE old AS SELECT pg_temp.token() AS token;
SELECT * FROM pg_temp.show('h');
SELECT claim.complete(pg_temp.token()) AS completed;
-- tokens of finished claims are refused
SELECT pg_temp.try(format('SELECT claim.complete(%s)', (SELECT token FROM old)));
SELECT pg_temp.try(format('SELECT claim.assert_token(%s)', pg_temp.token()));
DROP TABLE old;

-- ------------------------------------------------------------ lease expiry
SELECT claim.create_queue('short', lease => '100 milliseconds', max_attempts => 2);
SELECT claim.enqueue('short', '{"n": 40}', 'k') > 0, claim.enqueue('short', '{"n": 41}', 'k') > 0;
SELECT * FROM pg_temp.show('short');
CREATE TEMP TABLE old AS SELECT pg_temp.token() AS token;
SELECT pg_sleep(0.2);
SELECT * FROM pg_temp.show('short');
SELECT pg_temp.token() > (SELECT token FROM old) AS higher_token;
SELECT pg_temp.try(format('SELECT claim.complete(%s)', (SELECT token FROM old)));
SELECT pg_temp.try(format('SELECT claim.extend(%s)', (SELECT token FROM old)));
-- expired on the last attempt: dead when the next claimer passes
SELECT pg_sleep(0.2);
SELECT * FROM pg_temp.show('short');
SELECT payload->>'n' AS n, attempts, last_error FROM claim.dead_items WHERE queue = 'short' ORDER BY id;

-- ------------------------------------------------------------ blocked: long claims
-- a live claim older than the queue's lease (the holder kept extending it)
SELECT claim.create_queue('long', lease => '500 milliseconds');
SELECT claim.enqueue('long', '{"n": 42}', 'm') > 0, claim.enqueue('long', '{"n": 43}', 'm') > 0;
SELECT * FROM pg_temp.show('long', 1, lease => '1 hour');
SELECT count(*) FROM claim.blocked_groups WHERE queue = 'long';
SELECT pg_sleep(0.6);
SELECT b.queue, b.group_key, b.reason, b.since = c.claimed_at AS since_claimed,
       b.until = c.lease_until AS until_lease, b.waiting
FROM claim.blocked_groups b JOIN claim.claimed_items c ON c.id = b.head_id;
SELECT claim.complete(pg_temp.token()) AS completed;

-- ------------------------------------------------------------ wait
SELECT claim.create_queue('empty');
SELECT clock_timestamp() AS t0 \gset
SELECT count(*) FROM claim.group_claim('empty', wait => '100 milliseconds');
SELECT clock_timestamp() - :'t0'::timestamptz >= interval '100 milliseconds' AS waited;

-- worker is recorded
SELECT claim.enqueue('empty', '{"n": 50}', 'w') > 0;
SELECT count(*) FROM claim.group_claim('empty', worker => 'w-1');
SELECT worker FROM claim.claimed_items WHERE queue = 'empty';

-- ------------------------------------------------------------ errors
SELECT pg_temp.try($$SELECT claim.group_claim(NULL)$$);
SELECT pg_temp.try($$SELECT claim.group_claim('nope')$$);
SELECT pg_temp.try($$SELECT claim.group_claim('g', NULL)$$);
SELECT pg_temp.try($$SELECT claim.group_claim('g', 0)$$);
SELECT pg_temp.try($$SELECT claim.group_claim('g', 100001)$$);
SELECT pg_temp.try($$SELECT claim.group_claim('g', lease => '0 seconds')$$);
SELECT pg_temp.try($$SELECT claim.group_claim('g', lease => '8 days')$$);
SELECT pg_temp.try($$SELECT claim.group_claim('g', wait => NULL)$$);
SELECT pg_temp.try($$SELECT claim.group_claim('g', wait => '-1 second')$$);
SELECT pg_temp.try($$SELECT claim.group_claim('g', wait => '2 hours')$$);
SELECT pg_temp.try($$SELECT claim.group_claim('g', group_key => '')$$);
SELECT pg_temp.try($$SELECT claim.group_claim('g', group_key => repeat('k', 1025))$$);

-- privileges: the view is not readable by PUBLIC
SELECT has_table_privilege('public', 'claim.blocked_groups', 'SELECT') AS public_blocked,
       has_function_privilege('public', 'claim.group_claim(text, integer, interval, interval, text, text)', 'EXECUTE') AS public_group_claim;

DROP EXTENSION pg_claim;
