-- Included by the regression tests (\i :abs_srcdir/sql/include/try.sql, after
-- \getenv abs_srcdir PG_ABS_SRCDIR), not a test of its own.
-- pg_temp.try(sql): runs a statement and shows 'ok', or its SQLSTATE and
-- message instead of failing. Token and item numbers depend on what ran
-- before: they read N.
CREATE FUNCTION pg_temp.try(sql text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE sql;
    RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ': ' || regexp_replace(SQLERRM, '(token|item|tokens) \d+', '\1 N', 'g');
END $$;
