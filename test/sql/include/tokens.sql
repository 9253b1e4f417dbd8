-- Included by the regression tests of leases and guards, not a test of its
-- own: the tokens a test keeps, by name (t), and pg_temp.tok(name).
CREATE TEMP TABLE t (k text PRIMARY KEY, token bigint);
CREATE FUNCTION pg_temp.tok(k text) RETURNS bigint LANGUAGE sql AS
$$ SELECT token FROM t WHERE t.k = $1 $$;
