// Pure layer: never includes postgres.h.
//
// Where a claim scan starts (a "line in the sand").
//
// Completed items are deleted. While some transaction holds an old snapshot,
// their index entries cannot be removed or marked dead, so a scan that starts
// at the head of the queue walks all of them on every claim. Each backend
// therefore remembers, per queue, the position (ord, id) of the first item its
// last scan saw, and starts the next scan there.
//
// Every item before that position was finished (deleted or dead) or held
// under a live claim when it was seen. A claim passed over comes back when
// its lease ends: the position is valid only until the earliest such lease
// end. Items may also become visible before the position later: a producer
// that committed late, an enqueue with a higher priority, a redriven or
// promoted item. The paths that make such items ready move the queue's
// forget epoch when they commit (`epoch` below), which drops the positions
// at once; a producer that committed late is found when the position is
// forgotten after a validity period and the scan starts from the head again. The period adapts to what a walk from the head
// costs (200x that cost, between 20 ms and 5 s), so a cheap walk happens often
// and an expensive one stays below ~0.5% of a backend's time: every backend
// walks on its own, and a busy server has many more backends than cores.
#pragma once

#include <cstdint>
#include <optional>
#include <unordered_map>

namespace pgclaim {

struct ScanPos {
    int32_t ord;
    int64_t id;
    bool operator==(const ScanPos &o) const { return ord == o.ord && id == o.id; }
};

class ScanHints {
public:
    static constexpr int64_t kMinValidUs = 20'000;
    static constexpr int64_t kMaxValidUs = 5'000'000;
    static constexpr int64_t kCostFactor = 200;

    // The position to start from, or nothing to start at the head;
    // *expires_us (when given) is set to when that position stops holding.
    // `epoch` is the queue's forget epoch now (any backend that may have
    // made items ready behind positions moves it): a position recorded
    // under another epoch does not hold.
    std::optional<ScanPos> start(int32_t queue_id, int64_t now_us,
                                 int64_t *expires_us = nullptr, uint64_t epoch = 0) const;

    // After a scan: `from_head` tells where it started, `first` is the first
    // visible item it met that was not under a live claim (or the last one
    // it met, if all were), `walk_us` how long the first fetch took, and
    // `claims_end_us` the earliest lease end among the claimed items it
    // passed before `first` (INT64_MAX if none).
    // `epoch`: the queue's forget epoch when the scan started.
    void record(int32_t queue_id, bool from_head, std::optional<ScanPos> first, int64_t walk_us,
                int64_t now_us, int64_t claims_end_us = INT64_MAX, uint64_t epoch = 0);

    // Something may have appeared before the position (this backend redrove,
    // released or promoted items): next scan starts at the head.
    void forget(int32_t queue_id) { hints_.erase(queue_id); }
    void forget_all() { hints_.clear(); }

    static int64_t validity_us(int64_t walk_us);

private:
    struct Hint {
        ScanPos pos;
        int64_t head_walk_at_us;  // when the scan last started at the head
        int64_t head_walk_cost_us;
        int64_t expires_us;  // earliest lease end passed over
        uint64_t epoch;      // the queue's forget epoch it was recorded under
    };
    std::unordered_map<int32_t, Hint> hints_;
};

}  // namespace pgclaim

namespace pgclaim {

// When a backend next looks for scheduled items that are due (promotion),
// per queue: at the earliest known run_at, and at least every kRecheckUs
// (other sessions may schedule earlier items meanwhile; the background
// worker, when preloaded, promotes on time anyway).
class PromoteSchedule {
public:
    static constexpr int64_t kRecheckUs = 250'000;
    bool due(int32_t queue_id, int64_t now_us) const {
        auto it = next_.find(queue_id);
        return it == next_.end() || now_us >= it->second;
    }
    // After a check at now_us; earliest_us: the earliest run_at still
    // scheduled, if any.
    void checked(int32_t queue_id, int64_t now_us, std::optional<int64_t> earliest_us) {
        int64_t next = now_us + kRecheckUs;
        if (earliest_us && *earliest_us < next) next = *earliest_us;
        next_[queue_id] = next;
    }
    void forget_all() { next_.clear(); }

private:
    std::unordered_map<int32_t, int64_t> next_;
};

}  // namespace pgclaim
