// The registry of databases in shared memory (Shared::dbs): which databases
// the launcher knows, the state of their workers, the pauses that DROP
// DATABASE and friends ask for, and the pokes that wake the launcher or a
// database's worker. The *_locked functions expect the caller to hold
// shared->lock.
#pragma once

#include "shmem/shared.hpp"

namespace pgclaim::shmem {

int find_db_slot_locked(Oid db);            // -1 when absent
int add_db_slot_locked(Oid db, TimestampTz now);  // -1 when full
DbSlot *my_db_slot();                       // racy lookup, may be NULL; no raise
// Keep the worker away from `db` for a while and wait (at most 5 s) until
// it has left. Returns whether anything was paused.
bool pause_database(Oid db);
void unpause_database(Oid db);  // no raise
// Wake the launcher: it re-reads pg_database and probes this database for
// the extension again. No raise.
void poke_launcher();

// At the commit of the current transaction: wake the launcher (it looks for
// the extension again) and/or this database's worker (it re-checks).
void at_commit_poke(bool launcher, bool worker);
// For the module's transaction callbacks (src/module.cpp): the pokes asked for,
// at COMMIT (else dropped). No raise.
void pokes_at_xact_end(bool commit);

// Asks this database's worker for a round with duties (promotion of due
// items) at `at`, when that is before the round it planned: an item was
// scheduled for then (durable sleeps, docs/steps.md). At once, not at
// commit: a round that finds nothing due costs one round. No raise.
void request_duties_at(TimestampTz at);
// For the worker: the earliest time asked for since it last looked (0: none).
TimestampTz take_duties_at(DbSlot *slot);

}  // namespace pgclaim::shmem
