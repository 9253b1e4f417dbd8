-- pg_claim 0.1.0: named leases, counting semaphores and once-only guards.
-- Part of the install script (see 00_core.sql). README: docs/leases.md.

-- ---------------------------------------------------------------------------
-- Leases
-- ---------------------------------------------------------------------------

-- One row per slot of a named lease that has been granted (slot 0 .. permits-1).
-- A slot is held while expires_at is in the future (server clock) and its
-- token has not been released. The next grant of a free slot updates the row
-- in place: grants change no indexed column, so they are HOT updates (hence
-- the fillfactor). claim.lease_purge() deletes rows that nobody reused.
-- Logged: grants survive a crash and a restart, and tokens keep growing
-- across both (they come from claim.token_seq, flushed before a token leaves
-- the server).
CREATE TABLE claim.lease_holders (
    name         text NOT NULL,
    slot         integer NOT NULL,
    token        bigint NOT NULL,
    holder       text,
    permits      integer NOT NULL,
    acquired_at  timestamptz NOT NULL,
    expires_at   timestamptz NOT NULL,
    -- slot is in 0 .. permits-1 (the C code keeps it so; no CHECK constraint,
    -- whose expression every grant would have to load again)
    PRIMARY KEY (name, slot)
) WITH (fillfactor = 70);

CREATE FUNCTION claim.lease_acquire(name text,
                                    ttl interval,
                                    holder text DEFAULT NULL,
                                    permits integer DEFAULT 1,
                                    wait interval DEFAULT '0')
RETURNS bigint
LANGUAGE c VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'pgclaim_lease_acquire';

CREATE FUNCTION claim.lease_renew(name text, token bigint, ttl interval)
RETURNS timestamptz
LANGUAGE c VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'pgclaim_lease_renew';

CREATE FUNCTION claim.lease_release(name text, token bigint)
RETURNS boolean
LANGUAGE c VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'pgclaim_lease_release';

CREATE FUNCTION claim.lease_assert(name text, token bigint)
RETURNS void
LANGUAGE c VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'pgclaim_lease_assert';

-- Releases: the last released token of each slot. UNLOGGED, so a release
-- writes no WAL and its commit does not wait for a disk flush. After a crash
-- this table is empty: a lease released shortly before the crash counts as
-- held again until its ttl ends (the same as a holder that crashed). A
-- standby cannot read it.
CREATE UNLOGGED TABLE claim.lease_released (
    name   text NOT NULL,
    slot   integer NOT NULL,
    token  bigint NOT NULL,
    PRIMARY KEY (name, slot)
) WITH (fillfactor = 70);

-- Deletes the rows of leases released or expired more than `older_than` ago
-- (never a live holder); returns how many. For a maintenance job when lease
-- names are many and short-lived (for example one per customer).
CREATE FUNCTION claim.lease_purge(older_than interval DEFAULT '1 hour')
RETURNS bigint
LANGUAGE sql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
    WITH cutoff AS (
        SELECT LEAST(pg_catalog.clock_timestamp(),
                     pg_catalog.clock_timestamp() - older_than) AS t
    ), d AS (
        DELETE FROM claim.lease_holders h USING cutoff
        WHERE h.expires_at < cutoff.t
           OR (h.acquired_at < cutoff.t AND EXISTS (
                SELECT 1 FROM claim.lease_released r
                WHERE r.name = h.name AND r.slot = h.slot AND r.token = h.token))
        RETURNING h.name, h.slot
    ), r AS (
        DELETE FROM claim.lease_released r USING d
        WHERE r.name = d.name AND r.slot = d.slot
    )
    SELECT pg_catalog.count(*) FROM d
$$;

-- Live holders only.
CREATE VIEW claim.leases AS
SELECT h.name, h.token, h.holder, h.acquired_at, h.expires_at, h.permits
FROM claim.lease_holders h
WHERE h.expires_at > pg_catalog.clock_timestamp()
  AND NOT EXISTS (SELECT 1 FROM claim.lease_released r
                  WHERE r.name = h.name AND r.slot = h.slot AND r.token = h.token);

-- ---------------------------------------------------------------------------
-- Guards
-- ---------------------------------------------------------------------------

-- claim.once: one row per key taken. expires_at NULL means taken for good.
CREATE TABLE claim.once_keys (
    key         text PRIMARY KEY,
    taken_at    timestamptz NOT NULL,
    expires_at  timestamptz
);

-- The guard ledger: one row per key.
--   state 'r': an attempt is running under `token` until lease_until; once
--              that passes the key is free for a new attempt (the old token
--              may still finish or abandon until a new attempt begins);
--   state 'f': finished for good with `result`;
--   state 'a': abandoned; the key is free for a new attempt.
CREATE TABLE claim.guards (
    key          text PRIMARY KEY,
    token        bigint NOT NULL,
    state        "char" NOT NULL,
    attempts     integer NOT NULL,
    started_at   timestamptz NOT NULL,
    lease_until  timestamptz NOT NULL,
    finished_at  timestamptz,
    result       jsonb,
    CONSTRAINT guards_state_check CHECK (state IN ('r', 'f', 'a'))
);

CREATE FUNCTION claim.once(key text, ttl interval DEFAULT NULL)
RETURNS boolean
LANGUAGE c VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'pgclaim_once';

CREATE FUNCTION claim.guard_begin(key text, lease interval)
RETURNS bigint
LANGUAGE c VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'pgclaim_guard_begin';

CREATE FUNCTION claim.guard_finish(key text, token bigint, result jsonb DEFAULT NULL)
RETURNS void
LANGUAGE c VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'pgclaim_guard_finish';

CREATE FUNCTION claim.guard_abandon(key text, token bigint)
RETURNS void
LANGUAGE c VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'pgclaim_guard_abandon';

-- The recorded result of a finished key: SQL NULL while the key is not
-- finished, JSON null when it finished without a result. VOLATILE: it reads
-- the latest committed state, not the statement's snapshot.
CREATE FUNCTION claim.guard_result(key text)
RETURNS jsonb
LANGUAGE c VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'pgclaim_guard_result';

-- Privileges (99_privileges.sql revokes table access from PUBLIC): the
-- maintenance function is for the extension owner and whom it grants it to.
REVOKE EXECUTE ON FUNCTION claim.lease_purge(interval) FROM PUBLIC;
