-- Trigger enqueue: claim.enqueue_trigger at row and statement
-- level, its options, and every error it raises when the trigger fires.
CREATE EXTENSION pg_claim;

\getenv abs_srcdir PG_ABS_SRCDIR
\i :abs_srcdir/sql/include/try.sql

-- The items of a queue, oldest first.
CREATE FUNCTION pg_temp.items(q text)
RETURNS TABLE (n bigint, group_key text, priority int, payload jsonb)
LANGUAGE sql AS $$
    SELECT row_number() OVER (ORDER BY i.id), i.group_key, i.priority, i.payload
    FROM claim.items i JOIN claim.queues qq ON qq.queue_id = i.queue_id
    WHERE qq.name = q AND i.state = 'r' ORDER BY i.id
$$;
CREATE FUNCTION pg_temp.clear(q text) RETURNS void LANGUAGE sql AS $$
    DELETE FROM claim.claims WHERE queue_id = (SELECT queue_id FROM claim.queues WHERE name = q);
    DELETE FROM claim.items WHERE queue_id = (SELECT queue_id FROM claim.queues WHERE name = q);
$$;

SELECT claim.create_queue('changes');

-- ------------------------------------------------------------ row level
CREATE TABLE orders (id int PRIMARY KEY, customer int, note text);
CREATE TRIGGER orders_changes AFTER INSERT OR UPDATE OR DELETE ON orders
    FOR EACH ROW EXECUTE FUNCTION claim.enqueue_trigger('changes', 'id');
INSERT INTO orders VALUES (1, 10, 'first'), (2, 20, NULL);
UPDATE orders SET note = 'second' WHERE id = 1;
DELETE FROM orders WHERE id = 2;
SELECT * FROM pg_temp.items('changes');

-- same transaction: gone with a rollback, kept with a commit
BEGIN;
INSERT INTO orders VALUES (3, 30, 'rolled back');
SELECT count(*) AS visible_inside FROM pg_temp.items('changes');
ROLLBACK;
SELECT count(*) AS after_rollback FROM pg_temp.items('changes');
BEGIN;
INSERT INTO orders VALUES (4, 40, 'kept');
SAVEPOINT s;
INSERT INTO orders VALUES (5, 50, 'undone');
ROLLBACK TO SAVEPOINT s;
COMMIT;
SELECT n, group_key, payload->'new'->>'note' AS note FROM pg_temp.items('changes') WHERE n > 3;
-- the items are claimable like any other
SELECT count(*) AS claimed FROM claim.claim_next('changes', 10);
SELECT pg_temp.clear('changes');

-- no group column; a NULL group value; a non-text group column; priority
CREATE TABLE notes (k text, body text, num numeric);
CREATE TRIGGER notes_plain AFTER INSERT ON notes
    FOR EACH ROW EXECUTE FUNCTION claim.enqueue_trigger('changes');
CREATE TRIGGER notes_grouped AFTER UPDATE ON notes
    FOR EACH ROW EXECUTE FUNCTION claim.enqueue_trigger('changes', 'num', 'priority=7');
INSERT INTO notes VALUES ('a', 'x', 1.50);
UPDATE notes SET body = 'y';
UPDATE notes SET num = NULL;
SELECT n, group_key, priority, payload->>'op' AS op FROM pg_temp.items('changes');
SELECT pg_temp.clear('changes');
DROP TABLE notes;

-- every column type goes through to_jsonb; the schema is the table's own
CREATE SCHEMA shop;
CREATE TABLE shop."Line Items" (id bigint, tags text[], at date, doc jsonb, price numeric, ok boolean);
CREATE TRIGGER li AFTER INSERT ON shop."Line Items"
    FOR EACH ROW EXECUTE FUNCTION claim.enqueue_trigger('changes', 'id');
INSERT INTO shop."Line Items" VALUES (7, '{a,b}', '2024-02-29', '{"x": [1, 2]}', 9.99, true);
SELECT n, group_key, payload FROM pg_temp.items('changes');
SELECT pg_temp.clear('changes');

