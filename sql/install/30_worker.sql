-- The background worker's view of the databases it serves (docs/worker.md).
CREATE FUNCTION claim.worker_status(OUT datid oid, OUT pid integer, OUT state text,
                                    OUT rounds bigint, OUT promoted bigint,
                                    OUT expired bigint, OUT killed bigint,
                                    OUT notifies bigint, OUT purged bigint)
RETURNS SETOF record
LANGUAGE c VOLATILE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'pgclaim_worker_status';

REVOKE EXECUTE ON FUNCTION claim.worker_status() FROM PUBLIC;
