-- The direct path keeps the rules of claim.items or takes the SQL path
-- (src/pg/direct_rules.cpp, docs/internals.md): a foreign key that
-- references the table, a CHECK of the user's, a column of the user's with
-- a default, row-level security that applies to the caller. Each rule is
-- dropped again, and the calls after it work as before.
CREATE EXTENSION pg_claim;

\getenv abs_srcdir PG_ABS_SRCDIR
\i :abs_srcdir/sql/include/try.sql

SELECT claim.create_queue('rules');

-- A foreign key that references claim.items: completing a referenced item
-- is refused (23503) and the item stays; once the reference is gone the
-- same token completes it.
CREATE TABLE public.item_notes (item_id bigint REFERENCES claim.items (id), note text);
SELECT claim.enqueue('rules', '{"n": 1}') AS id \gset
INSERT INTO public.item_notes VALUES (:id, 'keep me');
SELECT token AS tok FROM claim.claim_next('rules') \gset
SELECT pg_temp.try($$SELECT claim.complete($$ || :tok || $$)$$);
SELECT count(*) AS item_kept FROM claim.items WHERE id = :id;
DELETE FROM public.item_notes;
SELECT claim.complete(:tok);
SELECT count(*) AS item_gone FROM claim.items WHERE id = :id;
DROP TABLE public.item_notes;

-- A CHECK of the user's holds for enqueue and enqueue_many.
ALTER TABLE claim.items ADD CONSTRAINT small_payload CHECK (NOT payload ? 'huge');
SELECT pg_temp.try($$SELECT claim.enqueue('rules', '{"huge": true}')$$);
SELECT pg_temp.try($$SELECT claim.enqueue_many('rules', ARRAY['{"n": 0}', '{"huge": 1}']::jsonb[])$$);
SELECT count(*) AS items FROM claim.items;
ALTER TABLE claim.items DROP CONSTRAINT small_payload;

-- A column of the user's gets its default.
ALTER TABLE claim.items ADD COLUMN origin text DEFAULT 'from the default';
SELECT claim.enqueue('rules', '{"n": 2}') AS id \gset
SELECT origin FROM claim.items WHERE id = :id;
ALTER TABLE claim.items DROP COLUMN origin;

-- Row-level security that applies to the worker: it claims only the items
-- its policy shows; the owner (not subject to it) claims the rest.
CREATE ROLE rules_worker;
GRANT claim_worker TO rules_worker;
ALTER TABLE claim.items ENABLE ROW LEVEL SECURITY;
CREATE POLICY see_even ON claim.items FOR ALL TO rules_worker
    USING ((payload->>'n')::int % 2 = 0);
SELECT count(*) FROM (SELECT claim.enqueue('rules', jsonb_build_object('n', n))
                      FROM generate_series(3, 6) n) s;
SET ROLE rules_worker;
SELECT payload->>'n' AS n FROM claim.claim_next('rules', 10) ORDER BY 1;
RESET ROLE;
SELECT payload->>'n' AS n FROM claim.claim_next('rules', 10) ORDER BY 1;
DROP POLICY see_even ON claim.items;
ALTER TABLE claim.items DISABLE ROW LEVEL SECURITY;

-- Without the rules: the direct path again.
SELECT claim.enqueue('rules', '{"n": 7}') IS NOT NULL AS enqueued;
SELECT count(*) AS claimed FROM claim.claim_next('rules', 10);

DROP OWNED BY rules_worker;
DROP ROLE rules_worker;
DROP EXTENSION pg_claim;