-- ------------------------------------------------------------ coalesce
CREATE TABLE accounts (id int PRIMARY KEY, balance int);
CREATE TRIGGER accounts_changes AFTER INSERT OR UPDATE OR DELETE ON accounts
    FOR EACH ROW EXECUTE FUNCTION claim.enqueue_trigger('changes', 'id', 'coalesce');
INSERT INTO accounts VALUES (1, 100);
-- an INSERT is not merged into by an UPDATE; repeated UPDATEs are merged:
-- the first "old", the latest "new", the same item
UPDATE accounts SET balance = 110 WHERE id = 1;
SELECT max(id) AS upd_id FROM claim.items \gset
UPDATE accounts SET balance = 120 WHERE id = 1;
UPDATE accounts SET balance = 130 WHERE id = 1;
SELECT n, group_key, payload->>'op' AS op, payload->'old'->>'balance' AS old,
       payload->'new'->>'balance' AS new FROM pg_temp.items('changes');
SELECT max(id) = :upd_id AS same_item FROM claim.items;
-- one UPDATE statement changing several rows: one item per group
INSERT INTO accounts VALUES (2, 200);
UPDATE accounts SET balance = balance + 1;
SELECT n, group_key, payload->>'op' AS op, payload->'old'->>'balance' AS old,
       payload->'new'->>'balance' AS new FROM pg_temp.items('changes');
-- a claimed item is never changed: the next change is a new item
SELECT string_agg(payload->'new'->>'balance', ',' ORDER BY id) AS claimed
FROM claim.group_claim('changes', group_key => '1');
UPDATE accounts SET balance = 140 WHERE id = 1;
UPDATE accounts SET balance = 150 WHERE id = 1;
SELECT i.payload->>'op' AS op, i.payload->'old'->>'balance' AS old,
       i.payload->'new'->>'balance' AS new, c.item_id IS NOT NULL AS claimed
FROM claim.items i LEFT JOIN claim.claims c ON c.item_id = i.id
WHERE i.group_key = '1' ORDER BY i.id;
-- a DELETE is its own item; DELETEs are not merged into an UPDATE
DELETE FROM accounts WHERE id = 2;
SELECT n, group_key, payload->>'op' AS op, payload ? 'new' AS has_new,
       payload->'old'->>'balance' AS old FROM pg_temp.items('changes') WHERE group_key = '2';
-- a scheduled item (e.g. backing off) is not merged into
SELECT pg_temp.clear('changes');
UPDATE accounts SET balance = 1 WHERE id = 1;
UPDATE claim.items SET run_at = clock_timestamp() + interval '1 hour';
UPDATE accounts SET balance = 2 WHERE id = 1;
SELECT n, payload->'new'->>'balance' AS new FROM pg_temp.items('changes');
-- only the newest item of the group is merged into: changes are not reordered
SELECT pg_temp.clear('changes');
CREATE TABLE audits (account int, what text);
CREATE TRIGGER audits_changes AFTER INSERT OR UPDATE ON audits
    FOR EACH ROW EXECUTE FUNCTION claim.enqueue_trigger('changes', 'account', 'coalesce');
INSERT INTO audits VALUES (1, 'opened');
UPDATE accounts SET balance = 3 WHERE id = 1;
UPDATE audits SET what = 'checked';
UPDATE accounts SET balance = 4 WHERE id = 1;
UPDATE accounts SET balance = 5 WHERE id = 1;
SELECT n, payload->>'table' AS tbl, payload->>'op' AS op, payload->'new' AS new
FROM pg_temp.items('changes');
SELECT pg_temp.clear('changes');
DROP TABLE audits, accounts;

-- ------------------------------------------------------------ statement level
CREATE TABLE bulk (id int, grp text, v int);
CREATE TRIGGER bulk_ins AFTER INSERT ON bulk REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION claim.enqueue_trigger('changes', 'grp');
CREATE TRIGGER bulk_upd AFTER UPDATE ON bulk REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION claim.enqueue_trigger('changes', 'grp', 'priority=3');
CREATE TRIGGER bulk_del AFTER DELETE ON bulk REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION claim.enqueue_trigger('changes');
CREATE TRIGGER bulk_trunc AFTER TRUNCATE ON bulk
    FOR EACH STATEMENT EXECUTE FUNCTION claim.enqueue_trigger('changes');
