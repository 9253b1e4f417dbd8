// The fair-share scheduler of one queue; see fair.hpp.
#include "core/fair.hpp"

#include <cstring>

namespace pgclaim {

namespace {

FairKey *find(FairTable *t, int32_t key_id) {
    for (int32_t i = 0; i < t->nkeys; ++i)
        if (t->keys[i].key_id == key_id) return &t->keys[i];
    return nullptr;
}

int32_t clamp_weight(int32_t w) {
    if (w < 1) return 1;
    if (w > kMaxFairWeight) return kMaxFairWeight;
    return w;
}

// A new entry for the key: a free one, or the inactive entry with the
// lowest pass. nullptr when every entry holds an active key.
FairKey *make_entry(FairTable *t, int32_t key_id) {
    FairKey *e = nullptr;
    if (t->nkeys < t->capacity) {
        e = &t->keys[t->nkeys++];
    } else {
        for (int32_t i = 0; i < t->nkeys; ++i) {
            FairKey *k = &t->keys[i];
            if (!k->active && (e == nullptr || k->pass < e->pass)) e = k;
        }
        if (e == nullptr) return nullptr;
    }
    std::memset(e, 0, sizeof(*e));
    e->key_id = key_id;
    e->weight = 1;
    e->pass = t->vtime;
    return e;
}

}  // namespace

void fair_init(FairTable *t, int32_t capacity) {
    t->vtime = 0;
    t->nkeys = 0;
    t->nactive = 0;
    t->capacity = capacity;
    t->pad = 0;
}

int64_t fair_stride(int32_t weight) { return kStrideOne / clamp_weight(weight); }

bool fair_activate(FairTable *t, int32_t key_id, int32_t weight) {
    FairKey *e = find(t, key_id);
    if (e == nullptr) {
        e = make_entry(t, key_id);
        if (e == nullptr) return false;
    }
    if (weight > 0) e->weight = clamp_weight(weight);
    if (!e->active) {
        e->active = 1;
        ++t->nactive;
        if (e->pass < t->vtime) e->pass = t->vtime;
    }
    return true;
}

void fair_deactivate(FairTable *t, int32_t key_id) {
    FairKey *e = find(t, key_id);
    if (e == nullptr || !e->active) return;
    e->active = 0;
    --t->nactive;
}

bool fair_set_weight(FairTable *t, int32_t key_id, int32_t weight) {
    FairKey *e = find(t, key_id);
    if (e == nullptr) e = make_entry(t, key_id);
    if (e == nullptr) return false;
    e->weight = clamp_weight(weight);
    return true;
}

void fair_reset_weights(FairTable *t) {
    for (int32_t i = 0; i < t->nkeys; ++i) t->keys[i].weight = 1;
}

namespace {
// Passes only matter relative to each other: before they could overflow
// (a weight-1 key would after about 9.2e9 picks), every pass and the
// virtual time move down by the virtual time. An inactive key whose pass
// falls below 0 starts at 0, which is below any active key's pass: it is
// raised to the virtual time when it comes back, as before.
constexpr int64_t kRebaseAt = INT64_C(1) << 62;

void rebase(FairTable *t) {
    int64_t base = t->vtime;
    for (int32_t i = 0; i < t->nkeys; ++i) {
        FairKey *k = &t->keys[i];
        k->pass = k->pass > base ? k->pass - base : 0;
    }
    t->vtime = 0;
}
}  // namespace

int fair_pick(FairTable *t, int n, int32_t *out) {
    if (t->vtime >= kRebaseAt) rebase(t);
    int picked = 0;
    while (picked < n && t->nactive > 0) {
        FairKey *best = nullptr;
        for (int32_t i = 0; i < t->nkeys; ++i) {
            FairKey *k = &t->keys[i];
            if (!k->active) continue;
            if (best == nullptr || k->pass < best->pass ||
                (k->pass == best->pass && k->key_id < best->key_id))
                best = k;
        }
        if (best->pass > t->vtime) t->vtime = best->pass;
        out[picked++] = best->key_id;
        best->pass += fair_stride(best->weight);
    }
    return picked;
}

const FairKey *fair_find(const FairTable *t, int32_t key_id) {
    for (int32_t i = 0; i < t->nkeys; ++i)
        if (t->keys[i].key_id == key_id) return &t->keys[i];
    return nullptr;
}

}  // namespace pgclaim
