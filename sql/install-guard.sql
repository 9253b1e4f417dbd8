-- First statement of the 0.2.0 install script (sql/pg_claim--0.2.0.sql is
-- built from this file, the 0.1.0 script and the update to 0.2.0).
--
-- CREATE EXTENSION uses an existing schema "claim" as it is. Refuse one
-- that someone else could control: owned by another role, open to other
-- roles' CREATE, or already holding objects (planted functions, operators,
-- tables or types would sit next to the extension's and could shadow or
-- replace them).
DO $pg_claim_install_guard$
DECLARE
    nsp pg_catalog.oid;
    owner pg_catalog.name;
BEGIN
    SELECT n.oid, pg_catalog.pg_get_userbyid(n.nspowner) INTO nsp, owner
    FROM pg_catalog.pg_namespace n WHERE n.nspname OPERATOR(pg_catalog.=) 'claim';
    IF owner OPERATOR(pg_catalog.<>) CURRENT_USER THEN
        RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege',
            MESSAGE = pg_catalog.format('schema "claim" is owned by role %I, not by the installing role %I',
                                        owner, CURRENT_USER),
            HINT = 'Drop the schema (or make the installing role its owner) and run CREATE EXTENSION again.';
    END IF;
    IF EXISTS (SELECT FROM pg_catalog.pg_namespace n, pg_catalog.aclexplode(n.nspacl) a
               WHERE n.oid OPERATOR(pg_catalog.=) nsp
                 AND a.privilege_type OPERATOR(pg_catalog.=) 'CREATE'
                 AND a.grantee OPERATOR(pg_catalog.<>) n.nspowner) THEN
        RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege',
            MESSAGE = 'other roles may create objects in schema "claim"',
            HINT = 'Revoke CREATE on schema claim from them, or drop the schema, and run CREATE EXTENSION again.';
    END IF;
    IF EXISTS (SELECT FROM pg_catalog.pg_class c WHERE c.relnamespace OPERATOR(pg_catalog.=) nsp)
       OR EXISTS (SELECT FROM pg_catalog.pg_proc p WHERE p.pronamespace OPERATOR(pg_catalog.=) nsp)
       OR EXISTS (SELECT FROM pg_catalog.pg_type t WHERE t.typnamespace OPERATOR(pg_catalog.=) nsp)
       OR EXISTS (SELECT FROM pg_catalog.pg_operator o WHERE o.oprnamespace OPERATOR(pg_catalog.=) nsp) THEN
        RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege',
            MESSAGE = 'schema "claim" already holds objects',
            HINT = 'Install pg_claim into an empty schema "claim": move those objects away or drop the schema.';
    END IF;
END
$pg_claim_install_guard$;
