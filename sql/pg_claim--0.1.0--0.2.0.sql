-- pg_claim 0.1.0 -> 0.2.0.
--
-- A fresh CREATE EXTENSION pg_claim runs pg_claim--0.1.0.sql and then this
-- script, so an installed 0.2.0 is the same whichever way it was reached.
-- Security, as in the install script: every object is schema-qualified,
-- functions pin search_path (the hot-path functions pin it around the SQL
-- they run instead), nothing uses CREATE OR REPLACE on an object a user
-- could have created, and admin functions are revoked from PUBLIC.

\echo Use "ALTER EXTENSION pg_claim UPDATE TO '0.2.0'" to load this file. \quit

-- ---------------------------------------------------------------------------
-- Removed: claim._lock_item. It had no caller, and being executable by
-- PUBLIC it let any role with USAGE on the schema take item locks that
-- complete() then waited on. The library keeps the symbol, which raises
-- feature_not_supported, for a 0.1.0 catalog not yet updated.
-- ---------------------------------------------------------------------------
DROP FUNCTION claim._lock_item(bigint);
