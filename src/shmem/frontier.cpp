// Shared claim scan frontiers; see frontier.hpp.
#include "shmem/frontier.hpp"

#include "shmem/shared.hpp"

extern "C" {
#include "common/hashfn.h"
}

namespace pgclaim::shmem {

namespace {

constexpr int64 kMaxAheadUs = 5 * USECS_PER_SEC;  // ScanHints::kMaxValidUs

FrontierSlot *slot_of(Oid items, int32 queue_id) {
    uint32 h = hash_combine(hash_uint32((uint32)MyDatabaseId),
                            hash_combine(hash_uint32((uint32)items), hash_uint32((uint32)queue_id)));
    return &shared->frontiers[h % kFrontierSlots];
}

bool mine(const FrontierSlot *s, Oid items, int32 queue_id) {
    return s->valid && s->db == MyDatabaseId && s->items == items && s->queue_id == queue_id;
}

bool after(ScanPos a, int32 ord, int64 id) { return a.ord > ord || (a.ord == ord && a.id > id); }

}  // namespace

Frontier frontier_get(Oid items, int32 queue_id, TimestampTz now) {
    Frontier f{};
    if (shared == nullptr || !OidIsValid(items)) return f;
    FrontierSlot *s = slot_of(items, queue_id);
    SpinLockAcquire(&s->mutex);
    f.epoch = s->epoch;
    if (mine(s, items, queue_id) && now < s->expires) {
        f.valid = true;
        f.pos = ScanPos{s->ord, s->id};
        f.expires = s->expires;
        f.head_until = s->head_until;
    }
    SpinLockRelease(&s->mutex);
    return f;
}

void frontier_put(Oid items, int32 queue_id, ScanPos pos, TimestampTz now, TimestampTz expires,
                  uint64 epoch, TimestampTz head_until) {
    if (shared == nullptr || !OidIsValid(items)) return;
    if (expires > now + kMaxAheadUs) expires = now + kMaxAheadUs;
    FrontierSlot *s = slot_of(items, queue_id);
    SpinLockAcquire(&s->mutex);
    // The scan's own position holds (core/scan_hint.hpp) even when this
    // one is not kept: counted either way.
    if (s->epoch == epoch && pos.ord > s->max_ord) s->max_ord = pos.ord;
    if (expires <= now) {
        SpinLockRelease(&s->mutex);
        return;
    }
    bool own = mine(s, items, queue_id);
    if (s->epoch == epoch &&
        (head_until > 0 || !own || now >= s->expires || after(pos, s->ord, s->id))) {
        if (head_until > 0)
            s->head_until = head_until;
        else if (!own)
            s->head_until = 0;  // no walk from the head vouches for it yet
        s->valid = true;
        s->db = MyDatabaseId;
        s->items = items;
        s->queue_id = queue_id;
        s->ord = pos.ord;
        s->id = pos.id;
        s->expires = expires;
    }
    SpinLockRelease(&s->mutex);
}

void frontier_forget(Oid items, int32 queue_id) {
    if (shared == nullptr || !OidIsValid(items)) return;
    FrontierSlot *s = slot_of(items, queue_id);
    SpinLockAcquire(&s->mutex);
    if (mine(s, items, queue_id)) s->valid = false;
    ++s->epoch;
    s->max_ord = PG_INT32_MIN;
    SpinLockRelease(&s->mutex);
}

bool frontier_behind(Oid items, int32 queue_id, int32 ord) {
    if (shared == nullptr || !OidIsValid(items)) return false;
    FrontierSlot *s = slot_of(items, queue_id);
    SpinLockAcquire(&s->mutex);
    bool behind = ord < s->max_ord;
    SpinLockRelease(&s->mutex);
    return behind;
}

void frontier_forget_all() {
    if (shared == nullptr) return;
    for (int i = 0; i < kFrontierSlots; ++i) {
        FrontierSlot *s = &shared->frontiers[i];
        SpinLockAcquire(&s->mutex);
        if (s->db == MyDatabaseId) s->valid = false;
        ++s->epoch;
        s->max_ord = PG_INT32_MIN;
        SpinLockRelease(&s->mutex);
    }
}

}  // namespace pgclaim::shmem
