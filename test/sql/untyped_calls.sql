-- Every function of schema claim can be called with positional parameters
-- of unknown type, as ruby-pg, DBD::Pg and node-postgres send them and as
-- asyncpg and pgx prepare them. For each function and each number of
-- arguments it accepts (its required ones up to all of them), a PREPARE of
-- claim.f($1, ..., $n) without types must resolve, and to that very function
-- (the parameter types PostgreSQL inferred are its argument types). Two
-- functions of one name that differ only in scalar against array would
-- fail here with 42725.
CREATE EXTENSION pg_claim;
SET client_min_messages = warning;

CREATE FUNCTION pg_temp.untyped_probes(OUT probes integer, OUT failures text[])
LANGUAGE plpgsql AS $$
DECLARE
    f record;
    n integer;
    q text;
    got regtype[];
    want regtype[];
BEGIN
    probes := 0;
    failures := '{}';
    FOR f IN SELECT p.oid, p.proname, p.pronargs, p.pronargdefaults, p.proargtypes::regtype[] AS types
               FROM pg_proc p JOIN pg_namespace ns ON ns.oid = p.pronamespace
              WHERE ns.nspname = 'claim' AND p.proname !~ '^_'
                AND p.prorettype <> 'trigger'::regtype
              ORDER BY p.proname, p.pronargs
    LOOP
        FOR n IN (f.pronargs - f.pronargdefaults) .. f.pronargs LOOP
            q := format('SELECT * FROM claim.%I(%s)', f.proname,
                        (SELECT coalesce(string_agg('$' || i, ', ' ORDER BY i), '')
                           FROM generate_series(1, n) i));
            probes := probes + 1;
            BEGIN
                EXECUTE 'PREPARE untyped_probe AS ' || q;
                SELECT s.parameter_types INTO got FROM pg_prepared_statements s
                 WHERE s.name = 'untyped_probe';
                DEALLOCATE untyped_probe;
                want := f.types[0:n - 1];
                IF n > 0 AND got IS DISTINCT FROM want THEN
                    failures := failures || format('%s: resolved to (%s), not (%s)', q, got, want);
                END IF;
            EXCEPTION WHEN others THEN
                failures := failures || format('%s: %s %s', q, SQLSTATE, SQLERRM);
            END;
        END LOOP;
    END LOOP;
END
$$;

SELECT probes > 60 AS every_function_probed, failures FROM pg_temp.untyped_probes();

-- The calls of the driver section, with parameters sent as untyped text
-- (EXECUTE passes its literals as unknown): they run, and their errors are
-- those of the function, never 42725 (not unique) or 42883 (no function).
CREATE FUNCTION pg_temp.try(sql text) RETURNS text
LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE sql;
    RETURN 'ok';
EXCEPTION WHEN others THEN
    RETURN SQLSTATE;
END
$$;

SELECT claim.create_queue('untyped');
PREPARE enq(unknown, unknown) AS SELECT claim.enqueue($1, $2) > 0 AS enqueued;
PREPARE enq_many AS SELECT count(*) FROM claim.enqueue_many($1, $2);
PREPARE claim1 AS SELECT count(*) FROM claim.claim_next($1, $2, $3);
PREPARE complete1 AS SELECT claim.complete($1);
PREPARE complete2 AS SELECT claim.complete($1, $2);
PREPARE complete_many1 AS SELECT claim.complete_many($1);
PREPARE complete_many2 AS SELECT claim.complete_many($1, $2);
PREPARE fail2 AS SELECT claim.fail($1, $2);
PREPARE fail3 AS SELECT claim.fail($1, $2, $3);
PREPARE extend2 AS SELECT claim.extend($1, $2);
PREPARE release1 AS SELECT claim.release($1);
PREPARE cancel2 AS SELECT claim.cancel($1, $2);
PREPARE cancel_many2 AS SELECT claim.cancel_many($1, $2);
PREPARE lease2 AS SELECT claim.lease_acquire($1, $2) IS NOT NULL;
PREPARE once2 AS SELECT claim.once($1, $2);
EXECUTE enq('untyped', '{"a": 1}');
EXECUTE enq_many('untyped', '{"{\"b\": 1}","{\"b\": 2}"}');
EXECUTE claim1('untyped', '2', '1 minute');
SELECT pg_temp.try($$EXECUTE complete1('123456789')$$) AS complete_stale;
SELECT pg_temp.try($$EXECUTE complete2('123456789', '{"r": 1}')$$) AS complete_result_stale;
SELECT pg_temp.try($$EXECUTE complete_many1('{123456789}')$$) AS complete_many_stale;
EXECUTE complete_many2('{123456789}', 'true');
SELECT pg_temp.try($$EXECUTE fail2('123456789', 'boom')$$) AS fail_stale;
SELECT pg_temp.try($$EXECUTE fail3('123456789', 'boom', '5 seconds')$$) AS fail_retry_stale;
SELECT pg_temp.try($$EXECUTE extend2('123456789', '1 minute')$$) AS extend_stale;
SELECT pg_temp.try($$EXECUTE release1('123456789')$$) AS release_stale;
EXECUTE cancel2('untyped', '987654321');
EXECUTE cancel_many2('untyped', '{987654321}');
SELECT pg_temp.try($$EXECUTE cancel2('untyped', NULL)$$) AS cancel_null_id;
EXECUTE lease2('untyped-lease', '1 minute');
EXECUTE once2('untyped-once', '1 minute');
-- The claimed items, completed by their tokens sent as text.
SELECT string_agg(pg_temp.try(format('EXECUTE complete1(%L)', c.token)), ', ') AS completed
  FROM claim.claimed_items c WHERE c.queue = 'untyped';
SELECT claim.drop_queue('untyped');

DROP EXTENSION pg_claim;
