-- Leases in the watch log: with pg_claim.watch_leases on, every grant,
-- release and expiry of a named lease is a change claim.watch() returns,
-- once (docs/coordination.md, "Leases in the watch").
CREATE EXTENSION pg_claim;
SET pg_claim.watch_leases = on;
SELECT claim.revision() AS r0 \gset
-- a grant and its release
SELECT claim.lease_acquire('lw/a', '1 minute', 'alice') AS ta \gset
SELECT claim.lease_release('lw/a', :ta);
SELECT claim.lease_release('lw/a', :ta);  -- not live: nothing more
-- a shared grant
SELECT claim.lease_acquire_shared('lw/s', '1 minute', 'reader') AS ts \gset
-- an expired holding taken over by the next grant
SELECT claim.lease_acquire('lw/e', '10 milliseconds', 'paused') AS te \gset
SELECT pg_sleep(0.05);
SELECT claim.lease_acquire('lw/e', '1 minute', 'next') AS te2 \gset
-- an expired shared holding retired by an exclusive grant
SELECT claim.lease_acquire_shared('lw/m', '10 milliseconds', 'r1') AS tm \gset
SELECT pg_sleep(0.05);
SELECT claim.lease_acquire('lw/m', '1 minute', 'writer') AS tm2 \gset
-- an expiry nobody takes over: recorded by the worker's round
SELECT claim.lease_acquire('lw/x', '10 milliseconds', 'gone') AS tx \gset
SELECT pg_sleep(0.05);
DO $$
BEGIN
    FOR i IN 1..100 LOOP
        PERFORM claim._coord_maintain();
        EXIT WHEN EXISTS (SELECT FROM claim.watch('lw/x') w WHERE w.event = 'expired');
        PERFORM pg_sleep(0.05);
    END LOOP;
END
$$;
SELECT claim._coord_maintain() IS NOT NULL AS again;  -- recorded once
-- a session's lease: recorded once, by the grant and the release
SELECT claim.session_open('1 minute', 'svc') AS s \gset
SELECT claim.session_lease(:s, 'lw/sess') AS tsess \gset
SELECT claim.session_close(:s);
-- off: nothing recorded
SET pg_claim.watch_leases = off;
SELECT claim.lease_acquire('lw/off', '1 minute', 'quiet') IS NOT NULL AS granted;
SELECT kind, name, event, holder,
       CASE token WHEN :ta THEN 'ta' WHEN :ts THEN 'ts' WHEN :te THEN 'te' WHEN :te2 THEN 'te2'
                  WHEN :tm THEN 'tm' WHEN :tm2 THEN 'tm2' WHEN :tx THEN 'tx'
                  WHEN :tsess THEN 'tsess' ELSE 'other' END AS token
  FROM claim.watch('lw/', :r0) ORDER BY revision;
-- live: lw/s, lw/e, lw/m and lw/off (the ended ones are not)
SELECT count(*) FROM claim.leases WHERE name LIKE 'lw/%';
-- only a superuser (or ALTER ROLE/DATABASE/SYSTEM) sets it
CREATE ROLE lw_user;
SET ROLE lw_user;
SET pg_claim.watch_leases = on;
RESET ROLE;
DROP ROLE lw_user;
DROP EXTENSION pg_claim;
