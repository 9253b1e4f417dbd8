-- Included by test/sql/bad_input.sql, not a test of its own.
-- pg_temp.try(sql): runs a statement; shows "ok: <first column of the first
-- row>" or "<SQLSTATE>: <message>". Control characters in messages show as
-- '?', numbers after "token" or "id" as N, a run of 16 or more equal
-- characters (an echoed oversized argument) as three of them and "...", and
-- a message is cut at 160 characters.
CREATE FUNCTION pg_temp.try(sql text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    v text;
BEGIN
    EXECUTE sql INTO v;
    RETURN 'ok: ' || coalesce(v, 'NULL');
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ': ' ||
        left(regexp_replace(regexp_replace(regexp_replace(SQLERRM, '[\x01-\x1f\x7f]', '?', 'g'),
                                           '(token|id) \d+', '\1 N', 'g'),
                            '(.)\1{15,}', '\1\1\1...', 'g'), 160);
END $$;
