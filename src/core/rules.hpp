// Pure layer: never includes postgres.h.
//
// Argument rules shared by every SQL surface: names, intervals, counts and
// the retry backoff. Each check throws pgclaim::Error with its SQLSTATE.
#pragma once

#include <cstdint>
#include <string_view>

namespace pgclaim {

// Limits (documented in docs/queues.md, "Limits").
inline constexpr int kMaxQueueNameBytes = 63;
inline constexpr int kMaxClaimBatch = 10000;            // claim_next n
inline constexpr int kMaxGroupClaim = 100000;           // group_claim max_items
inline constexpr int kMaxAttemptsLimit = 1000000;
inline constexpr int kMaxActiveLimit = 1000000000;     // max_active, group_limit, rate
inline constexpr int64_t kUsecPerSec = 1000000;
inline constexpr int64_t kMaxLeaseUs = 7 * 24 * 3600 * kUsecPerSec;  // 7 days
inline constexpr int64_t kMaxDelayUs = 366 * 24 * 3600 * kUsecPerSec; // backoff / retry_in
inline constexpr int64_t kMaxWaitUs = 3600 * kUsecPerSec;            // 1 hour
inline constexpr int64_t kMaxRetainUs = 3650LL * 24 * 3600 * kUsecPerSec;  // retain: 10 years
inline constexpr int64_t kMaxBackoffUs = 24 * 3600 * kUsecPerSec;    // cap of the growing backoff

// Queue names follow identifier rules: 1-63 bytes, first character a letter
// or underscore, the rest letters, digits, underscores or dollar signs.
// Letters are ASCII here, so names stay portable across encodings.
void check_queue_name(std::string_view name);

// A duration given as an interval, already reduced to microseconds by the
// server layer. `what` names the argument in messages ("lease", "backoff").
// Requires 0 < us <= max_us.
void check_positive_duration(const char *what, int64_t us, int64_t max_us);
// Requires 0 <= us <= max_us.
void check_nonnegative_duration(const char *what, int64_t us, int64_t max_us);

void check_range(const char *what, int64_t value, int64_t lo, int64_t hi);

// Delay before a failed item is ready again when the caller gives no
// retry_in: base * 2^(attempt-1), capped at kMaxBackoffUs (and never below
// base). attempt counts deliveries and is >= 1.
int64_t backoff_delay_us(int64_t base_us, int attempt) noexcept;

}  // namespace pgclaim
