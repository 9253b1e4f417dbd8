// Barriers of the coordination service (claim.barrier, docs/coordination.md):
// a fixed table in shared memory, cluster-wide. An arrival must be seen by
// the other parties before the arriving transaction ends, so arrivals are
// not transactional: they live here, not in a table. A party leaves (its
// arrival is withdrawn) when its wait times out, is cancelled, or its
// backend exits.
//
// None of these functions raises.
#pragma once

#include "pg/pg.hpp"

namespace pgclaim::shmem {

// Barriers that may have parties waiting at once, in all databases.
inline constexpr int kBarrierSlots = 1024;

Size barriers_shmem_size();
void barriers_shmem_init();

enum class Arrival : int {
    Waiting = 0,     // arrived; the barrier is not open yet
    Opened = 1,      // this arrival opened it (the last party)
    Mismatch = 2,    // others are waiting with another number of parties
    Full = 3,        // no slot free in the table
    NoShmem = 4,     // pg_claim is not preloaded
};

// Arrive at barrier (this database, `key`) of `parties`: *order is the
// arrival's order (1 = first), *generation the generation it waits for.
// The last arrival opens the generation (the next one starts empty) and
// wakes the waiters of (WaitKind::Coord, wake_key) at once.
Arrival barrier_arrive(int64 key, int parties, int64 wake_key, int *order, int64 *generation);
// Has `generation` of the barrier opened?
bool barrier_opened(int64 key, int64 generation);
// Withdraw this backend's arrival unless its generation opened; returns
// whether it had opened. Also done at backend exit.
bool barrier_leave(int64 key, int64 generation);

}  // namespace pgclaim::shmem
