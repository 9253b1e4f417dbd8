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

-- ===========================================================================
-- Moving with logical replication (docs/operations.md, "Moving with logical
-- replication")
-- ===========================================================================
-- Logical replication copies tables, not sequences. A subscriber's copy of
-- pg_claim's tables therefore keeps its sequences ahead of the copied rows
-- as they arrive: the trigger claim._follow_copy, ENABLE REPLICA (it fires
-- only for rows applied by a subscription, or by a session that sets
-- session_replication_role = replica, never for the source's own writes),
-- moves item, queue, schedule and fair-key ids past the highest copied, and
-- claim.token_seq 2^32 past every copied token. Its arguments are (column,
-- sequence of schema claim) pairs.

-- The durable token ceiling of each server that wrote into this table (the
-- database's worker, when wal_level is logical): no token that server handed
-- out, claims' tokens included, exceeds it. A subscription copies it, and
-- the subscriber's tokens go on 2^32 past it. source: the server's system
-- identifier and the database's oid.
CREATE TABLE claim.token_marks (
    source     text COLLATE "C" PRIMARY KEY,
    ceiling    bigint NOT NULL,
    marked_at  timestamptz NOT NULL
);
REVOKE ALL ON claim.token_marks FROM PUBLIC;
GRANT SELECT ON claim.token_marks TO claim_worker;
GRANT SELECT, INSERT, UPDATE, DELETE, TRUNCATE ON claim.token_marks TO claim_admin;
SELECT pg_catalog.pg_extension_config_dump('claim.token_marks', '');

CREATE FUNCTION claim._follow_copy()
RETURNS trigger
LANGUAGE c VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'pgclaim_follow_copy';
REVOKE EXECUTE ON FUNCTION claim._follow_copy() FROM PUBLIC;

CREATE TRIGGER follow_copy BEFORE INSERT ON claim.items
    FOR EACH ROW EXECUTE FUNCTION claim._follow_copy('id', 'item_id_seq');
ALTER TABLE claim.items ENABLE REPLICA TRIGGER follow_copy;
CREATE TRIGGER follow_copy BEFORE INSERT ON claim.item_parents
    FOR EACH ROW EXECUTE FUNCTION claim._follow_copy('parent_id', 'item_id_seq', 'child_id', 'item_id_seq');
ALTER TABLE claim.item_parents ENABLE REPLICA TRIGGER follow_copy;
-- The partitions of claim.finished (a subscription applies rows to them).
CREATE TRIGGER follow_copy BEFORE INSERT ON claim.finished_0
    FOR EACH ROW EXECUTE FUNCTION claim._follow_copy('id', 'item_id_seq');
ALTER TABLE claim.finished_0 ENABLE REPLICA TRIGGER follow_copy;
CREATE TRIGGER follow_copy BEFORE INSERT ON claim.finished_1
    FOR EACH ROW EXECUTE FUNCTION claim._follow_copy('id', 'item_id_seq');
ALTER TABLE claim.finished_1 ENABLE REPLICA TRIGGER follow_copy;
CREATE TRIGGER follow_copy BEFORE INSERT ON claim.finished_2
    FOR EACH ROW EXECUTE FUNCTION claim._follow_copy('id', 'item_id_seq');
ALTER TABLE claim.finished_2 ENABLE REPLICA TRIGGER follow_copy;
CREATE TRIGGER follow_copy BEFORE INSERT ON claim.finished_3
    FOR EACH ROW EXECUTE FUNCTION claim._follow_copy('id', 'item_id_seq');
ALTER TABLE claim.finished_3 ENABLE REPLICA TRIGGER follow_copy;
CREATE TRIGGER follow_copy BEFORE INSERT ON claim.queues
    FOR EACH ROW EXECUTE FUNCTION claim._follow_copy('queue_id', 'queues_queue_id_seq');
ALTER TABLE claim.queues ENABLE REPLICA TRIGGER follow_copy;
CREATE TRIGGER follow_copy BEFORE INSERT OR UPDATE ON claim.schedule_defs
    FOR EACH ROW EXECUTE FUNCTION claim._follow_copy('schedule_id', 'schedule_defs_schedule_id_seq',
                                                     'last_item', 'item_id_seq');
ALTER TABLE claim.schedule_defs ENABLE REPLICA TRIGGER follow_copy;
CREATE TRIGGER follow_copy BEFORE INSERT ON claim.fair_keys
    FOR EACH ROW EXECUTE FUNCTION claim._follow_copy('key_id', 'fair_key_seq');
ALTER TABLE claim.fair_keys ENABLE REPLICA TRIGGER follow_copy;
CREATE TRIGGER follow_copy BEFORE INSERT OR UPDATE ON claim.lease_holders
    FOR EACH ROW EXECUTE FUNCTION claim._follow_copy('token', 'token_seq');
ALTER TABLE claim.lease_holders ENABLE REPLICA TRIGGER follow_copy;
CREATE TRIGGER follow_copy BEFORE INSERT OR UPDATE ON claim.guards
    FOR EACH ROW EXECUTE FUNCTION claim._follow_copy('token', 'token_seq');
ALTER TABLE claim.guards ENABLE REPLICA TRIGGER follow_copy;
CREATE TRIGGER follow_copy BEFORE INSERT OR UPDATE ON claim.token_marks
    FOR EACH ROW EXECUTE FUNCTION claim._follow_copy('ceiling', 'token_seq');
ALTER TABLE claim.token_marks ENABLE REPLICA TRIGGER follow_copy;
