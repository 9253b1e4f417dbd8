// Pure layer: never includes postgres.h.
//
// A backend's cache of queue definitions for the hot path (claim_next).
// Header-only.
// An entry is right until its queue is altered, paused, resumed or dropped.
// `epoch` counts the changes cluster-wide (alter_queue, pause, resume; 0
// when there is no such count): an entry made under another epoch is not
// used. Entries also live at most kTtlUs, so that a drop in another session
// is noticed within that time (until then, claims on the dropped queue find
// nothing), and so do changes without a count. A change in this session
// clears the cache.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

namespace pgclaim {

struct QueueDef {
    int32_t queue_id;
    int64_t lease_us;
    int32_t max_attempts;
    bool paused;
    int32_t max_active;   // live claims at most (0: no limit)
    int32_t group_limit;  // live claims per group key at most
    int32_t rate;         // claims per rate_per at most (0: no limit)
    int64_t rate_per_us;
    bool rate_per_group;  // the rate is per group key, not per queue
};

class QueueCache {
public:
    static constexpr int64_t kTtlUs = 1'000'000;
    static constexpr size_t kMaxEntries = 1024;

    std::optional<QueueDef> get(std::string_view name, int64_t now_us, uint64_t epoch = 0) const {
        auto it = map_.find(std::string(name));
        if (it == map_.end()) return std::nullopt;
        if (now_us < it->second.at_us || now_us - it->second.at_us >= kTtlUs) return std::nullopt;
        if (it->second.epoch != epoch) return std::nullopt;
        return it->second.def;
    }
    void put(std::string_view name, const QueueDef &def, int64_t now_us, uint64_t epoch = 0) {
        if (map_.size() >= kMaxEntries) map_.clear();
        map_[std::string(name)] = Entry{def, now_us, epoch};
    }
    void clear() { map_.clear(); }

private:
    struct Entry {
        QueueDef def;
        int64_t at_us;
        uint64_t epoch;
    };
    std::unordered_map<std::string, Entry> map_;
};

// A backend's cache of queue ids for producers (enqueue, trigger enqueue).
// An entry is right as long as no queue was dropped since it was made:
// `epoch` is the cluster-wide count of drops (see shmem::queue_drops), read
// after the producer locked claim.items against drop_queue. Epoch 0 means
// there is no such count (not preloaded): nothing is cached.
class ProducerQueues {
public:
    static constexpr size_t kMaxEntries = 1024;

    std::optional<int32_t> get(std::string_view name, uint64_t epoch) const {
        if (epoch == 0) return std::nullopt;
        auto it = map_.find(std::string(name));
        if (it == map_.end() || it->second.epoch != epoch) return std::nullopt;
        return it->second.queue_id;
    }
    void put(std::string_view name, int32_t queue_id, uint64_t epoch) {
        if (epoch == 0) return;
        if (map_.size() >= kMaxEntries) map_.clear();
        map_[std::string(name)] = Entry{queue_id, epoch};
    }
    void clear() { map_.clear(); }

private:
    struct Entry {
        int32_t queue_id;
        uint64_t epoch;
    };
    std::unordered_map<std::string, Entry> map_;
};

}  // namespace pgclaim
