// Unit tests for src/core/rules: names, durations, ranges, backoff.
#include <gtest/gtest.h>

#include <string>

#include "core/error.hpp"
#include "core/rules.hpp"

using namespace pgclaim;

namespace {
std::string code_of(void (*f)()) {
    try {
        f();
    } catch (const Error &e) {
        return e.code();
    }
    return "ok";
}
}  // namespace

TEST(QueueName, AcceptsIdentifiers) {
    EXPECT_NO_THROW(check_queue_name("jobs"));
    EXPECT_NO_THROW(check_queue_name("_private$1"));
    EXPECT_NO_THROW(check_queue_name(std::string(63, 'x')));
}

TEST(QueueName, RejectsBadNames) {
    for (const char *bad : {"", "1abc", "bad-name", "a b", "é"}) {
        try {
            check_queue_name(bad);
            ADD_FAILURE() << "accepted " << bad;
        } catch (const Error &e) {
            EXPECT_STREQ(e.code(), sqlstate::kInvalidName) << bad;
            EXPECT_FALSE(e.hint().empty());
        }
    }
    EXPECT_THROW(check_queue_name(std::string(64, 'x')), Error);
}

TEST(Durations, Positive) {
    EXPECT_NO_THROW(check_positive_duration("lease", 1, kMaxLeaseUs));
    EXPECT_NO_THROW(check_positive_duration("lease", kMaxLeaseUs, kMaxLeaseUs));
    EXPECT_EQ(code_of([] { check_positive_duration("lease", 0, kMaxLeaseUs); }), "22023");
    EXPECT_EQ(code_of([] { check_positive_duration("lease", -5, kMaxLeaseUs); }), "22023");
    EXPECT_EQ(code_of([] { check_positive_duration("lease", kMaxLeaseUs + 1, kMaxLeaseUs); }),
              "22023");
}

TEST(Durations, NonNegativeAndMessages) {
    EXPECT_NO_THROW(check_nonnegative_duration("wait", 0, kMaxWaitUs));
    try {
        check_nonnegative_duration("wait", kMaxWaitUs + 1, kMaxWaitUs);
        FAIL();
    } catch (const Error &e) {
        EXPECT_EQ(std::string(e.what()), "wait is too long: the maximum is 1 hour");
    }
    try {
        check_positive_duration("lease", kMaxLeaseUs * 2, kMaxLeaseUs);
        FAIL();
    } catch (const Error &e) {
        EXPECT_EQ(std::string(e.what()), "lease is too long: the maximum is 7 days");
    }
}

TEST(Range, Bounds) {
    EXPECT_NO_THROW(check_range("n", 1, 1, kMaxClaimBatch));
    EXPECT_NO_THROW(check_range("n", kMaxClaimBatch, 1, kMaxClaimBatch));
    EXPECT_EQ(code_of([] { check_range("n", 0, 1, kMaxClaimBatch); }), "22023");
    EXPECT_EQ(code_of([] { check_range("n", kMaxClaimBatch + 1, 1, kMaxClaimBatch); }), "22023");
}

TEST(Backoff, DoublesAndCaps) {
    const int64_t s = kUsecPerSec;
    EXPECT_EQ(backoff_delay_us(s, 1), s);
    EXPECT_EQ(backoff_delay_us(s, 2), 2 * s);
    EXPECT_EQ(backoff_delay_us(s, 5), 16 * s);
    EXPECT_EQ(backoff_delay_us(s, 0), s);  // attempt below 1 counts as 1
    EXPECT_EQ(backoff_delay_us(0, 7), 0);  // no backoff configured
    EXPECT_EQ(backoff_delay_us(s, 1000), kMaxBackoffUs);
    EXPECT_EQ(backoff_delay_us(s, 1 << 30), kMaxBackoffUs);  // no overflow
    // a base beyond the cap is kept as given (the queue asked for it)
    EXPECT_EQ(backoff_delay_us(2 * kMaxBackoffUs, 3), 2 * kMaxBackoffUs);
    for (int a = 1; a < 80; ++a) EXPECT_GE(backoff_delay_us(s, a + 1), backoff_delay_us(s, a));
}