INSERT INTO bulk SELECT g, 'g' || (g % 2), g * 10 FROM generate_series(1, 4) g;
UPDATE bulk SET v = v + 1 WHERE id <= 2;
DELETE FROM bulk WHERE id = 4;
UPDATE bulk SET v = 0 WHERE false;
TRUNCATE bulk;
SELECT * FROM pg_temp.items('changes');
SELECT pg_temp.clear('changes');
BEGIN;
INSERT INTO bulk SELECT g, NULL, g FROM generate_series(1, 1000) g;
ROLLBACK;
SELECT count(*) AS after_rollback FROM pg_temp.items('changes');
DROP TABLE bulk;

-- only NEW TABLE on UPDATE: the items carry "new" only
CREATE TABLE bulk2 (id int, v int);
CREATE TRIGGER bulk2_upd AFTER UPDATE ON bulk2 REFERENCING NEW TABLE AS nn
    FOR EACH STATEMENT EXECUTE FUNCTION claim.enqueue_trigger('changes', 'id');
INSERT INTO bulk2 VALUES (1, 1);
UPDATE bulk2 SET v = 2;
SELECT * FROM pg_temp.items('changes');
SELECT pg_temp.clear('changes');
DROP TABLE bulk2;

-- rows in payloads are exactly to_jsonb(row), for every kind of column, at
-- row and at statement level (both build them without to_jsonb)
CREATE DOMAIN pos_int AS int CHECK (VALUE > 0);
CREATE DOMAIN tags AS text[];
CREATE TYPE pair AS (a int, b text);
CREATE TABLE kinds (
    id int, gone int, b bool, i2 int2, i4 int4, i8 int8, n numeric, f4 float4, f8 float8,
    t text, vc varchar(10), c char(5), nm name, d date, ts timestamp, tz timestamptz,
    jb jsonb, js json, arr int[], comp pair, dom pos_int, domarr tags, u uuid,
    iv interval, ip inet, by bytea, bits bit varying, r int4range, pt point);
ALTER TABLE kinds DROP COLUMN gone;
-- what to_jsonb said at the time of each change
CREATE TABLE kinds_seen (op text, id int, new jsonb, old jsonb);
CREATE FUNCTION pg_temp.seen() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO kinds_seen VALUES (TG_OP, coalesce(NEW.id, OLD.id),
        CASE WHEN TG_OP <> 'DELETE' THEN to_jsonb(NEW) END,
        CASE WHEN TG_OP <> 'INSERT' THEN to_jsonb(OLD) END);
    RETURN NULL;
END $$;
CREATE TRIGGER kinds_seen AFTER INSERT OR UPDATE OR DELETE ON kinds
    FOR EACH ROW EXECUTE FUNCTION pg_temp.seen();
CREATE TRIGGER kinds_row AFTER INSERT OR UPDATE OR DELETE ON kinds
    FOR EACH ROW EXECUTE FUNCTION claim.enqueue_trigger('changes', 'b');
CREATE TRIGGER kinds_stmt AFTER UPDATE ON kinds REFERENCING OLD TABLE AS o NEW TABLE AS n
    FOR EACH STATEMENT EXECUTE FUNCTION claim.enqueue_trigger('changes', 'n');
