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

// What the slot of a queue holds at `now`.
struct Frontier {
    uint64 epoch;            // the queue's forget epoch (always set)
    bool valid;              // a position holds at `now`:
    ScanPos pos;             //   where a scan may start
    TimestampTz expires;     //   until when
    TimestampTz head_until;  //   until when the last walk from the head vouches for it
};
Frontier frontier_get(Oid items_relid, int32 queue_id, TimestampTz now);
// The queue's forget epoch: frontier_forget moves it. A scan reads it when
// it starts; positions it reached hold only while the epoch stays (the
// backends' own positions too: core/scan_hint.hpp).
//
// Publish a position reached by a scan that started under `epoch` (dropped
// when the epoch moved since); `expires` is capped at now + 5 s. A scan that
// walked from the head passes head_until > 0: its position replaces the
// current one, also an earlier one (items may have appeared before the
// frontier), and backends whose own walk from the head is due start at it
// until head_until instead. Any other scan's position is kept when it is
// further than the current one, or the current one expired.
void frontier_put(Oid items_relid, int32 queue_id, ScanPos pos, TimestampTz now,
                  TimestampTz expires, uint64 epoch, TimestampTz head_until);
// Items may have appeared before the frontier (released, redriven,
// promoted, a claim rolled back): drop it and move the epoch, so no scan
// that was under way publishes a position past them and every backend's
// own position of the queue is dropped too.
void frontier_forget(Oid items_relid, int32 queue_id);
// An item of order `ord` (-priority) would lie before a position some scan
// of the queue reached under the current epoch: an enqueue of it forgets
// the queue's positions when it commits, so that the next scans start at
// the head and find it first.
bool frontier_behind(Oid items_relid, int32 queue_id, int32 ord);
// The same for every queue (a transaction that claimed from more queues
// than it keeps track of rolled back).
void frontier_forget_all();

}  // namespace pgclaim::shmem
