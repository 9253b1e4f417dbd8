// Transaction-scoped exclusive locks on items and lease slots, held in a
// partitioned hash table of pg_claim's own in shared memory instead of
// PostgreSQL's lock table (docs/claim-core.md).
//
// What a lock means is what a heavyweight transaction lock means: one holder
// at a time; re-entrant within a transaction (every lock counts, every
// unlock gives one back); released when the transaction commits or aborts,
// and when the subtransaction that took it rolls back; kept by a prepared
// transaction until COMMIT PREPARED or ROLLBACK PREPARED (and freed then),
// at no cost in PostgreSQL's lock table. After a restart a prepared
// transaction's items are kept by their rows: claimers pass over an item
// whose row an open transaction deletes or updates. Claimers only try a lock; everyone else waits for it: first
// briefly on a condition variable that every release wakes, then on the
// holder's transaction, where PostgreSQL's deadlock detector sees the wait.
//
// A held lock costs one entry of the table (pg_claim.max_xact_locks, one
// per locked item or lease slot, for all databases together) and no entry
// of PostgreSQL's lock table. When the table is full, taking one more raises
// 53400 (configuration_limit_exceeded) with a hint; the caller's transaction
// then aborts, so nothing is half-claimed.
//
// Without shared_preload_libraries there is no table: the same calls take
// heavyweight advisory locks in a field4 space that pg_advisory_* never uses.
#pragma once

#include "pg/pg.hpp"

namespace pgclaim::pg {

// What a lock is on.
enum class LockSpace : uint16 { Item = 0x5043, LeaseSlot = 0x5046 };

extern int guc_max_xact_locks;

// Shared memory (called by shmem/services.cpp from the preload's hooks).
Size xact_locks_shmem_size();
void xact_locks_shmem_request();
void xact_locks_shmem_init();

// Takes the lock on `key` in `space` for this transaction. wait=false: false
// when another transaction holds it. wait=true: returns true once granted.
// `tag`: a small fact about the key that the taker knows and others may read
// while the lock is held (xact_lock_busy_tag); kept by the entry this call
// creates, 0 for a prepared transaction's locks.
bool xact_lock(LockSpace space, uint64 key, bool wait, uint8 tag = 0);
// Gives back one hold of a lock this transaction took.
void xact_unlock(LockSpace space, uint64 key);
// Whether another open transaction holds the lock on `key` now: a look
// under the partition's lock in shared mode, taking nothing. False for a
// lock this transaction holds, for one held by a prepared transaction (the
// caller's try of the lock finds out), and without the preload.
bool xact_lock_busy(LockSpace space, uint64 key);
// The same look, also returning the holder's tag: -1 when not busy (as
// xact_lock_busy says), the tag otherwise.
int xact_lock_busy_tag(LockSpace space, uint64 key);

// The end of a transaction and of a subtransaction, called by the module's
// one pair of transaction callbacks (src/module.cpp, registered from
// _PG_init, so that every backend, also one that only runs COMMIT PREPARED,
// frees what prepared transactions held when they end). COMMIT and ABORT
// give back this transaction's locks and sweep those of prepared
// transactions that ended; PREPARE hands the locks to the prepared
// transaction; a subtransaction's abort gives back its locks, its commit
// hands them to its parent.
void xact_locks_at_xact_end(XactEvent event);
void xact_locks_at_subxact_end(SubXactEvent event);

// Whether a transaction prepared before the last start of the server is
// still open: which items it holds is then known from its rows only
// (claimers also look for claim rows that open transactions inserted).
bool xact_locks_prepared_unknown();

// Whether the locks live in shared memory (false without the preload).
bool xact_locks_in_shmem();
// How many locks this transaction holds now (with the preload).
int64 xact_locks_held();
// How many entries the table holds, all backends together.
int64 xact_locks_in_use();

}  // namespace pgclaim::pg
