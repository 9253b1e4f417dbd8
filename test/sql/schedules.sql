-- Recurring schedules: claim.cron_next (the parser and PostgreSQL's time
-- zones, DST included), claim.schedule, claim.unschedule, the view
-- claim.schedules, rights; every error they raise. The worker's firing is
-- tested by TAP 130 (it depends on the clock).
CREATE EXTENSION pg_claim;
SET timezone = 'UTC';

\getenv abs_srcdir PG_ABS_SRCDIR
\i :abs_srcdir/sql/include/try.sql

-- ---------------------------------------------------------------- cron_next
SELECT claim.cron_next('*/15 * * * *', '2026-01-01 10:07:00+00') AS quarter;
SELECT claim.cron_next('*/15 * * * *', '2026-01-01 10:15:00+00') AS strictly_after;
SELECT claim.cron_next('*/10 * * * * *', '2026-01-01 10:07:03+00') AS six_fields;
SELECT claim.cron_next('@daily', '2026-01-01 10:07:00+00') AS daily;
SELECT claim.cron_next('0 12 1,15 * MON', '2026-01-02 00:00+00') AS dom_or_dow;
-- 2026-01-01 is a Thursday; 09:00 in Berlin is 08:00 UTC in winter.
SELECT claim.cron_next('0 9 * * MON', '2026-01-01 10:00+00', 'Europe/Berlin') AS berlin_monday;
SELECT claim.cron_next('0 9 * * MON', '2026-07-01 10:00+00', 'europe/berlin') AS summer_any_case;
-- Forward change (Berlin, 2026-03-29 02:00 CET -> 03:00 CEST): a fixed
-- time in the gap fires at the first instant after it; a wildcard hour
-- drops the skipped times.
SELECT claim.cron_next('30 2 * * *', '2026-03-28 12:00+00', 'Europe/Berlin') AS gap_fixed;
SELECT claim.cron_next('30 * * * *', '2026-03-29 00:45+00', 'Europe/Berlin') AS gap_wildcard;
-- Backward change (New York, 2026-11-01 02:00 EDT -> 01:00 EST): a repeated
-- local time fires once, at its first occurrence.
SELECT claim.cron_next('30 1 * * *', '2026-10-31 12:00+00', 'America/New_York') AS overlap_first;
SELECT claim.cron_next('30 1 * * *', '2026-11-01 05:30+00', 'America/New_York') AS overlap_next_day;
SELECT claim.cron_next('0 * * * *', '2026-11-01 05:00+00', 'America/New_York') AS overlap_hourly;
-- Fixed-offset and POSIX zones PostgreSQL knows.
SELECT claim.cron_next('0 0 * * *', '2026-01-01 10:00+00', 'Asia/Kolkata') AS kolkata;
SELECT claim.cron_next('0 0 * * *', '2026-01-01 10:00+00', 'Etc/GMT-14') AS gmt_minus_14;
-- The default `after` is now.
SELECT claim.cron_next('* * * * *') > now() AS default_after;

