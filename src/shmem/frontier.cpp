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

bool frontier_get(Oid items, int32 queue_id, TimestampTz now, ScanPos *pos,
                  TimestampTz *expires) {
    if (shared == nullptr || !OidIsValid(items)) return false;
    FrontierSlot *s = slot_of(items, queue_id);
    bool ok = false;
    SpinLockAcquire(&s->mutex);
    if (mine(s, items, queue_id) && now < s->expires) {
        *pos = ScanPos{s->ord, s->id};
        *expires = s->expires;
        ok = true;
    }
    SpinLockRelease(&s->mutex);
    return ok;
}

void frontier_put(Oid items, int32 queue_id, ScanPos pos, TimestampTz now, TimestampTz expires) {
    if (shared == nullptr || !OidIsValid(items)) return;
    if (expires > now + kMaxAheadUs) expires = now + kMaxAheadUs;
    if (expires <= now) return;
    FrontierSlot *s = slot_of(items, queue_id);
    SpinLockAcquire(&s->mutex);
    if (!mine(s, items, queue_id) || now >= s->expires || after(pos, s->ord, s->id)) {
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
    SpinLockRelease(&s->mutex);
}

}  // namespace pgclaim::shmem
