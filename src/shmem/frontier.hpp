// Claim scan frontiers shared by all backends (only when preloaded).
//
// Each backend remembers where its last claim scan of a queue found the
// first item that was not under a live claim (core/scan_hint.hpp), and
// starts its next scan there. With many claimers that position lags: every
// claimer walks past the items the others claimed since its own last scan,
// probing each one's claim. The frontier is the furthest such position any
// backend has published, with the time until which it holds (the earliest
// lease end among the claims passed on the way, at most a few seconds
// ahead). A scan starts at the later of its own position and the frontier;
// it still starts at the head whenever its own position has expired, so
// late commits, released and higher-priority items are found as before.
//
// None of these functions raises; without the preload they do nothing.
#pragma once

#include "core/scan_hint.hpp"
#include "pg/pg.hpp"

namespace pgclaim::shmem {

// The frontier of the queue if one is valid at `now`.
bool frontier_get(Oid items_relid, int32 queue_id, TimestampTz now, ScanPos *pos,
                  TimestampTz *expires);
// Publish a position (kept when it is further than the current one, or the
// current one expired); `expires` is capped at now + 5 s.
void frontier_put(Oid items_relid, int32 queue_id, ScanPos pos, TimestampTz now,
                  TimestampTz expires);
// Items may have appeared before the frontier (released, redriven,
// promoted by this backend): drop it.
void frontier_forget(Oid items_relid, int32 queue_id);

}  // namespace pgclaim::shmem
