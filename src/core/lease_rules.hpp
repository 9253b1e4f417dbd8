// Pure layer: never includes postgres.h.
//
// Rules of named leases, semaphores and guards (claim.lease_*, claim.once,
// claim.guard_*): argument limits and the choice of a free slot. Each check
// throws pgclaim::Error with its SQLSTATE.
#pragma once

#include <cstdint>
#include <string_view>

#include "core/rules.hpp"

namespace pgclaim {

// Limits (documented in docs/leases.md).
inline constexpr int kMaxLeaseNameBytes = 1024;   // lease names
inline constexpr int kMaxGuardKeyBytes = 1024;    // once / guard keys
inline constexpr int kMaxPermits = 1000;          // slots of one named lease
inline constexpr int64_t kMaxLeaseTtlUs = kMaxLeaseUs;                    // 7 days
inline constexpr int64_t kMaxOnceTtlUs = 366 * 24 * 3600 * kUsecPerSec;  // 366 days
inline constexpr int64_t kMaxLeaseWaitUs = kMaxWaitUs;                   // 1 hour

// Lease names: free text of 1 to kMaxLeaseNameBytes bytes (42602).
void check_lease_name(std::string_view name);
// once / guard keys: 1 to kMaxGuardKeyBytes bytes (22023).
void check_guard_key(std::string_view key);
// permits: 1 to kMaxPermits (22023).
void check_permits(int64_t permits);

// One stored holder row of a named lease, as the server layer read it.
// Times are microseconds on the server clock (PostgreSQL TimestampTz).
struct HolderRow {
    int32_t slot;
    int32_t permits;
    int64_t expires_at;
};

// What an acquirer can do with a lease right now.
struct SlotPlan {
    int32_t live;          // live holders (expires_at > now)
    int32_t nfree;         // free slots written to free_slots, lowest first
    int64_t next_expiry;   // earliest expiry of a live holder; INT64_MAX if none
};

// Works out the free slots (0 .. permits-1) of a lease from its holder rows:
// a slot is free when no row has it or its holder expired (expires_at <= now).
// free_slots must have room for `permits` entries. Throws PC002 when a live
// holder was granted under another permit count.
SlotPlan plan_slots(std::string_view name, int32_t permits, const HolderRow *rows, int nrows,
                    int64_t now, int32_t *free_slots);

// How long a waiting acquirer may sleep before it looks again: until the
// deadline, but no later than the next expiry of a live holder, and at most
// `poll_cap_us` when a slot looked free but was busy (locked by another
// transaction that may end without a wake-up). Returns microseconds >= 0.
int64_t next_wait_us(int64_t now, int64_t deadline, int64_t next_expiry, bool busy,
                     int64_t poll_cap_us) noexcept;

}  // namespace pgclaim
