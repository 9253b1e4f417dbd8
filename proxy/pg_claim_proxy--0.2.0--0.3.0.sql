-- pg_claim_proxy 0.2.0 -> 0.3.0, for partitions on pg_claim 0.3.0: tokens of
-- at most 2^53 - 1 (partition in bits 52..47), and the array forms under
-- names of their own (complete_many, cancel_many, enqueue_many), with a
-- one-item cancel. The front holds no data: the functions are replaced.

\echo Use "ALTER EXTENSION pg_claim_proxy UPDATE TO '0.3.0'" to load this file. \quit

DROP FUNCTION claim.token_partition(bigint);
CREATE FUNCTION claim.token_partition(token bigint)
RETURNS integer
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
SELECT CASE WHEN token OPERATOR(pg_catalog.<) 0 THEN -1
            WHEN token OPERATOR(pg_catalog.>) 9007199254740991 THEN (token OPERATOR(pg_catalog.>>) 53)::integer
            ELSE (token OPERATOR(pg_catalog.>>) 47)::integer END
$$;

DROP FUNCTION claim.cancel(text, bigint[]);
CREATE FUNCTION claim.cancel(queue text, id bigint)
RETURNS integer LANGUAGE plproxy AS $$
    CLUSTER 'claim_cluster';
    RUN ON claim.route_hash(queue);
$$;

CREATE FUNCTION claim.cancel_many(queue text, ids bigint[])
RETURNS integer LANGUAGE plproxy AS $$
    CLUSTER 'claim_cluster';
    RUN ON claim.route_hash(queue);
$$;

DROP FUNCTION claim.enqueue_batch(text, jsonb[], text[], timestamptz, integer, bigint[]);
CREATE FUNCTION claim.enqueue_many(queue text, payloads jsonb[], group_keys text[] DEFAULT NULL,
                                   run_at timestamptz DEFAULT NULL, priority integer DEFAULT 0,
                                   after bigint[] DEFAULT NULL)
RETURNS SETOF bigint LANGUAGE plproxy AS $$
    CLUSTER 'claim_cluster';
    RUN ON claim.route_hash(queue);
$$;

DROP FUNCTION claim.complete(bigint[], boolean, jsonb[]);
CREATE FUNCTION claim.complete_many(tokens bigint[], skip_stale boolean DEFAULT false,
                                    results jsonb[] DEFAULT NULL)
RETURNS integer LANGUAGE plproxy AS $$
    CLUSTER 'claim_cluster';
    RUN ON claim.tokens_partition(tokens);
$$;
