// Rate limits: the generic cell rate algorithm of core/rate_limit.hpp.
#include <gtest/gtest.h>

#include <vector>

#include "core/rate_limit.hpp"

using namespace pgclaim;

namespace {
constexpr int64_t kSec = 1000000;
}

TEST(RateLimit, BurstIsATenthOfTheRate) {
    EXPECT_EQ(rate_burst(200), 20);
    EXPECT_EQ(rate_burst(5), 1);
    EXPECT_EQ(rate_burst(1), 1);
    EXPECT_EQ(rate_burst(11), 2);
}

TEST(RateLimit, IdleKeyGrantsAFullBurstThenSpaces) {
    RateRule r = rate_rule(200, kSec);  // 5 ms apart, burst 20
    int64_t tat = 0;
    int64_t now = 100 * kSec;
    EXPECT_EQ(rate_take(&tat, now, r, 1000), 20);
    EXPECT_EQ(rate_take(&tat, now, r, 1), 0);
    EXPECT_EQ(rate_next_at(tat, now, r), now + 5000);
    EXPECT_EQ(rate_take(&tat, now + 5000, r, 5), 1);
}

TEST(RateLimit, NeverMoreThanRatePlusBurstInAWindow) {
    RateRule r = rate_rule(200, kSec);
    int64_t tat = 0;
    int64_t start = 10 * kSec;
    // Claim as fast as possible, every 100 us, for 10 s.
    std::vector<int64_t> grants;
    for (int64_t now = start; now < start + 10 * kSec; now += 100) {
        int g = rate_take(&tat, now, r, 16);
        for (int i = 0; i < g; ++i) grants.push_back(now);
    }
    // Over 10 s: 2000 plus the initial burst at most.
    EXPECT_GE((int64_t)grants.size(), 2000);
    EXPECT_LE((int64_t)grants.size(), 2000 + rate_burst(200));
    // Every window of one second holds at most rate + burst - 1.
    size_t lo = 0;
    for (size_t hi = 0; hi < grants.size(); ++hi) {
        while (grants[hi] - grants[lo] >= kSec) ++lo;
        EXPECT_LE((int64_t)(hi - lo + 1), 200 + rate_burst(200) - 1);
    }
}

TEST(RateLimit, GiveBackReturnsUnusedClaims) {
    RateRule r = rate_rule(10, kSec);  // 100 ms apart, burst 1
    int64_t tat = 0;
    int64_t now = 5 * kSec;
    EXPECT_EQ(rate_take(&tat, now, r, 3), 1);
    rate_give_back(&tat, r, 1);
    EXPECT_EQ(rate_take(&tat, now, r, 1), 1);
}

TEST(RateLimit, LongPeriods) {
    RateRule r = rate_rule(3, 60 * kSec);  // 3 a minute
    int64_t tat = 0;
    int64_t now = kSec;
    EXPECT_EQ(rate_take(&tat, now, r, 10), 1);
    EXPECT_EQ(rate_next_at(tat, now, r), now + 20 * kSec);
}
