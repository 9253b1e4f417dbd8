// The fair-share schedulers of fair queues (core/fair.hpp) in shared memory:
// kFairQueues tables, one per (database, installation, queue) in use, each
// with room for kFairKeysPerQueue keys and its own LWLock. A queue that
// finds no free table takes the one used least recently (that queue's
// state is rebuilt from the index when it claims again). Without the
// preload every backend keeps tables of its own.
//
// The state is advisory: it decides which key a claim looks at first,
// never whether an item may be claimed (the item locks decide that).
#pragma once

#include "core/fair.hpp"
#include "pg/pg.hpp"

namespace pgclaim::shmem {

inline constexpr int kFairQueues = 16;
inline constexpr int kFairKeysPerQueue = 2048;
// A claimer looks for keys with ready items that the table does not hold
// active (items made ready by paths that do not tell the scheduler: leases
// that expired, failed items retried, promoted or released ones) at most
// this often per queue.
inline constexpr int64 kFairDiscoverUs = 250 * 1000;

Size fair_shmem_size();
void fair_shmem_request();
void fair_shmem_init();

// Makes sure the tables exist (allocated once without the preload), so
// that the calls at commit allocate nothing.
void fair_prepare();

// What a claim round must do before it picks (api/fair.cpp):
//   weights:  load the queue's weights (a new table, or queue settings
//             changed since: `epoch` is shmem::queue_changes());
//   discover: look for keys with ready items (no key active, or the last
//             look is older than kFairDiscoverUs; the caller takes the duty).
struct FairDuties {
    bool weights;
    bool discover;
};
FairDuties fair_begin(Oid install, int32 queue_id, uint64 epoch, TimestampTz now);
// Sets the weights: every key of the table back to 1, then these.
void fair_load_weights(Oid install, int32 queue_id, uint64 epoch, const int32 *keys,
                       const int32 *weights, int n);
// Marks keys active (weight 0: the key keeps its weight). Every call takes
// the next number of one counter (fair_activations) and, when `stamp`, marks
// the keys with it (not for keys found ready in the caller's own snapshot).
void fair_activate(Oid install, int32 queue_id, const int32 *keys, int n, bool stamp = true);
// The number the last activation took. A claim reads it before it takes its
// snapshot: a key stamped with a higher number was activated by a commit
// (or a look) that the snapshot may not see.
uint64 fair_activations();
// Up to n picks (core/fair.hpp); returns how many.
int fair_pick(Oid install, int32 queue_id, int n, int32 *out);
// The key's walk found nothing: it leaves the active set, unless it was
// activated after `seen` (fair_activations read before the walk's snapshot),
// since its new items are not in that snapshot. True when it left.
bool fair_deactivate(Oid install, int32 queue_id, int32 key_id, uint64 seen);
void fair_set_weight(Oid install, int32 queue_id, int32 key_id, int32 weight);
// Counts claims handed to the key (fair_stats: the last minute, in
// 10-second steps).
void fair_handed(Oid install, int32 queue_id, int32 key_id, int n, TimestampTz now);
// The queue's table is forgotten (drop_queue).
void fair_forget(Oid install, int32 queue_id);

struct FairKeyState {
    int32 queue_id;
    int32 key_id;
    bool active;
    int64 handed_last_minute;
};
// Every key of this database's tables; returns the count, *out palloc'd.
int fair_snapshot(Oid install, TimestampTz now, FairKeyState **out);

}  // namespace pgclaim::shmem