SET timezone = 'Asia/Kolkata';
INSERT INTO kinds VALUES
  (1, true, 32767, -2147483648, 9223372036854775807, 12345678901234567890.123400, 1.5, 0.1,
   'tab	quote"back\\slash', 'vc', 'ab', 'name', '2024-02-29', '2024-02-29 12:34:56.789',
   '2024-02-29 12:34:56.789+00', '{"x": [1, {"y": null}]}', '{"b": 1, "a": [2]}',
   '{1,NULL,3}', ROW(1, 'p'), 7, '{a,b}', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11',
   '1 day 2 hours', '10.0.0.1/8', '\xdeadbeef', B'1011', '[1,5)', '(1.5,2)'),
  (2, false, -1, 0, -1, 'NaN', 'NaN', 'Infinity', '', NULL, '', NULL, 'infinity',
   '-infinity', 'infinity', '"scalar"', '3', '{}', ROW(NULL, NULL), NULL, NULL, NULL, NULL,
   NULL, NULL, NULL, NULL, NULL),
  (3, NULL, NULL, NULL, NULL, '-Infinity', '-Infinity', '-0', NULL, NULL, NULL, NULL, NULL,
   NULL, NULL, 'null', 'null', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
  (4, true, 1, 1, 1, '0.000', '1e-10', '1e20', 'x', 'y', 'z', 'n', '0001-01-01 BC',
   '1999-12-31 23:59:59.999999', '2000-01-01 00:00:00+14', '[]', '[true, false]', '{{1,2},{3,4}}',
   ROW(2, 'q'), 1, '{}', NULL, '-1 mon', '::1', '\x', B'', 'empty', '(0,0)');
UPDATE kinds SET n = n * 2 WHERE id <> 2;
DELETE FROM kinds WHERE id = 3;
SELECT i.payload->>'op' AS op, coalesce(i.payload->'new'->>'id', i.payload->'old'->>'id') AS row,
       i.group_key,
       EXISTS (SELECT 1 FROM kinds_seen s WHERE s.op = i.payload->>'op'
               AND s.new IS NOT DISTINCT FROM i.payload->'new'
               AND s.old IS NOT DISTINCT FROM i.payload->'old') AS same_as_to_jsonb
FROM claim.items i WHERE i.payload->>'table' = 'kinds' ORDER BY i.id;
-- every value, as to_jsonb wrote it (row 2: NaN and infinities as strings)
SELECT payload->'new' FROM claim.items
WHERE payload->>'table' = 'kinds' AND payload->>'op' = 'INSERT' ORDER BY id;
RESET timezone;
DROP TABLE kinds, kinds_seen;
DROP TYPE pair;
DROP DOMAIN pos_int;
DROP DOMAIN tags;
DELETE FROM claim.items WHERE payload->>'table' = 'kinds';

-- statement level with batch: the statement's rows packed per group key,
-- up to N rows per item, each group's rows in statement order
CREATE TABLE packed (id int, grp text, v int);
CREATE TRIGGER packed_ins AFTER INSERT ON packed REFERENCING NEW TABLE AS n
    FOR EACH STATEMENT EXECUTE FUNCTION claim.enqueue_trigger('changes', 'grp', 'batch=2');
CREATE TRIGGER packed_upd AFTER UPDATE ON packed REFERENCING OLD TABLE AS o NEW TABLE AS n
    FOR EACH STATEMENT EXECUTE FUNCTION claim.enqueue_trigger('changes', 'grp', 'batch', 'priority=4');
CREATE TRIGGER packed_del AFTER DELETE ON packed REFERENCING OLD TABLE AS o
    FOR EACH STATEMENT EXECUTE FUNCTION claim.enqueue_trigger('changes', '', 'batch=3');
INSERT INTO packed VALUES (1, 'a', 1), (2, 'b', 2), (3, 'a', 3), (4, NULL, 4), (5, 'a', 5),
                          (6, NULL, 6), (7, 'a', 7), (8, 'c', 8), (9, NULL, 9);
UPDATE packed SET v = v * 10 WHERE id <= 3;
DELETE FROM packed WHERE id >= 5;
UPDATE packed SET v = 0 WHERE false;
SELECT n, group_key, priority, payload->>'op' AS op,
       (SELECT string_agg(coalesce(r->'new'->>'id', '-') || ':' || coalesce(r->'old'->>'v', '-'), ' '
                          ORDER BY o)
        FROM jsonb_array_elements(payload->'rows') WITH ORDINALITY AS e(r, o)) AS rows,
       payload - 'rows' AS rest
FROM pg_temp.items('changes');
-- a group's items come in statement order: group_claim hands them over together
SELECT string_agg(r->'new'->>'id', ',' ORDER BY i.id, o) AS group_a
FROM claim.group_claim('changes', group_key => 'a') i,
     jsonb_array_elements(i.payload->'rows') WITH ORDINALITY AS e(r, o)
WHERE i.payload->>'op' = 'INSERT';
SELECT pg_temp.clear('changes');
BEGIN;
INSERT INTO packed SELECT g, 'g' || (g % 7), g FROM generate_series(1, 5000) g;
SELECT count(*) AS items, sum(jsonb_array_length(payload->'rows')) AS rows,
       count(DISTINCT group_key) AS groups FROM pg_temp.items('changes');
ROLLBACK;
SELECT count(*) AS after_rollback FROM pg_temp.items('changes');
-- batch items are written in jsonb's binary form: they read back exactly,
-- also with more than 32 rows (offsets every 32 entries) and odd sizes
CREATE TABLE packed2 (id int, grp text, doc jsonb, s text);
CREATE TRIGGER packed2_ins AFTER INSERT ON packed2 REFERENCING NEW TABLE AS n
    FOR EACH STATEMENT EXECUTE FUNCTION claim.enqueue_trigger('changes', 'grp', 'batch=100');
INSERT INTO packed2 SELECT g, 'x', jsonb_build_object('k', g, 'a', jsonb_build_array(g, 'v', NULL)),
                           repeat('s', g % 7) FROM generate_series(1, 70) g;
SELECT count(*) AS items, max(jsonb_array_length(payload->'rows')) AS rows,
       bool_and(payload = (payload::text)::jsonb) AS reads_back,
       bool_and(payload = jsonb_build_object('op', 'INSERT', 'schema', 'public', 'table', 'packed2',
                'rows', (SELECT jsonb_agg(jsonb_build_object('new', to_jsonb(p)) ORDER BY p.id)
                         FROM packed2 p))) AS as_built_by_sql
FROM pg_temp.items('changes');
DROP TABLE packed2;
SELECT pg_temp.clear('changes');
-- a statement whose rows waiting to be packed exceed 64 MB writes its
-- groups out early: more, smaller items, each group still in order
CREATE TABLE packed3 (id int, grp text, big text);
CREATE TRIGGER packed3_ins AFTER INSERT ON packed3 REFERENCING NEW TABLE AS n
    FOR EACH STATEMENT EXECUTE FUNCTION claim.enqueue_trigger('changes', 'grp', 'batch');
INSERT INTO packed3 SELECT g, 'g' || (g % 2), repeat(md5(g::text), 3200) FROM generate_series(1, 700) g;
SELECT count(*) > 2 AS written_early, sum(jsonb_array_length(payload->'rows')) AS rows
FROM pg_temp.items('changes');
SELECT group_key, bool_and(prev_last < first) AS in_order, sum(n) AS rows FROM (
    SELECT group_key, (payload->'rows'->0->'new'->>'id')::int AS first,
           (payload->'rows'->-1->'new'->>'id')::int AS last,
           jsonb_array_length(payload->'rows') AS n,
           coalesce(lag((payload->'rows'->-1->'new'->>'id')::int) OVER (PARTITION BY group_key ORDER BY id), 0) AS prev_last
    FROM claim.items WHERE payload->>'table' = 'packed3') x
GROUP BY group_key ORDER BY group_key;
DROP TABLE packed3;
SELECT pg_temp.clear('changes');
-- several statement-level triggers read the same transition table, spilled
-- to disk (small work_mem): each reads all of it, in order
CREATE TABLE shared_tt (id int, g text);
CREATE TRIGGER a AFTER INSERT ON shared_tt REFERENCING NEW TABLE AS n
    FOR EACH STATEMENT EXECUTE FUNCTION claim.enqueue_trigger('changes', 'g');
CREATE TRIGGER b AFTER INSERT ON shared_tt REFERENCING NEW TABLE AS n
    FOR EACH STATEMENT EXECUTE FUNCTION claim.enqueue_trigger('changes', 'g', 'batch');
CREATE FUNCTION pg_temp.count_rows() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE NOTICE 'plpgsql trigger sees % rows', (SELECT count(*) FROM n);
    RETURN NULL;
END $$;
CREATE TRIGGER c AFTER INSERT ON shared_tt REFERENCING NEW TABLE AS n
    FOR EACH STATEMENT EXECUTE FUNCTION pg_temp.count_rows();
SET work_mem = '64kB';
INSERT INTO shared_tt SELECT g, (g % 3)::text FROM generate_series(1, 5000) g;
RESET work_mem;
SELECT count(*) FILTER (WHERE payload ? 'new') AS per_row_items,
       sum(jsonb_array_length(payload->'rows')) AS batched_rows,
       bool_and((payload->'new'->>'id')::int % 3 = group_key::int) AS groups_right
FROM pg_temp.items('changes');
SELECT bool_and(ok) AS per_row_in_order FROM (
    SELECT (payload->'new'->>'id')::int > coalesce(lag((payload->'new'->>'id')::int) OVER (ORDER BY n), 0) AS ok
    FROM pg_temp.items('changes') WHERE payload ? 'new') x;
DROP TABLE shared_tt;
SELECT pg_temp.clear('changes');

-- the group key is the column's text output on every path (here a bool:
-- 't', not the 'true' of a cast to text), also when coalescing in SQL
CREATE TABLE flags (id int, flag bool);
CREATE TRIGGER r AFTER INSERT ON flags FOR EACH ROW
    EXECUTE FUNCTION claim.enqueue_trigger('changes', 'flag');
