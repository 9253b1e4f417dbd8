// Item and lease-slot locks over the transaction lock table: see
// item_locks.hpp.
#include "pg/item_locks.hpp"

#include "pg/xact_locks.hpp"

namespace pgclaim::pg {

bool lock_item(int64_t item_id, bool wait, bool ungrouped) {
    return xact_lock(LockSpace::Item, (uint64)item_id, wait, ungrouped ? 1 : 0);
}

void unlock_item(int64_t item_id) { xact_unlock(LockSpace::Item, (uint64)item_id); }

bool item_busy(int64_t item_id) { return xact_lock_busy(LockSpace::Item, (uint64)item_id); }

bool item_busy_ungrouped(int64_t item_id) {
    return xact_lock_busy_tag(LockSpace::Item, (uint64)item_id) == 1;
}

bool lock_lease(uint64 key, bool wait) { return xact_lock(LockSpace::LeaseSlot, key, wait); }

void unlock_lease(uint64 key) { xact_unlock(LockSpace::LeaseSlot, key); }

}  // namespace pgclaim::pg
