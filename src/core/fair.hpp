// Pure layer: never includes postgres.h.
//
// The fair-share scheduler of one queue (docs/fairness.md): stride
// scheduling over the queue's active fair keys. Every key has a weight
// (1 to kMaxFairWeight) and a pass; a pick hands the next claim to the
// active key with the lowest pass (ties: the lower key id) and advances its
// pass by kStrideOne / weight. The queue's virtual time is the lowest pass
// of its active keys, never decreasing. A key that becomes active starts at
// max(its own pass, the virtual time): an idle key saves no credit, and a
// key that went idle and comes back cannot gain by it.
//
// The table is plain data of a fixed capacity, so that it can live in
// shared memory (shmem/fair.cpp) or in a backend (without the preload).
// Keys that are not active keep their entry (and their pass) until the
// room is needed: then the inactive entry with the lowest pass goes.
#pragma once

#include <cstddef>
#include <cstdint>

namespace pgclaim {

inline constexpr int32_t kMaxFairWeight = 10000;
// A pass advances by kStrideOne / weight per claim (weight 1: kStrideOne).
inline constexpr int64_t kStrideOne = 1'000'000'000;
// The key of a fair queue's items that were enqueued without a fair_key.
inline constexpr int32_t kDefaultFairKey = 0;

struct FairKey {
    int32_t key_id;
    int32_t weight;  // 1 .. kMaxFairWeight
    int64_t pass;
    uint8_t active;
    uint8_t pad[7];
};

struct FairTable {
    int64_t vtime;     // the lowest pass of the active keys (never decreasing)
    int32_t nkeys;     // entries in use (active or not)
    int32_t nactive;   // active entries
    int32_t capacity;  // entries the table has room for
    int32_t pad;
    FairKey keys[1];   // capacity entries
};

// Bytes of a table with room for `capacity` keys.
inline size_t fair_table_size(int32_t capacity) {
    return offsetof(FairTable, keys) + sizeof(FairKey) * (size_t)(capacity > 0 ? capacity : 1);
}

// An empty table (virtual time 0).
void fair_init(FairTable *t, int32_t capacity);

// The stride of a weight (weights outside 1 .. kMaxFairWeight are clamped).
int64_t fair_stride(int32_t weight);

// Marks the key active (weight > 0 also sets its weight; 0 keeps the one
// it has, 1 for a new entry). False when the table is full of active keys:
// the key is not scheduled until room frees up.
bool fair_activate(FairTable *t, int32_t key_id, int32_t weight);

// The key's walk found nothing to claim: it leaves the active set (its
// entry and pass stay while there is room).
void fair_deactivate(FairTable *t, int32_t key_id);

// Sets the weight of a key (an entry is made, inactive, for a key not in
// the table; false when there is no room for it).
bool fair_set_weight(FairTable *t, int32_t key_id, int32_t weight);

// Every key back to weight 1 (before the weights are loaded again).
void fair_reset_weights(FairTable *t);

// Hands out up to `n` claims, one at a time, to the active keys: out[i] is
// the key of the i-th claim. Returns how many were handed out (0 when no
// key is active). Passes never overflow: past 2^62 of virtual time they
// all move down by it (the order of the keys stays).
int fair_pick(FairTable *t, int n, int32_t *out);

// The entry of a key, or nullptr.
const FairKey *fair_find(const FairTable *t, int32_t key_id);

}  // namespace pgclaim