CREATE TRIGGER s AFTER INSERT ON flags REFERENCING NEW TABLE AS n FOR EACH STATEMENT
    EXECUTE FUNCTION claim.enqueue_trigger('changes', 'flag');
CREATE TRIGGER b AFTER INSERT ON flags REFERENCING NEW TABLE AS n FOR EACH STATEMENT
    EXECUTE FUNCTION claim.enqueue_trigger('changes', 'flag', 'batch');
CREATE TRIGGER c AFTER INSERT ON flags REFERENCING NEW TABLE AS n FOR EACH STATEMENT
    EXECUTE FUNCTION claim.enqueue_trigger('changes', 'flag', 'coalesce');
INSERT INTO flags VALUES (1, true), (2, false), (3, NULL);
SELECT string_agg(DISTINCT coalesce(group_key, 'NULL'), ',') AS keys, count(*) AS items
FROM pg_temp.items('changes');
DROP TABLE flags;
SELECT pg_temp.clear('changes');

-- batch at row level, with coalesce, or with a bad size
CREATE TRIGGER bad AFTER INSERT ON packed FOR EACH ROW
    EXECUTE FUNCTION claim.enqueue_trigger('changes', 'grp', 'batch');
SELECT pg_temp.try($$INSERT INTO packed VALUES (1, 'a', 1)$$);
DROP TRIGGER bad ON packed;
CREATE TRIGGER bad AFTER INSERT ON packed REFERENCING NEW TABLE AS n FOR EACH STATEMENT
    EXECUTE FUNCTION claim.enqueue_trigger('changes', 'grp', 'batch', 'coalesce');