-- Errors: the parser's message names the field and the position.
SELECT pg_temp.try($$SELECT claim.cron_next('61 * * * *', now())$$);
SELECT pg_temp.try($$SELECT claim.cron_next('0 0 32 * *', now())$$);
SELECT pg_temp.try($$SELECT claim.cron_next('* * * *', now())$$);
SELECT pg_temp.try($$SELECT claim.cron_next('* * * * * * *', now())$$);
SELECT pg_temp.try($$SELECT claim.cron_next('0 0 * * FOO', now())$$);
SELECT pg_temp.try($$SELECT claim.cron_next('@often', now())$$);
SELECT pg_temp.try($$SELECT claim.cron_next('', now())$$);
SELECT pg_temp.try($$SELECT claim.cron_next('0 0 30 2 *', now())$$);
SELECT pg_temp.try($$SELECT claim.cron_next('* * * * *', now(), 'Mars/Olympus_Mons')$$);
SELECT pg_temp.try($$SELECT claim.cron_next('* * * * *', now(), '')$$);
SELECT pg_temp.try($$SELECT claim.cron_next('* * * * *', 'infinity')$$);
SELECT pg_temp.try($$SELECT claim.cron_next(NULL, now())$$);
SELECT pg_temp.try($$SELECT claim.cron_next('* * * * *', NULL)$$);
SELECT pg_temp.try($$SELECT claim.cron_next('* * * * *', now(), NULL)$$);
-- The hints.
CREATE FUNCTION pg_temp.hint(sql text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE h text;
BEGIN
    EXECUTE sql;
    RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS h = PG_EXCEPTION_HINT;
    RETURN h;
END $$;
SELECT pg_temp.hint($$SELECT claim.cron_next('*/0 * * * *', now())$$);
SELECT pg_temp.hint($$SELECT claim.cron_next('* * * * *', now(), 'Nowhere')$$);

-- ---------------------------------------------------------------- schedule
SELECT claim.create_queue('reports', '1 minute', 3, '1 second');
SELECT claim.create_queue('other', '1 minute', 3, '1 second');

-- Ticks far enough ahead that the worker does not fire them during the test.
SELECT claim.schedule('yearly', '0 0 1 1 *', 'reports');
SELECT claim.schedule('weekly_berlin', '0 9 * * MON', 'reports', '{"kind": "weekly"}',
                      group_key => 'w', priority => 5, timezone => 'europe/berlin');
SELECT name, cron, timezone, queue, next_run = claim.cron_next(cron, now(), timezone) AS on_tick,
       next_run > now() AS ahead, last_run, last_item, payload, group_key, priority
FROM claim.schedules ORDER BY name;

-- The same name replaces the schedule (cron, zone, queue, payload...),
-- and next_run is computed again.
SELECT claim.schedule('yearly', '0 0 1 7 *', 'other', '{"v": 2}', timezone => 'Asia/Tokyo');
SELECT name, cron, timezone, queue, payload,
       next_run = claim.cron_next('0 0 1 7 *', now(), 'Asia/Tokyo') AS recomputed
FROM claim.schedules WHERE name = 'yearly';
SELECT count(*) AS schedules FROM claim.schedules;
-- Names are text of 1 to 200 bytes, compared byte-wise.
SELECT claim.schedule(repeat('n', 200), '0 0 1 1 *', 'reports');
SELECT claim.schedule('Name with spaces/and.punctuation', '0 0 1 1 *', 'reports');
SELECT count(*) AS schedules FROM claim.schedules;

-- Errors.
SELECT pg_temp.try($$SELECT claim.schedule('bad', '0 0 1 13 *', 'reports')$$);
SELECT pg_temp.try($$SELECT claim.schedule('bad', '0 0 1 1 *', 'nope')$$);
SELECT pg_temp.try($$SELECT claim.schedule('bad', '0 0 1 1 *', 'reports', timezone => 'Nowhere/Town')$$);
SELECT pg_temp.try($$SELECT claim.schedule('', '0 0 1 1 *', 'reports')$$);
SELECT pg_temp.try($$SELECT claim.schedule(repeat('n', 201), '0 0 1 1 *', 'reports')$$);
SELECT pg_temp.try($$SELECT claim.schedule('bad', '0 0 1 1 *', 'reports', group_key => '')$$);
SELECT pg_temp.try($$SELECT claim.schedule(NULL, '0 0 1 1 *', 'reports')$$);
SELECT pg_temp.try($$SELECT claim.schedule('bad', NULL, 'reports')$$);
SELECT pg_temp.try($$SELECT claim.schedule('bad', '0 0 1 1 *', NULL)$$);
SELECT pg_temp.try($$SELECT claim.schedule('bad', '0 0 1 1 *', 'reports', NULL)$$);
SELECT pg_temp.try($$SELECT claim.schedule('bad', '0 0 1 1 *', 'reports', priority => NULL)$$);
SELECT pg_temp.try($$SELECT claim.schedule('bad', '0 0 1 1 *', 'reports', timezone => NULL)$$);
-- A NULL group_key is the default.
SELECT pg_temp.try($$SELECT claim.schedule('nullgroup', '0 0 1 1 *', 'reports', group_key => NULL)$$);
SELECT count(*) FILTER (WHERE name = 'bad') AS bad, count(*) AS schedules FROM claim.schedules;

-- ---------------------------------------------------------------- unschedule
SELECT claim.unschedule('nullgroup');
SELECT claim.unschedule('nullgroup');
SELECT claim.unschedule('never existed');
SELECT pg_temp.try($$SELECT claim.unschedule(NULL)$$);

-- Dropping a queue drops its schedules.
SELECT claim.drop_queue('other');
SELECT name FROM claim.schedules ORDER BY name;

-- ---------------------------------------------------------------- rights
-- Admin functions: not for PUBLIC (nor producers and workers), granted to
-- claim_admin; cron_next is for every role that may use the schema.
CREATE ROLE schedules_producer IN ROLE claim_producer;
CREATE ROLE schedules_admin IN ROLE claim_admin;
SET ROLE schedules_producer;
SELECT pg_temp.try($$SELECT claim.schedule('x', '* * * * *', 'reports')$$);
SELECT pg_temp.try($$SELECT claim.unschedule('x')$$);
SELECT pg_temp.try($$SELECT * FROM claim.schedules$$);
SELECT pg_temp.try($$SELECT * FROM claim.schedule_defs$$);
SELECT claim.cron_next('0 0 * * *', '2026-01-01 10:00+00') AS producer_may;
RESET ROLE;
SET ROLE schedules_admin;
SELECT claim.schedule('by_admin', '0 0 1 1 *', 'reports');
SELECT name, queue FROM claim.schedules WHERE name = 'by_admin';
SELECT claim.unschedule('by_admin');
RESET ROLE;
DROP ROLE schedules_producer;
DROP ROLE schedules_admin;

DROP EXTENSION pg_claim;
