-- complete() on a retaining queue writes the item's history row into the
-- current slot of claim.finished without the executor; that write keeps
-- every rule claim.finished and its slots carry, or takes the SQL path
-- (src/pg/direct_history.hpp): a trigger, a CHECK of the user's, a column
-- with a default, row-level security, and the INSERT privilege.
CREATE EXTENSION pg_claim;

\getenv abs_srcdir PG_ABS_SRCDIR
\i :abs_srcdir/sql/include/try.sql

SELECT claim.create_queue('h', lease => '1 hour', retain => '1 hour');

-- The direct write: the row is in the current slot, with every column.
SELECT claim.enqueue('h', '{"n": 1}');
SELECT claim.complete(token, '{"ok": 1}') FROM claim.claim_next('h');
SELECT f.slot = r.slot AS in_current_slot, f.payload, f.state, f.result, f.error, f.attempts,
       f.enqueued_at <= f.finished_at AS ordered
FROM claim.finished f, claim.finished_ring r WHERE r.current;
SELECT count(*) AS items_left FROM claim.items;

-- A large payload, stored out of line (64000 hexadecimal digits do not
-- compress below the toast threshold), moves whole.
CREATE TEMP TABLE big AS
    SELECT jsonb_build_object('big', string_agg(md5(i::text), '' ORDER BY i)) AS p
    FROM generate_series(1, 2000) i;
SELECT claim.enqueue('h', p) FROM big;
SELECT pg_relation_size(reltoastrelid) > 0 AS out_of_line FROM pg_class
WHERE oid = 'claim.items'::regclass;
SELECT claim.complete(token) FROM claim.claim_next('h');
SELECT f.payload = b.p AS same_payload FROM claim.finished f, big b WHERE f.payload ? 'big';
SELECT pg_relation_size(c.reltoastrelid) > 0 AS out_of_line FROM claim.finished_ring r, pg_class c
WHERE r.current AND c.oid = ('claim.finished_' || r.slot)::regclass;

-- A row trigger of the user's on claim.finished fires for the history row.
CREATE TABLE public.seen (id bigint, result jsonb);
CREATE FUNCTION public.note_finished() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN INSERT INTO public.seen VALUES (NEW.id, NEW.result); RETURN NEW; END $$;
CREATE TRIGGER note AFTER INSERT ON claim.finished
    FOR EACH ROW EXECUTE FUNCTION public.note_finished();
SELECT claim.enqueue('h', '{"n": 2}');
SELECT claim.complete(token, '{"ok": 2}') FROM claim.claim_next('h');
SELECT s.result FROM public.seen s JOIN claim.finished f USING (id);
DROP TRIGGER note ON claim.finished;

-- A CHECK of the user's is checked: the completion fails whole and the
-- item stays claimed.
ALTER TABLE claim.finished ADD CONSTRAINT small_result CHECK (NOT result ? 'huge');
SELECT claim.enqueue('h', '{"n": 3}');
SELECT token AS tok FROM claim.claim_next('h') \gset
SELECT pg_temp.try($$SELECT claim.complete($$ || :tok || $$, '{"huge": true}')$$);
SELECT count(*) AS still_claimed FROM claim.claims WHERE token = :tok;
SELECT claim.complete(:tok, '{"ok": 3}');
ALTER TABLE claim.finished DROP CONSTRAINT small_result;

-- A column of the user's with a default gets it.
ALTER TABLE claim.finished ADD COLUMN note text DEFAULT 'default';
UPDATE claim.finished SET note = 'before';
SELECT claim.enqueue('h', '{"n": 4}');
SELECT claim.complete(token, '{"ok": 4}') FROM claim.claim_next('h');
SELECT result, note FROM claim.finished WHERE note <> 'before';
ALTER TABLE claim.finished DROP COLUMN note;

-- Row-level security that applies to the worker: its policy decides.
CREATE ROLE history_worker;
GRANT claim_worker, claim_producer TO history_worker;
ALTER TABLE claim.finished ENABLE ROW LEVEL SECURITY;
CREATE POLICY readers ON claim.finished FOR SELECT USING (true);
CREATE POLICY no_secrets ON claim.finished FOR INSERT WITH CHECK (NOT (result ? 'secret'));
SET ROLE history_worker;
SELECT claim.enqueue('h', '{"n": 5}');
SELECT token AS tok FROM claim.claim_next('h') \gset
SELECT pg_temp.try($$SELECT claim.complete($$ || :tok || $$, '{"secret": 1}')$$);
SELECT claim.complete(:tok, '{"ok": 5}');
RESET ROLE;
ALTER TABLE claim.finished DISABLE ROW LEVEL SECURITY;
DROP POLICY readers ON claim.finished;
DROP POLICY no_secrets ON claim.finished;

-- Without INSERT on claim.finished, complete() on a retaining queue is
-- refused, and the item stays claimed.
REVOKE claim_worker FROM history_worker;
GRANT SELECT, DELETE ON claim.items, claim.claims TO history_worker;
GRANT SELECT ON claim.finished_ring, claim.queues TO history_worker;
SELECT claim.enqueue('h', '{"n": 6}');
SELECT token AS tok FROM claim.claim_next('h') \gset
SET ROLE history_worker;
SELECT pg_temp.try($$SELECT claim.complete($$ || :tok || $$, '{"ok": 0}')$$);
RESET ROLE;
SELECT count(*) AS still_claimed FROM claim.claims WHERE token = :tok;
SELECT claim.complete(:tok, '{"ok": 6}');

-- Every completion is in the history once, the refused ones not.
SELECT id, state, result, attempts FROM claim.finished ORDER BY id;
SELECT count(*) AS items_left FROM claim.items;

REVOKE ALL ON claim.items, claim.claims, claim.finished_ring, claim.queues FROM history_worker;
DROP OWNED BY history_worker;
DROP ROLE history_worker;
DROP TABLE public.seen;
DROP FUNCTION public.note_finished();
DROP EXTENSION pg_claim;