SELECT pg_temp.try($$INSERT INTO packed VALUES (1, 'a', 1)$$);
DROP TRIGGER bad ON packed;
CREATE TRIGGER bad AFTER INSERT ON packed REFERENCING NEW TABLE AS n FOR EACH STATEMENT
    EXECUTE FUNCTION claim.enqueue_trigger('changes', 'grp', 'batch=0');
SELECT pg_temp.try($$INSERT INTO packed VALUES (1, 'a', 1)$$);
DROP TABLE packed;
SELECT pg_temp.clear('changes');

-- statement level with coalesce: one item per group for the statement,
-- merged into the newest unclaimed item of the group
CREATE TABLE bulk3 (id int, grp text, v int);
CREATE TRIGGER bulk3_upd AFTER UPDATE ON bulk3 REFERENCING OLD TABLE AS o NEW TABLE AS n
    FOR EACH STATEMENT EXECUTE FUNCTION claim.enqueue_trigger('changes', 'grp', 'coalesce');
INSERT INTO bulk3 VALUES (1, 'a', 1), (2, 'b', 2), (3, 'a', 3), (4, NULL, 4), (5, NULL, 5);
UPDATE bulk3 SET v = v + 10;
UPDATE bulk3 SET v = v + 100 WHERE grp = 'a';
SELECT n, group_key, payload->'old'->>'id' AS old_id, payload->'old'->>'v' AS old_v,
       payload->'new'->>'id' AS new_id, payload->'new'->>'v' AS new_v
