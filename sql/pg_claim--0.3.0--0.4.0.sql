-- pg_claim 0.3.0 -> 0.4.0.
--
-- A fresh CREATE EXTENSION pg_claim runs pg_claim--0.1.0.sql and every update
-- script after it, this one last, so an installed 0.4.0 is the same whichever
-- way it was reached. Security, as in the earlier scripts: every object is
-- schema-qualified, functions pin search_path, nothing uses CREATE OR REPLACE
-- on an object a user could have created, and admin functions are revoked
-- from PUBLIC.
--
-- One section per subject, each headed by a banner; a section adds to the end
-- of this file.

\echo Use "ALTER EXTENSION pg_claim UPDATE TO '0.4.0'" to load this file. \quit

-- Refuse to update into a schema "claim" that another role owns or may
-- create objects in: what this script creates there could be shadowed or
-- replaced by them.
DO $pg_claim_update_guard$
BEGIN
    IF EXISTS (SELECT FROM pg_catalog.pg_namespace n
               WHERE n.nspname OPERATOR(pg_catalog.=) 'claim'
                 AND (pg_catalog.pg_get_userbyid(n.nspowner) OPERATOR(pg_catalog.<>) CURRENT_USER
                      OR EXISTS (SELECT FROM pg_catalog.aclexplode(n.nspacl) a
                                 WHERE a.privilege_type OPERATOR(pg_catalog.=) 'CREATE'
                                   AND a.grantee OPERATOR(pg_catalog.<>) n.nspowner))) THEN
        RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege',
            MESSAGE = 'schema "claim" is owned by another role, or other roles may create objects in it',
            HINT = 'Make the updating role the owner of schema claim and revoke CREATE on it from others, then update again.';
    END IF;
END
$pg_claim_update_guard$;
