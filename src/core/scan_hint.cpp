// Pure layer: never includes postgres.h.
#include "core/scan_hint.hpp"

#include <algorithm>

namespace pgclaim {

int64_t ScanHints::validity_us(int64_t walk_us) {
    int64_t v = walk_us > kMaxValidUs ? kMaxValidUs : walk_us * kCostFactor;
    return std::clamp<int64_t>(v, kMinValidUs, kMaxValidUs);
}

std::optional<ScanPos> ScanHints::start(int32_t queue_id, int64_t now_us,
                                        int64_t *expires_us, uint64_t epoch) const {
    auto it = hints_.find(queue_id);
    if (it == hints_.end()) return std::nullopt;
    const Hint &h = it->second;
    if (h.epoch != epoch) return std::nullopt;
    if (now_us < h.head_walk_at_us) return std::nullopt;  // clock went back
    if (now_us - h.head_walk_at_us > validity_us(h.head_walk_cost_us)) return std::nullopt;
    if (now_us >= h.expires_us) return std::nullopt;
    if (expires_us != nullptr) *expires_us = h.expires_us;
    return h.pos;
}

void ScanHints::record(int32_t queue_id, bool from_head, std::optional<ScanPos> first,
                       int64_t walk_us, int64_t now_us, int64_t claims_end_us,
                       uint64_t epoch) {
    if (from_head) {
        if (!first) {
            hints_.erase(queue_id);  // empty queue: nothing to remember
            return;
        }
        hints_[queue_id] = Hint{*first, now_us, walk_us < 0 ? 0 : walk_us, claims_end_us, epoch};
        return;
    }
    auto it = hints_.find(queue_id);
    if (it == hints_.end()) return;
    if (it->second.epoch != epoch) {
        hints_.erase(it);  // forgotten while the scan ran
        return;
    }
    if (first) {
        // Moves forward only: the scan started at pos.
        it->second.pos = *first;
        if (claims_end_us < it->second.expires_us) it->second.expires_us = claims_end_us;
    }
}

}  // namespace pgclaim