FROM pg_temp.items('changes');
SELECT pg_temp.clear('changes');
DROP TABLE bulk3;

-- ------------------------------------------------------------ errors
CREATE TABLE t (id int, v int);
INSERT INTO t VALUES (1, 1);
-- the change fails with the trigger: nothing is silently dropped
CREATE TRIGGER bad AFTER INSERT ON t FOR EACH ROW EXECUTE FUNCTION claim.enqueue_trigger('nope');
SELECT pg_temp.try($$INSERT INTO t VALUES (2, 2)$$);
DROP TRIGGER bad ON t;
CREATE TRIGGER bad AFTER INSERT ON t REFERENCING NEW TABLE AS n
    FOR EACH STATEMENT EXECUTE FUNCTION claim.enqueue_trigger('nope');
SELECT pg_temp.try($$INSERT INTO t VALUES (2, 2)$$);
DROP TRIGGER bad ON t;
CREATE TRIGGER bad AFTER INSERT ON t FOR EACH ROW EXECUTE FUNCTION claim.enqueue_trigger('changes', 'missing');
SELECT pg_temp.try($$INSERT INTO t VALUES (2, 2)$$);
DROP TRIGGER bad ON t;
CREATE TRIGGER bad AFTER INSERT ON t FOR EACH ROW EXECUTE FUNCTION claim.enqueue_trigger('changes', 'ctid');
SELECT pg_temp.try($$INSERT INTO t VALUES (2, 2)$$);
DROP TRIGGER bad ON t;
CREATE TRIGGER bad AFTER INSERT ON t FOR EACH ROW EXECUTE FUNCTION claim.enqueue_trigger('changes', 'ID');
SELECT pg_temp.try($$INSERT INTO t VALUES (2, 2)$$);
DROP TRIGGER bad ON t;
CREATE TRIGGER bad BEFORE INSERT ON t FOR EACH ROW EXECUTE FUNCTION claim.enqueue_trigger('changes');
SELECT pg_temp.try($$INSERT INTO t VALUES (2, 2)$$);
DROP TRIGGER bad ON t;
CREATE TRIGGER bad AFTER INSERT ON t FOR EACH STATEMENT EXECUTE FUNCTION claim.enqueue_trigger('changes');
SELECT pg_temp.try($$INSERT INTO t VALUES (2, 2)$$);
DROP TRIGGER bad ON t;
CREATE TRIGGER bad AFTER UPDATE ON t FOR EACH STATEMENT EXECUTE FUNCTION claim.enqueue_trigger('changes');
SELECT pg_temp.try($$UPDATE t SET v = 3$$);
DROP TRIGGER bad ON t;
CREATE TRIGGER bad AFTER DELETE ON t FOR EACH STATEMENT EXECUTE FUNCTION claim.enqueue_trigger('changes');
SELECT pg_temp.try($$DELETE FROM t$$);
DROP TRIGGER bad ON t;
CREATE TRIGGER bad AFTER INSERT ON t FOR EACH ROW EXECUTE FUNCTION claim.enqueue_trigger();
SELECT pg_temp.try($$INSERT INTO t VALUES (2, 2)$$);
DROP TRIGGER bad ON t;
CREATE TRIGGER bad AFTER INSERT ON t FOR EACH ROW EXECUTE FUNCTION claim.enqueue_trigger('bad name');
SELECT pg_temp.try($$INSERT INTO t VALUES (2, 2)$$);
DROP TRIGGER bad ON t;
CREATE TRIGGER bad AFTER INSERT ON t FOR EACH ROW EXECUTE FUNCTION claim.enqueue_trigger('changes', 'id', 'debounce');
SELECT pg_temp.try($$INSERT INTO t VALUES (2, 2)$$);
DROP TRIGGER bad ON t;
CREATE TRIGGER bad AFTER INSERT ON t FOR EACH ROW EXECUTE FUNCTION claim.enqueue_trigger('changes', '', 'coalesce');
SELECT pg_temp.try($$INSERT INTO t VALUES (2, 2)$$);
DROP TRIGGER bad ON t;
CREATE TRIGGER bad AFTER INSERT ON t FOR EACH ROW EXECUTE FUNCTION claim.enqueue_trigger('changes', 'id', 'priority=high');
SELECT pg_temp.try($$INSERT INTO t VALUES (2, 2)$$);
DROP TRIGGER bad ON t;
CREATE VIEW tv AS SELECT * FROM t;
CREATE TRIGGER bad INSTEAD OF INSERT ON tv FOR EACH ROW EXECUTE FUNCTION claim.enqueue_trigger('changes');
SELECT pg_temp.try($$INSERT INTO tv VALUES (2, 2)$$);
DROP VIEW tv;
SELECT pg_temp.try($$SELECT claim.enqueue_trigger()$$);
-- none of the failed changes happened, nothing was enqueued
SELECT count(*) AS rows_in_t FROM t;
SELECT count(*) AS items FROM pg_temp.items('changes');

