// Unit tests of the pure argument parser of claim.enqueue_trigger.
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "core/error.hpp"
#include "core/trigger_args.hpp"

using pgclaim::Error;
using pgclaim::parse_trigger_args;
using pgclaim::TriggerOptions;

namespace {

TriggerOptions parse(std::vector<const char *> args) {
    return parse_trigger_args("t", static_cast<int>(args.size()), args.data());
}

// The SQLSTATE and message parse throws with; {"none", ""} when it does not throw.
std::pair<std::string, std::string> error_of(std::vector<const char *> args) {
    try {
        parse(args);
    } catch (const Error &e) {
        return {e.code(), e.what()};
    }
    return {"none", ""};
}

std::string code_of(std::vector<const char *> args) { return error_of(std::move(args)).first; }
std::string message_of(std::vector<const char *> args) { return error_of(std::move(args)).second; }

}  // namespace

TEST(TriggerArgs, QueueOnly) {
    auto o = parse({"orders"});
    EXPECT_STREQ(o.queue, "orders");
    EXPECT_STREQ(o.group_column, "");
    EXPECT_FALSE(o.coalesce);
    EXPECT_EQ(o.priority, 0);
}

TEST(TriggerArgs, GroupColumn) {
    auto o = parse({"orders", "customer_id"});
    EXPECT_STREQ(o.group_column, "customer_id");
    EXPECT_FALSE(o.coalesce);
}

TEST(TriggerArgs, EmptyGroupColumnMeansNone) {
    auto o = parse({"orders", "", "priority=7"});
    EXPECT_STREQ(o.group_column, "");
    EXPECT_EQ(o.priority, 7);
}

TEST(TriggerArgs, ColumnNameKeepsCase) {
    auto o = parse({"q", "OrderId"});
    EXPECT_STREQ(o.group_column, "OrderId");
}

TEST(TriggerArgs, Options) {
    auto o = parse({"q", "id", "COALESCE", "Priority=-3"});
    EXPECT_TRUE(o.coalesce);
    EXPECT_EQ(o.priority, -3);
}

TEST(TriggerArgs, PriorityLimits) {
    EXPECT_EQ(parse({"q", "", "priority=2147483647"}).priority, 2147483647);
    EXPECT_EQ(parse({"q", "", "priority=-2147483648"}).priority, -2147483647 - 1);
    EXPECT_EQ(code_of({"q", "", "priority=2147483648"}), "22023");
    EXPECT_EQ(code_of({"q", "", "priority=1x"}), "22023");
    EXPECT_EQ(code_of({"q", "", "priority="}), "22023");
    EXPECT_EQ(code_of({"q", "", "priority"}), "22023");
}

TEST(TriggerArgs, MissingQueue) {
    EXPECT_EQ(code_of({}), "22023");
    EXPECT_NE(message_of({}).find("queue name"), std::string::npos);
}

TEST(TriggerArgs, BadQueueName) {
    EXPECT_EQ(code_of({""}), "42602");
    EXPECT_EQ(code_of({"1abc"}), "42602");
    EXPECT_EQ(code_of({"a-b"}), "42602");
}

TEST(TriggerArgs, LongColumnName) {
    std::string c(64, 'c');
    EXPECT_EQ(code_of({"q", c.c_str()}), "42622");
    std::string ok(63, 'c');
    EXPECT_STREQ(parse({"q", ok.c_str()}).group_column, ok.c_str());
}

TEST(TriggerArgs, UnknownOption) {
    EXPECT_EQ(code_of({"q", "id", "debounce"}), "22023");
    EXPECT_NE(message_of({"q", "id", "debounce"}).find("trigger \"t\": unknown option \"debounce\""),
              std::string::npos);
}

TEST(TriggerArgs, DuplicateOptions) {
    EXPECT_EQ(code_of({"q", "id", "coalesce", "coalesce"}), "22023");
    EXPECT_EQ(code_of({"q", "id", "priority=1", "priority=2"}), "22023");
    EXPECT_EQ(code_of({"q", "id", "coalesce=yes"}), "22023");
}

TEST(TriggerArgs, FairKeyColumn) {
    EXPECT_STREQ(parse({"q", "", "fair_key=tenant"}).fair_column, "tenant");
    EXPECT_STREQ(parse({"q", "id", "FAIR_KEY=Tenant", "priority=2"}).fair_column, "Tenant");
    EXPECT_STREQ(parse({"q", "id"}).fair_column, "");
    EXPECT_EQ(code_of({"q", "id", "fair_key="}), "22023");
    EXPECT_EQ(code_of({"q", "id", "fair_key"}), "22023");
    EXPECT_EQ(code_of({"q", "id", "fair_key=a", "fair_key=b"}), "22023");
    EXPECT_EQ(code_of({"q", "id", "fair_key=a", "coalesce"}), "22023");
    EXPECT_EQ(code_of({"q", "id", "batch", "fair_key=a"}), "22023");
    std::string c = "fair_key=" + std::string(64, 'c');
    EXPECT_EQ(code_of({"q", "id", c.c_str()}), "42622");
}

TEST(TriggerArgs, CoalesceNeedsGroup) {
    EXPECT_EQ(code_of({"q", "", "coalesce"}), "22023");
    EXPECT_NE(message_of({"q", "", "coalesce"}).find("needs a group column"), std::string::npos);
}

TEST(TriggerArgs, Batch) {
    EXPECT_EQ(parse({"q", "id"}).batch, 0);
    EXPECT_EQ(parse({"q", "id", "batch"}).batch, 1000);
    EXPECT_EQ(parse({"q", "", "BATCH=1"}).batch, 1);
    EXPECT_EQ(parse({"q", "id", "batch=10000", "priority=2"}).batch, 10000);
    EXPECT_EQ(parse({"q", "id", "batch=10000", "priority=2"}).priority, 2);
    for (const char *bad : {"batch=0", "batch=10001", "batch=", "batch=x", "batch=-1",
                            "batch=1.5", "batch=99999999999999999999"})
        EXPECT_EQ(code_of({"q", "id", bad}), "22023") << bad;
    EXPECT_EQ(code_of({"q", "id", "batch", "batch=5"}), "22023");
    EXPECT_EQ(code_of({"q", "id", "batch", "coalesce"}), "22023");
    EXPECT_NE(message_of({"q", "id", "coalesce", "batch"}).find("exclude each other"),
              std::string::npos);
}
