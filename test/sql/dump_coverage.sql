-- What pg_dump keeps of pg_claim (docs/operations.md). pg_dump dumps the rows
-- of an extension's table, and the value of its sequence, only when the
-- install script marked it with pg_extension_config_dump. Every table and
-- sequence of the extension must be marked, or be on the short list of
-- deliberately volatile ones below: a table or sequence added later without
-- either makes this test fail.
CREATE EXTENSION pg_claim;

-- Deliberately volatile: a restore starts them empty. Keep this list equal
-- to the one in sql/pg_claim--0.2.0--0.3.0.sql and docs/operations.md.
CREATE TEMP TABLE volatile (rel text PRIMARY KEY, why text NOT NULL);
INSERT INTO volatile VALUES
    -- UNLOGGED: live claims; a claimed item comes back ready, as after a crash.
    ('claim.claims', 'live claims'),
    -- UNLOGGED: releases of lease slots.
    ('claim.lease_released', 'lease releases'),
    -- Live leases: every lease is free after a restore.
    ('claim.lease_holders', 'live leases'),
    -- The durable ceiling of the tokens and the timeline it was written on
    -- belong to the server that wrote them: the restored claim.token_seq is
    -- the floor, and the target raises its own ceiling from there.
    ('claim.token_ceiling', 'token ceiling of the dumped server'),
    ('claim.token_timeline', 'timeline of the dumped server'),
    -- Live sessions of the coordination service (docs/coordination.md):
    -- their holders open new ones after a restore.
    ('claim.coord_sessions', 'live sessions'),
    ('claim.coord_attached', 'leases attached to live sessions');

CREATE TEMP VIEW members AS
SELECT c.oid, c.oid::regclass::text AS rel, c.relkind, c.relpersistence,
       cfg.cond
FROM pg_depend d
JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'pg_claim'
JOIN pg_class c ON c.oid = d.objid
LEFT JOIN LATERAL (
    SELECT u.cond FROM unnest(e.extconfig, e.extcondition) AS u(cfg, cond)
    WHERE u.cfg = c.oid) cfg ON true
WHERE d.classid = 'pg_class'::regclass AND d.refclassid = 'pg_extension'::regclass
  AND d.deptype = 'e'
  -- tables, unlogged or not, and sequences; a partitioned table holds no
  -- rows itself (its partitions are tables of their own)
  AND c.relkind IN ('r', 'S');

-- 1. Every table and sequence is marked for pg_dump or volatile: no rows.
SELECT rel AS neither_dumped_nor_volatile
FROM members m
WHERE m.cond IS NULL AND NOT EXISTS (SELECT FROM volatile v WHERE v.rel = m.rel)
ORDER BY 1;

-- 2. No volatile one is marked. No rows.
SELECT v.rel AS volatile_but_dumped
FROM volatile v JOIN members m ON m.rel = v.rel
WHERE m.cond IS NOT NULL
ORDER BY v.rel;

-- The live claims, releases and leases are on the list and exist.
SELECT v.rel, v.why, m.relpersistence
FROM volatile v JOIN members m ON m.rel = v.rel
WHERE v.rel IN ('claim.claims', 'claim.lease_released', 'claim.lease_holders')
ORDER BY v.rel;

-- 3. No unlogged table is marked: its rows do not survive a crash, and
-- must not come back from a backup either. No rows.
SELECT rel AS unlogged_but_dumped FROM members
WHERE relpersistence = 'u' AND cond IS NOT NULL ORDER BY 1;

-- 4. A table that the install script fills would get its rows twice (or a
-- duplicate-key error) when a restore copies the dumped rows into a fresh
-- install: it needs a filter that leaves the script's rows out, or a
-- BEFORE INSERT row trigger that fires always and merges them. No rows.
SELECT m.rel AS filled_by_install_without_filter_or_merge
FROM members m
WHERE m.relkind = 'r' AND m.cond = ''
  AND (xpath('/row/n/text()',
             query_to_xml(format('SELECT count(*) AS n FROM %s', m.rel), false, true, '')))[1]::text::int > 0
  AND NOT EXISTS (SELECT FROM pg_trigger t
                  WHERE t.tgrelid = m.oid AND t.tgenabled = 'A' AND NOT t.tgisinternal
                    AND t.tgtype & 2 = 2      -- BEFORE
                    AND t.tgtype & 1 = 1      -- FOR EACH ROW
                    AND t.tgtype & 4 = 4)     -- INSERT
ORDER BY 1;

-- 5. The ring of claim.finished: copying the dumped rows onto the install's
-- rows restores the dumped ring (its current slot and times), as pg_restore
-- does.
COPY claim.finished_ring (slot, current, opened_at, closed_at) FROM stdin;
0	f	2020-01-01 00:00:00+00	2020-01-02 00:00:00+00
1	f	2020-01-02 00:00:00+00	2020-01-03 00:00:00+00
2	t	2020-01-03 00:00:00+00	\N
3	f	\N	\N
\.
SELECT slot, current, opened_at AT TIME ZONE 'UTC' AS opened, closed_at AT TIME ZONE 'UTC' AS closed
FROM claim.finished_ring ORDER BY slot;

DROP EXTENSION pg_claim;
