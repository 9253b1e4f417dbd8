// Unit tests for src/core/scan_hint: where a claim scan starts.
#include <gtest/gtest.h>

#include "core/scan_hint.hpp"

using namespace pgclaim;

TEST(ScanHints, NothingKnownStartsAtHead) {
    ScanHints h;
    EXPECT_FALSE(h.start(1, 1000).has_value());
}

TEST(ScanHints, HeadScanSetsPosition) {
    ScanHints h;
    h.record(1, true, ScanPos{0, 42}, 100, 1000);
    auto s = h.start(1, 1001);
    ASSERT_TRUE(s.has_value());
    EXPECT_EQ(*s, (ScanPos{0, 42}));
    EXPECT_FALSE(h.start(2, 1001).has_value());  // per queue
}

TEST(ScanHints, EmptyQueueForgets) {
    ScanHints h;
    h.record(1, true, ScanPos{0, 42}, 100, 1000);
    h.record(1, true, std::nullopt, 100, 2000);
    EXPECT_FALSE(h.start(1, 2001).has_value());
}

TEST(ScanHints, ValidityFollowsWalkCost) {
    EXPECT_EQ(ScanHints::validity_us(0), ScanHints::kMinValidUs);
    EXPECT_EQ(ScanHints::validity_us(10'000), 2'000'000);
    EXPECT_EQ(ScanHints::validity_us(1'000'000'000), ScanHints::kMaxValidUs);
    ScanHints h;
    h.record(1, true, ScanPos{0, 5}, 1'000, 0);  // a 1 ms walk: valid 200 ms
    EXPECT_TRUE(h.start(1, 199'000).has_value());
    EXPECT_FALSE(h.start(1, 200'001).has_value());
}

TEST(ScanHints, ExpiresAtEarliestPassedLease) {
    ScanHints h;
    h.record(1, true, ScanPos{0, 9}, 1'000'000, 0, 5'000);  // a claim passed ends at 5 ms
    EXPECT_TRUE(h.start(1, 4'999).has_value());
    EXPECT_FALSE(h.start(1, 5'000).has_value());
}

TEST(ScanHints, LaterScansMoveForwardKeepingExpiry) {
    ScanHints h;
    h.record(1, true, ScanPos{0, 9}, 1'000'000, 0, 900'000);
    h.record(1, false, ScanPos{0, 20}, 5, 10, 400'000);
    auto s = h.start(1, 11);
    ASSERT_TRUE(s.has_value());
    EXPECT_EQ(s->id, 20);
    EXPECT_FALSE(h.start(1, 400'000).has_value());  // earliest lease end wins
    // a scan from the position that met nothing keeps the position
    ScanHints g;
    g.record(3, true, ScanPos{1, 7}, 1'000'000, 0);
    g.record(3, false, std::nullopt, 5, 10);
    EXPECT_EQ(g.start(3, 11)->id, 7);
}

TEST(ScanHints, ForgetAndClockGoingBack) {
    ScanHints h;
    h.record(1, true, ScanPos{0, 9}, 1'000'000, 1'000);
    EXPECT_FALSE(h.start(1, 999).has_value());  // clock went back: start at head
    h.forget(1);
    EXPECT_FALSE(h.start(1, 1'001).has_value());
    h.record(2, true, ScanPos{0, 9}, 1'000'000, 1'000);
    h.forget_all();
    EXPECT_FALSE(h.start(2, 1'001).has_value());
}

TEST(ScanHints, PositionsHoldOnlyUnderTheirEpoch) {
    ScanHints h;
    h.record(1, true, ScanPos{0, 9}, 1'000'000, 0, INT64_MAX, 7);
    EXPECT_EQ(h.start(1, 10, nullptr, 7)->id, 9);
    EXPECT_FALSE(h.start(1, 10, nullptr, 8).has_value());  // forgotten somewhere since
    // a later scan that started under another epoch drops the position
    h.record(1, false, ScanPos{0, 30}, 5, 20, INT64_MAX, 8);
    EXPECT_FALSE(h.start(1, 30, nullptr, 7).has_value());
    EXPECT_FALSE(h.start(1, 30, nullptr, 8).has_value());
}

TEST(PromoteSchedule, ChecksAtEarliestRunAtOrPeriodically) {
    PromoteSchedule p;
    EXPECT_TRUE(p.due(1, 0));
    p.checked(1, 1'000, std::nullopt);
    EXPECT_FALSE(p.due(1, 1'000 + PromoteSchedule::kRecheckUs - 1));
    EXPECT_TRUE(p.due(1, 1'000 + PromoteSchedule::kRecheckUs));
    p.checked(1, 2'000, 2'500);  // an item is due at 2.5 ms
    EXPECT_FALSE(p.due(1, 2'499));
    EXPECT_TRUE(p.due(1, 2'500));
    EXPECT_TRUE(p.due(2, 2'000));  // per queue
    p.forget_all();
    EXPECT_TRUE(p.due(1, 0));
}

#include "core/queue_cache.hpp"

TEST(QueueCache, EntriesExpireAndClear) {
    QueueCache c;
    EXPECT_FALSE(c.get("jobs", 0).has_value());
    c.put("jobs", QueueDef{7, 30'000'000, 5}, 1'000);
    auto d = c.get("jobs", 2'000);
    ASSERT_TRUE(d.has_value());
    EXPECT_EQ(d->queue_id, 7);
    EXPECT_EQ(d->max_attempts, 5);
    EXPECT_FALSE(c.get("other", 2'000).has_value());
    EXPECT_FALSE(c.get("jobs", 1'000 + QueueCache::kTtlUs).has_value());
    EXPECT_FALSE(c.get("jobs", 500).has_value());  // clock went back
    c.clear();
    EXPECT_FALSE(c.get("jobs", 2'000).has_value());
}

TEST(ProducerQueues, ValidWhileNoQueueWasDropped) {
    ProducerQueues c;
    c.put("jobs", 7, 0);  // no drop counter (not preloaded): nothing cached
    EXPECT_FALSE(c.get("jobs", 0).has_value());
    c.put("jobs", 7, 3);
    ASSERT_TRUE(c.get("jobs", 3).has_value());
    EXPECT_EQ(*c.get("jobs", 3), 7);
    EXPECT_FALSE(c.get("jobs", 4).has_value());  // a queue was dropped since
    EXPECT_FALSE(c.get("other", 3).has_value());
    c.put("jobs", 9, 4);
    EXPECT_EQ(*c.get("jobs", 4), 9);
    c.clear();
    EXPECT_FALSE(c.get("jobs", 4).has_value());
}

TEST(ScanHints, StartTellsWhenThePositionStopsHolding) {
    ScanHints h;
    h.record(1, true, ScanPos{0, 42}, 100, 1000, 5000);  // a lease passed over ends at 5000
    int64_t e = 0;
    ASSERT_TRUE(h.start(1, 1001, &e).has_value());
    EXPECT_EQ(e, 5000);
    h.record(2, true, ScanPos{0, 7}, 100, 1000);  // no claim passed over
    ASSERT_TRUE(h.start(2, 1001, &e).has_value());
    EXPECT_EQ(e, INT64_MAX);
}
