-- pg_claim 0.1.0: named leases, counting semaphores and once-only guards.
-- Part of the install script (see 00_core.sql). README: docs/leases.md.

-- ---------------------------------------------------------------------------
-- Leases
-- ---------------------------------------------------------------------------

-- One row per slot of a named lease that has been granted (slot 0 .. permits-1).
-- A slot is held while expires_at is in the future (server clock); an expired
-- row is overwritten by the next grant, a released one is deleted. Logged:
-- leases survive a crash and a restart, and tokens keep growing across both
-- (they come from claim.token_seq, flushed before a token leaves the server).
-- Grants update rows in place (HOT), hence the fillfactor.
CREATE TABLE claim.lease_holders (
    name         text NOT NULL,
    slot         integer NOT NULL,
    token        bigint NOT NULL,
    holder       text,
    permits      integer NOT NULL,
    acquired_at  timestamptz NOT NULL,
    expires_at   timestamptz NOT NULL,
    PRIMARY KEY (name, slot),
    CONSTRAINT lease_holders_slot_check CHECK (slot >= 0 AND slot < permits)
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

-- Live holders only.
CREATE VIEW claim.leases AS
SELECT h.name, h.token, h.holder, h.acquired_at, h.expires_at, h.permits
FROM claim.lease_holders h
WHERE h.expires_at > pg_catalog.clock_timestamp();

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
