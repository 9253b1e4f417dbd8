// Unit tests for src/core/token: the partition bits of fencing tokens.
#include <gtest/gtest.h>

#include <cstdint>

#include "core/error.hpp"
#include "core/token.hpp"

using namespace pgclaim;

TEST(Token, PartitionZeroIsTheSequenceValue) {
    EXPECT_EQ(token::make(0, 1), 1);
    EXPECT_EQ(token::make(0, 4294967296LL + 7), 4294967296LL + 7);
    EXPECT_EQ(token::make(0, token::kMaxSeq), token::kMaxSeq);
}

TEST(Token, PartitionInHighBits) {
    EXPECT_EQ(token::make(1, 1), (int64_t(1) << 53) + 1);
    EXPECT_EQ(token::make(5, 42), (int64_t(5) << 53) | 42);
    EXPECT_EQ(token::make(token::kMaxPartition, token::kMaxSeq), INT64_MAX);
}

TEST(Token, PartitionRoundTrips) {
    for (int p : {0, 1, 2, 3, 5, 15, 16, 511, 1023})
        for (int64_t s : {int64_t(1), int64_t(123456789), int64_t(1) << 40, token::kMaxSeq}) {
            int64_t t = token::make(p, s);
            EXPECT_GT(t, 0);
            EXPECT_EQ(token::partition_of(t), p);
            EXPECT_EQ(t & token::kMaxSeq, s);
        }
    EXPECT_EQ(token::partition_of(-1), -1);
    EXPECT_EQ(token::partition_of(0), 0);
}

TEST(Token, IncreasingWithinAPartition) {
    for (int p : {0, 7, 1023}) {
        EXPECT_LT(token::make(p, 1), token::make(p, 2));
        EXPECT_LT(token::make(p, token::kMaxSeq - 1), token::make(p, token::kMaxSeq));
    }
    // Partitions never share a token.
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
    EXPECT_THROW(token::make(-1, 1), Error);
    EXPECT_THROW(token::make(1024, 1), Error);
}

TEST(Token, RestartsFit) {
    // Each server start moves the sequence 2^32 ahead: 2^21 such moves fit.
    EXPECT_EQ(token::kMaxSeq / (int64_t(1) << 32), (int64_t(1) << 21) - 1);
}
