// Pure layer: never includes postgres.h. Header-only (inline functions).
//
// Rate limits of queues (claim.create_queue(rate, rate_per)) as a generic
// cell rate algorithm: one timestamp per limited key, the "theoretical
// arrival time" (tat) of the next allowed claim. Claims are spaced `interval`
// apart on average (rate_per / rate), with a burst of `burst` claims allowed
// at once after an idle spell: in any window of length rate_per at most
// rate + burst - 1 claims are granted, and over a long run the count stays
// within burst of rate per rate_per.
#pragma once

#include <algorithm>
#include <cstdint>

namespace pgclaim {

struct RateRule {
    int64_t interval_us;   // rate_per / rate
    int64_t tolerance_us;  // (burst - 1) * interval
};

// The burst allowed for a rate: a tenth of it, at least 1.
inline int64_t rate_burst(int64_t rate) { return std::max<int64_t>(1, (rate + 9) / 10); }

inline RateRule rate_rule(int64_t rate, int64_t per_us) {
    RateRule r;
    r.interval_us = std::max<int64_t>(1, per_us / std::max<int64_t>(1, rate));
    r.tolerance_us = (rate_burst(rate) - 1) * r.interval_us;
    return r;
}

// Takes up to `want` claims at `now`; returns how many were granted and
// moves *tat on by as many intervals. A tat of 0 (or in the past) means
// the key is idle: a full burst is available.
inline int rate_take(int64_t *tat, int64_t now, const RateRule &r, int want) {
    int granted = 0;
    int64_t t = std::max(*tat, now);
    while (granted < want && t - now <= r.tolerance_us) {
        t += r.interval_us;
        ++granted;
    }
    if (granted > 0) *tat = t;
    return granted;
}

// Gives back `n` claims taken but not used.
inline void rate_give_back(int64_t *tat, const RateRule &r, int n) { *tat -= n * r.interval_us; }

// When the next claim will be allowed (now when one is allowed now).
inline int64_t rate_next_at(int64_t tat, int64_t now, const RateRule &r) {
    int64_t t = std::max(tat, now);
    return t - now <= r.tolerance_us ? now : t - r.tolerance_us;
}

}  // namespace pgclaim