-- claim.enqueue_trigger is declared without SET search_path: under a
-- hostile search_path (functions that shadow the built-ins its coalescing
-- SQL calls), nothing of the shadowing functions reaches a payload
CREATE SCHEMA hostile;
CREATE FUNCTION hostile.jsonb_build_object(text, jsonb) RETURNS jsonb
    LANGUAGE sql AS $$ SELECT '{"hostile": true}'::jsonb $$;
CREATE FUNCTION hostile.to_jsonb(anyelement) RETURNS jsonb
    LANGUAGE sql AS $$ SELECT '{"hostile": true}'::jsonb $$;
CREATE TABLE watched (id int, grp text, v int);
CREATE TRIGGER watched_rows AFTER INSERT OR UPDATE ON watched
    FOR EACH ROW EXECUTE FUNCTION claim.enqueue_trigger('changes', 'grp', 'coalesce');
CREATE TRIGGER watched_stmt AFTER UPDATE ON watched REFERENCING OLD TABLE AS o NEW TABLE AS n
    FOR EACH STATEMENT EXECUTE FUNCTION claim.enqueue_trigger('changes', 'grp', 'coalesce');
SET search_path = hostile, pg_catalog, public;
INSERT INTO watched VALUES (1, 'a', 1), (2, 'b', 2);
UPDATE watched SET v = v + 1;
UPDATE watched SET v = v + 1;
RESET search_path;
SELECT count(*) AS items, count(*) FILTER (WHERE payload::text LIKE '%hostile%') AS hostile
FROM pg_temp.items('changes');
SHOW search_path;
DROP TABLE watched;
DROP SCHEMA hostile CASCADE;
SELECT pg_temp.clear('changes');

-- the trigger runs with the privileges of the role that changes the table
CREATE ROLE regress_pgclaim_app;
GRANT ALL ON t TO regress_pgclaim_app;
CREATE TRIGGER t_changes AFTER INSERT ON t FOR EACH ROW EXECUTE FUNCTION claim.enqueue_trigger('changes');
SET ROLE regress_pgclaim_app;
SELECT pg_temp.try($$INSERT INTO t VALUES (2, 2)$$);
RESET ROLE;
DROP TABLE t;
DROP ROLE regress_pgclaim_app;

DROP SCHEMA shop CASCADE;
DROP TABLE orders;
DROP EXTENSION pg_claim;
