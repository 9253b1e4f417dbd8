// Unit tests for src/core/token: the layout of fencing tokens (partition in
// bits 52..47, the count in bits 46..0), the older layout still recognised,
// and the arithmetic of the durable ceiling and of the move at a start.
#include <gtest/gtest.h>

#include <cstdint>

#include "core/error.hpp"
#include "core/token.hpp"

using namespace pgclaim;

namespace {
constexpr int64_t kSafe = (int64_t(1) << 53) - 1;  // Number.MAX_SAFE_INTEGER
}

TEST(Token, EveryTokenIsASafeInteger) {
    EXPECT_EQ(token::kMaxToken, kSafe);
    EXPECT_EQ(token::make(token::kMaxPartition, token::kMaxSeq), kSafe);
    for (int p = 0; p <= token::kMaxPartition; ++p) {
        EXPECT_LE(token::last(p), kSafe);
        EXPECT_GT(token::first(p), 0);
    }
}

TEST(Token, PartitionZeroIsTheCount) {
    EXPECT_EQ(token::make(0, 1), 1);
    EXPECT_EQ(token::make(0, 4294967296LL + 7), 4294967296LL + 7);
    EXPECT_EQ(token::make(0, token::kMaxSeq), token::kMaxSeq);
}

TEST(Token, PartitionInBits52To47) {
    EXPECT_EQ(token::kSeqBits, 47);
    EXPECT_EQ(token::kMaxPartition, 63);
    EXPECT_EQ(token::make(1, 1), (int64_t(1) << 47) + 1);
    EXPECT_EQ(token::make(5, 42), (int64_t(5) << 47) | 42);
}

TEST(Token, PartitionRoundTrips) {
    for (int p : {0, 1, 2, 3, 5, 15, 16, 31, 62, 63})
        for (int64_t s : {int64_t(1), int64_t(123456789), int64_t(1) << 40, token::kMaxSeq}) {
            int64_t t = token::make(p, s);
            EXPECT_GT(t, 0);
            EXPECT_LE(t, kSafe);
            EXPECT_EQ(token::partition_of(t), p);
            EXPECT_EQ(t & token::kMaxSeq, s);
        }
    EXPECT_EQ(token::partition_of(-1), -1);
    EXPECT_EQ(token::partition_of(0), 0);
}

TEST(Token, OlderTokensKeepTheirPartition) {
    // 0.2.0: partition * 2^53 + count. Above 2^53 - 1 only such a token.
    for (int p : {1, 2, 5, 63, 1023}) {
        int64_t old = (int64_t(p) << 53) + 12345;
        EXPECT_EQ(token::partition_of(old), p);
    }
    // A partition-0 token of 0.2.0 is the count: partition 0 in both layouts
    // while the count is below 2^47 (the update refuses a larger one).
    EXPECT_EQ(token::partition_of(4294967296LL * 3 + 9), 0);
}

TEST(Token, IncreasingWithinAndAcrossPartitions) {
    for (int p : {0, 7, 63}) {
        EXPECT_LT(token::make(p, 1), token::make(p, 2));
        EXPECT_LT(token::make(p, token::kMaxSeq - 1), token::make(p, token::kMaxSeq));
    }
    // Raising a database's partition keeps its tokens increasing, and
    // partitions never share a token.
    EXPECT_LT(token::make(3, token::kMaxSeq), token::make(4, 1));
}

TEST(Token, OutOfRangeThrows) {
    try {
        token::make(0, token::kMaxSeq + 1);
        FAIL() << "no throw";
    } catch (const Error &e) {
        EXPECT_STREQ(e.code(), "2200H");
    }
    EXPECT_THROW(token::make(0, 0), Error);
    try {
        token::make(64, 1);
        FAIL() << "no throw";
    } catch (const Error &e) {
        EXPECT_STREQ(e.code(), "22023");
    }
    EXPECT_THROW(token::make(-1, 1), Error);
}

TEST(Token, CeilingIsOneBlockAhead) {
    EXPECT_EQ(token::ceiling_for(1), 1 + token::kCeilingBlock);
    int64_t t = token::make(9, 1000);
    EXPECT_EQ(token::ceiling_for(t), t + token::kCeilingBlock);
    // Never past the partition's last token.
    EXPECT_EQ(token::ceiling_for(token::last(9) - 5), token::last(9));
    EXPECT_EQ(token::ceiling_for(kSafe), kSafe);
}

TEST(Token, StartMovesToTheCeilingOnly) {
    // After a crash the sequence may have lost what a block held: the start
    // moves it to the ceiling, never back.
    EXPECT_EQ(token::fence_start(100, 100 + token::kCeilingBlock, false), 100 + token::kCeilingBlock);
    EXPECT_EQ(token::fence_start(5000, 4000, false), 5000);
    int64_t p7 = token::make(7, 77);
    EXPECT_EQ(token::partition_of(token::fence_start(p7, 3, false)), 7);
}

TEST(Token, NewTimelineJumps) {
    EXPECT_EQ(token::fence_start(100, 200, true), 200 + token::kTimelineJump);
    // Near the end of the partition the jump cannot fit: refused, 2200H.
    try {
        token::fence_start(token::last(2) - 10, 0, true);
        FAIL() << "no throw";
    } catch (const Error &e) {
        EXPECT_STREQ(e.code(), "2200H");
    }
    EXPECT_THROW(token::fence_start(token::last(0), token::last(0), false), Error);
}

TEST(Token, Budget) {
    // What one partition holds (docs/partitions.md, "How long the tokens
    // last"): a start costs at most a block, a new timeline 2^32 more.
    EXPECT_EQ(token::kMaxSeq / token::kCeilingBlock, (int64_t(1) << 31) - 1);
    EXPECT_EQ(token::kMaxSeq / token::kTimelineJump, (int64_t(1) << 15) - 1);
    // 100,000 tokens a second for 40 years fit in one partition.
    EXPECT_GT(token::kMaxSeq, int64_t(100000) * 3600 * 24 * 365 * 40);
}
