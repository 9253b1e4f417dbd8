// Helpers shared by the SQL surfaces in src/api.
#pragma once

#include "core/rules.hpp"
#include "pg/pg.hpp"

namespace pgclaim::api {

inline constexpr int kMaxKeyBytes = 1024;  // group_key, dedup_key

struct QueueInfo {
    int32 queue_id;
    int64_t lease_us;
    int32 max_attempts;
};

// Looks the queue up by name (SPI must be connected); 42704 if unknown.
QueueInfo lookup_queue(const char *name);
// The same through the backend's queue cache (core/queue_cache.hpp): for
// the hot path of workers.
QueueInfo lookup_queue_cached(const char *name);
void forget_queues();

// The backend's caches (queues, scan hints, promotion schedule) describe one
// installation of the extension: when claim.items is not the table they were
// filled from (DROP and CREATE EXTENSION reuse queue ids), they are cleared.
void sync_caches();
[[noreturn]] void unknown_queue(const char *name);

// Scan hints of this backend (see core/scan_hint.hpp).
void forget_hints(int32 queue_id);

// PC001 for a token that is not a live claim.
[[noreturn]] void stale_token(int64 token, const char *why);

}  // namespace pgclaim::api
