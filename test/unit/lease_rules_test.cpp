// Unit tests for src/core/lease_rules: name/key/permit limits, slot choice,
// waiting time of a blocked acquirer.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/lease_rules.hpp"

using namespace pgclaim;

namespace {
template <class F>
std::string code_of(F f) {
    try {
        f();
    } catch (const Error &e) {
        return e.code();
    }
    return "ok";
}

constexpr int64_t kNow = 1000000000;
constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
}  // namespace

TEST(LeaseName, AcceptsFreeTextUpToTheLimit) {
    EXPECT_EQ(code_of([] { check_lease_name("orders:customer-42"); }), "ok");
    EXPECT_EQ(code_of([] { check_lease_name("a b/c é ✓"); }), "ok");
    EXPECT_EQ(code_of([] { check_lease_name(std::string(kMaxLeaseNameBytes, 'x')); }), "ok");
}

TEST(LeaseName, RejectsEmptyAndOverlong) {
    EXPECT_EQ(code_of([] { check_lease_name(""); }), "42602");
    EXPECT_EQ(code_of([] { check_lease_name(std::string(kMaxLeaseNameBytes + 1, 'x')); }),
              "42602");
}

TEST(GuardKey, Limits) {
    EXPECT_EQ(code_of([] { check_guard_key("charge:order-1"); }), "ok");
    EXPECT_EQ(code_of([] { check_guard_key(std::string(kMaxGuardKeyBytes, 'k')); }), "ok");
    EXPECT_EQ(code_of([] { check_guard_key(""); }), "22023");
    EXPECT_EQ(code_of([] { check_guard_key(std::string(kMaxGuardKeyBytes + 1, 'k')); }), "22023");
}

TEST(Permits, Range) {
    EXPECT_EQ(code_of([] { check_permits(1); }), "ok");
    EXPECT_EQ(code_of([] { check_permits(kMaxPermits); }), "ok");
    EXPECT_EQ(code_of([] { check_permits(0); }), "22023");
    EXPECT_EQ(code_of([] { check_permits(-3); }), "22023");
    EXPECT_EQ(code_of([] { check_permits(kMaxPermits + 1); }), "22023");
}

TEST(Limits, TtlMaximumIsSevenDays) {
    EXPECT_EQ(kMaxLeaseTtlUs, int64_t(7) * 24 * 3600 * 1000000);
    EXPECT_EQ(code_of([] { check_positive_duration("ttl", kMaxLeaseTtlUs, kMaxLeaseTtlUs); }),
              "ok");
    EXPECT_EQ(code_of([] { check_positive_duration("ttl", kMaxLeaseTtlUs + 1, kMaxLeaseTtlUs); }),
              "22023");
    EXPECT_EQ(code_of([] { check_positive_duration("ttl", 0, kMaxLeaseTtlUs); }), "22023");
}

TEST(PlanSlots, EmptyLeaseHasEverySlotFree) {
    std::vector<int32_t> free(3);
    SlotPlan p = plan_slots("s", 3, nullptr, 0, kNow, free.data());
    EXPECT_EQ(p.live, 0);
    EXPECT_EQ(p.nfree, 3);
    EXPECT_EQ(p.next_expiry, kMax);
    EXPECT_EQ(free, (std::vector<int32_t>{0, 1, 2}));
}

TEST(PlanSlots, LiveHoldersTakeSlotsExpiredOnesFreeThem) {
    HolderRow rows[] = {{0, 3, kNow + 50}, {1, 3, kNow}, {2, 3, kNow + 10}};
    std::vector<int32_t> free(3);
    SlotPlan p = plan_slots("s", 3, rows, 3, kNow, free.data());
    EXPECT_EQ(p.live, 2);
    EXPECT_EQ(p.nfree, 1);
    EXPECT_EQ(free[0], 1);  // expires_at == now counts as expired
    EXPECT_EQ(p.next_expiry, kNow + 10);
}

TEST(PlanSlots, FullMutex) {
    HolderRow rows[] = {{0, 1, kNow + 1}};
    int32_t free[1];
    SlotPlan p = plan_slots("m", 1, rows, 1, kNow, free);
    EXPECT_EQ(p.live, 1);
    EXPECT_EQ(p.nfree, 0);
    EXPECT_EQ(p.next_expiry, kNow + 1);
}

TEST(PlanSlots, MismatchedPermitsOfALiveHolderIsPC002) {
    HolderRow rows[] = {{0, 3, kNow + 1}};
    int32_t free[1];
    EXPECT_EQ(code_of([&] { plan_slots("s", 1, rows, 1, kNow, free); }), "PC002");
    try {
        plan_slots("s", 1, rows, 1, kNow, free);
    } catch (const Error &e) {
        EXPECT_NE(std::string(e.what()).find("3 permits, not 1"), std::string::npos) << e.what();
    }
}

TEST(PlanSlots, ALiveSharedHolderMeetsASemaphoreWithPC002) {
    HolderRow rows[] = {{1, 0, kNow + 1}};  // permits 0: a shared holder
    int32_t free[2];
    try {
        plan_slots("s", 2, rows, 1, kNow, free);
        ADD_FAILURE() << "no error";
    } catch (const Error &e) {
        EXPECT_STREQ(e.code(), "PC002");
        EXPECT_NE(std::string(e.what()).find("held in shared mode, not 2 permits"),
                  std::string::npos)
            << e.what();
    }
}

TEST(PlanSlots, ExpiredHoldersOfAnotherCountDoNotMatter) {
    HolderRow rows[] = {{0, 5, kNow - 1}, {4, 5, kNow - 1}};
    int32_t free[2];
    SlotPlan p = plan_slots("s", 2, rows, 2, kNow, free);
    EXPECT_EQ(p.nfree, 2);
    EXPECT_EQ(free[0], 0);
    EXPECT_EQ(free[1], 1);
}

TEST(PlanSlots, LiveSlotOutsideTheRangeIsAMismatch) {
    HolderRow rows[] = {{3, 2, kNow + 1}};  // inconsistent row
    int32_t free[2];
    EXPECT_EQ(code_of([&] { plan_slots("s", 2, rows, 1, kNow, free); }), "PC002");
}

TEST(NextWait, UntilDeadlineOrNextExpiry) {
    EXPECT_EQ(next_wait_us(kNow, kNow + 500, kMax, false, 100), 500);
    EXPECT_EQ(next_wait_us(kNow, kNow + 500, kNow + 200, false, 100), 200);
    EXPECT_EQ(next_wait_us(kNow, kNow + 500, kNow + 900, false, 100), 500);
}

TEST(NextWait, BusySlotsArePolled) {
    EXPECT_EQ(next_wait_us(kNow, kNow + 5000, kMax, true, 100), 100);
    EXPECT_EQ(next_wait_us(kNow, kNow + 50, kMax, true, 100), 50);
}

TEST(NextWait, NothingLeftOrAlreadyExpired) {
    EXPECT_EQ(next_wait_us(kNow, kNow, kMax, false, 100), 0);
    EXPECT_EQ(next_wait_us(kNow, kNow - 5, kMax, true, 100), 0);
    EXPECT_EQ(next_wait_us(kNow, kNow + 500, kNow, false, 100), 0);
}
