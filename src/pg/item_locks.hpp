// Item and lease-slot locks as the callers see them: transaction-level
// exclusive locks, released at commit/abort and by a subtransaction's
// rollback, over pg/xact_locks.hpp (in shared memory with the preload,
// heavyweight advisory locks without it).
#pragma once

#include "pg/pg.hpp"

namespace pgclaim::pg {

// Lock an item: claimers try (skip when busy); everyone else waits.
// ungrouped: the caller knows the item has no group key (item_busy_ungrouped).
bool lock_item(int64_t item_id, bool wait, bool ungrouped = false);
void unlock_item(int64_t item_id);
// Another open transaction holds the item's lock now (pg/xact_locks.hpp:
// xact_lock_busy); takes nothing.
bool item_busy(int64_t item_id);
// Another open transaction holds the item's lock, and took it saying the
// item has no group key (a claimer's walk). Takes nothing.
bool item_busy_ungrouped(int64_t item_id);
// Lock a lease slot by a 64-bit key (a hash of name and slot): acquirers
// try (skip when busy), lease_assert waits and keeps it until the
// transaction ends.
bool lock_lease(uint64 key, bool wait);
void unlock_lease(uint64 key);

}  // namespace pgclaim::pg
