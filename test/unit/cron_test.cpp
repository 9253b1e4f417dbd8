// Unit tests of the cron parser and the next-fire computation (src/core/cron.*).
// DST cases read the system's compiled zones (Debian package tzdata) through
// the test-only reader in cron_tzif.hpp, and skip when a zone file is missing.
#include <gtest/gtest.h>

#include <cstdio>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "core/cron_parse.hpp"
#include "cron_tzif.hpp"

using pgclaim::CronParseResult;
using pgclaim::CronSchedule;
using pgclaim::FixedOffsetZone;
using pgclaim::LocalTimeMapping;
using pgclaim::ZoneRules;
using pgclaim::ZoneTransition;

namespace {

constexpr int64_t kMicros = 1000000;

uint64_t bits(std::initializer_list<int> values) {
    uint64_t m = 0;
    for (int v : values) m |= uint64_t{1} << v;
    return m;
}

uint64_t range_bits(int lo, int hi, int step = 1) {
    uint64_t m = 0;
    for (int v = lo; v <= hi; v += step) m |= uint64_t{1} << v;
    return m;
}

CronSchedule parse_ok(const char *expr) {
    CronParseResult r = pgclaim::parse_cron(expr);
    EXPECT_TRUE(r.ok) << expr << ": " << r.message;
    return r.schedule;
}

CronParseResult parse_err(const char *expr) {
    CronParseResult r = pgclaim::parse_cron(expr);
    EXPECT_FALSE(r.ok) << expr;
    return r;
}

std::string message(const char *expr) { return parse_err(expr).message; }

// UTC seconds of a UTC civil time.
int64_t utc(int64_t y, int mo, int d, int h = 0, int mi = 0, int s = 0) {
    return pgclaim::days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60 + s;
}

// UTC seconds of a local civil time with a given offset (in hours, may be fractional).
int64_t at_local(int64_t y, int mo, int d, int h, int mi, double offset_hours) {
    return utc(y, mo, d, h, mi) - static_cast<int64_t>(offset_hours * 3600);
}

std::string local_text(const ZoneRules &zone, int64_t seconds) {
    const int32_t off = zone.utc_offset_at(seconds);
    const int64_t local = seconds + off;
    int64_t days = local >= 0 ? local / 86400 : -((-local + 86399) / 86400);
    int64_t rest = local - days * 86400;
    int64_t y;
    int m, d;
    pgclaim::civil_from_days(days, &y, &m, &d);
    const int a = off < 0 ? -off : off;
    char buf[64];
    std::snprintf(buf, sizeof buf, "%04lld-%02d-%02d %02d:%02d:%02d%c%02d:%02d",
                  static_cast<long long>(y), m, d, static_cast<int>(rest / 3600),
                  static_cast<int>(rest / 60 % 60), static_cast<int>(rest % 60),
                  off < 0 ? '-' : '+', a / 3600, a / 60 % 60);
    return buf;
}

// The next n fire times after `after` (UTC seconds), as local text.
std::vector<std::string> fires(const char *expr, const ZoneRules &zone, int64_t after, int n) {
    const CronSchedule s = parse_ok(expr);
    std::vector<std::string> out;
    int64_t t = after * kMicros;
    for (int i = 0; i < n; i++) {
        int64_t next = 0;
        if (!pgclaim::next_fire(s, zone, t, &next)) {
            out.push_back("none");
            break;
        }
        EXPECT_GT(next, t);
        EXPECT_EQ(next % kMicros, 0);
        out.push_back(local_text(zone, next / kMicros));
        t = next;
    }
    return out;
}

std::string first_fire(const char *expr, const ZoneRules &zone, int64_t after_micros) {
    const CronSchedule s = parse_ok(expr);
    int64_t next = 0;
    if (!pgclaim::next_fire(s, zone, after_micros, &next)) return "none";
    return local_text(zone, next / kMicros);
}

using Strings = std::vector<std::string>;

const FixedOffsetZone kUtc{0};

std::unique_ptr<cron_test::TzifZone> zone(const char *name) {
    return cron_test::TzifZone::load(name);
}

#define LOAD_ZONE(var, name)                                                               \
    auto var = zone(name);                                                                 \
    if (!var)                                                                              \
        GTEST_SKIP() << "time zone file /usr/share/zoneinfo/" name                         \
                     << " is missing or unreadable (install the Debian package tzdata)";

}  // namespace

// ---------------------------------------------------------------------------
// parsing
// ---------------------------------------------------------------------------

TEST(CronParse, ApiDoesNotThrow) {
    static_assert(noexcept(pgclaim::parse_cron("")), "parse_cron is noexcept");
    static_assert(noexcept(pgclaim::parse_cron("", 0)), "parse_cron is noexcept");
    int64_t out;
    static_assert(noexcept(pgclaim::next_fire(CronSchedule{}, kUtc, 0, &out)),
                  "next_fire is noexcept");
    static_assert(std::is_trivially_copyable<CronParseResult>::value, "plain data");
    (void)out;
}

TEST(CronParse, AllStars) {
    const CronSchedule s = parse_ok("* * * * *");
    EXPECT_EQ(s.seconds, 1u);
    EXPECT_EQ(s.minutes, range_bits(0, 59));
    EXPECT_EQ(s.hours, range_bits(0, 23));
    EXPECT_EQ(s.days_of_month, range_bits(1, 31));
    EXPECT_EQ(s.months, range_bits(1, 12));
    EXPECT_EQ(s.days_of_week, range_bits(0, 6));
    EXPECT_TRUE(s.dom_star);
    EXPECT_TRUE(s.dow_star);
    EXPECT_TRUE(s.hour_star);
    EXPECT_FALSE(s.has_seconds);
}

TEST(CronParse, SingleValuesListsAndRanges) {
    const CronSchedule s = parse_ok("5 0,12,23 1-3,31 2 6");
    EXPECT_EQ(s.minutes, bits({5}));
    EXPECT_EQ(s.hours, bits({0, 12, 23}));
    EXPECT_EQ(s.days_of_month, bits({1, 2, 3, 31}));
    EXPECT_EQ(s.months, bits({2}));
    EXPECT_EQ(s.days_of_week, bits({6}));
    EXPECT_FALSE(s.dom_star);
    EXPECT_FALSE(s.dow_star);
    EXPECT_FALSE(s.hour_star);
}

TEST(CronParse, Steps) {
    EXPECT_EQ(parse_ok("*/5 * * * *").minutes, range_bits(0, 55, 5));
    EXPECT_EQ(parse_ok("1-30/3 * * * *").minutes, range_bits(1, 28, 3));
    EXPECT_EQ(parse_ok("5/15 * * * *").minutes, bits({5, 20, 35, 50}));
    EXPECT_EQ(parse_ok("0 */6 * * *").hours, bits({0, 6, 12, 18}));
    EXPECT_EQ(parse_ok("0 0 1-31/10 * *").days_of_month, bits({1, 11, 21, 31}));
    EXPECT_EQ(parse_ok("0 0 */10 * *").days_of_month, bits({1, 11, 21, 31}));
    EXPECT_EQ(parse_ok("0 0 1 */3 *").months, bits({1, 4, 7, 10}));
    EXPECT_EQ(parse_ok("0 0 * * */2").days_of_week, bits({0, 2, 4, 6}));
    EXPECT_EQ(parse_ok("*/60 * * * *").minutes, bits({0}));
    EXPECT_EQ(parse_ok("10-10/5 * * * *").minutes, bits({10}));  // a range of one, not "from 10"
    EXPECT_EQ(parse_ok("0-59/1 * * * *").minutes, range_bits(0, 59));
    EXPECT_EQ(parse_ok("1,*/20,7-8 * * * *").minutes, bits({0, 1, 7, 8, 20, 40}));
}

TEST(CronParse, MonthNames) {
    EXPECT_EQ(parse_ok("0 0 1 JAN *").months, bits({1}));
    EXPECT_EQ(parse_ok("0 0 1 dec *").months, bits({12}));
    EXPECT_EQ(parse_ok("0 0 1 Jan-Mar,oct *").months, bits({1, 2, 3, 10}));
    EXPECT_EQ(parse_ok("0 0 1 JAN-DEC/3 *").months, bits({1, 4, 7, 10}));
    EXPECT_EQ(parse_ok("0 0 1 1-mar *").months, bits({1, 2, 3}));
    EXPECT_EQ(parse_ok("0 0 1 FEB/5 *").months, bits({2, 7, 12}));
}

TEST(CronParse, DayNamesAndSunday) {
    EXPECT_EQ(parse_ok("0 0 * * MON-FRI").days_of_week, range_bits(1, 5));
    EXPECT_EQ(parse_ok("0 0 * * sun").days_of_week, bits({0}));
    EXPECT_EQ(parse_ok("0 0 * * 0").days_of_week, bits({0}));
    EXPECT_EQ(parse_ok("0 0 * * 7").days_of_week, bits({0}));
    EXPECT_EQ(parse_ok("0 0 * * 5-7").days_of_week, bits({5, 6, 0}));
    EXPECT_EQ(parse_ok("0 0 * * FRI-SUN").days_of_week, bits({5, 6, 0}));
    EXPECT_EQ(parse_ok("0 0 * * sat,Sun").days_of_week, bits({6, 0}));
    EXPECT_EQ(parse_ok("0 0 * * 0-7").days_of_week, range_bits(0, 6));
    EXPECT_EQ(parse_ok("0 0 * * 1/2").days_of_week, bits({1, 3, 5}));
    EXPECT_EQ(parse_ok("0 0 * * 7/3").days_of_week, bits({0}));
    EXPECT_EQ(parse_ok("0 0 * * tue-thu").days_of_week, bits({2, 3, 4}));
}

TEST(CronParse, Macros) {
    struct Case {
        const char *macro, *expansion;
    } cases[] = {
        {"@yearly", "0 0 1 1 *"}, {"@annually", "0 0 1 1 *"}, {"@monthly", "0 0 1 * *"},
        {"@weekly", "0 0 * * 0"}, {"@daily", "0 0 * * *"},    {"@midnight", "0 0 * * *"},
        {"@hourly", "0 * * * *"}, {"  @DAILY  ", "0 0 * * *"}, {"@Hourly", "0 * * * *"},
    };
    for (const Case &c : cases) {
        const CronSchedule a = parse_ok(c.macro);
        const CronSchedule b = parse_ok(c.expansion);
        EXPECT_EQ(a.minutes, b.minutes) << c.macro;
        EXPECT_EQ(a.hours, b.hours) << c.macro;
        EXPECT_EQ(a.days_of_month, b.days_of_month) << c.macro;
        EXPECT_EQ(a.months, b.months) << c.macro;
        EXPECT_EQ(a.days_of_week, b.days_of_week) << c.macro;
        EXPECT_EQ(a.dom_star, b.dom_star) << c.macro;
        EXPECT_EQ(a.dow_star, b.dow_star) << c.macro;
        EXPECT_EQ(a.hour_star, b.hour_star) << c.macro;
    }
}

TEST(CronParse, SixFieldsHaveSeconds) {
    const CronSchedule s = parse_ok("*/15 30 9 * * *");
    EXPECT_TRUE(s.has_seconds);
    EXPECT_EQ(s.seconds, bits({0, 15, 30, 45}));
    EXPECT_EQ(s.minutes, bits({30}));
    EXPECT_EQ(s.hours, bits({9}));
    EXPECT_EQ(parse_ok("* * * * * *").seconds, range_bits(0, 59));
}

TEST(CronParse, Whitespace) {
    const CronSchedule s = parse_ok("\t 1  2\t3 4   5 \n");
    EXPECT_EQ(s.minutes, bits({1}));
    EXPECT_EQ(s.hours, bits({2}));
    EXPECT_EQ(s.days_of_month, bits({3}));
    EXPECT_EQ(s.months, bits({4}));
    EXPECT_EQ(s.days_of_week, bits({5}));
    // explicit length: the text need not be terminated
    const char text[] = "0 0 * * *garbage";
    EXPECT_TRUE(pgclaim::parse_cron(text, 9).ok);
    EXPECT_FALSE(pgclaim::parse_cron(text, 16).ok);
}

TEST(CronParseErrors, OutOfRangeNamesFieldAndPosition) {
    CronParseResult r = parse_err("0 0 32 * *");
    EXPECT_STREQ(r.message, "field 3 (day of month): value 32 out of range 1-31 at position 5");
    EXPECT_EQ(r.field, 3);
    EXPECT_EQ(r.position, 5);
    EXPECT_EQ(r.field_position, 5);

    r = parse_err("*/5 0-23 1,32 * *");
    EXPECT_STREQ(r.message, "field 3 (day of month): value 32 out of range 1-31 at position 12");
    EXPECT_EQ(r.field, 3);
    EXPECT_EQ(r.position, 12);
    EXPECT_EQ(r.field_position, 10);

    EXPECT_EQ(message("60 * * * *"), "field 1 (minute): value 60 out of range 0-59 at position 1");
    EXPECT_EQ(message("* 24 * * *"), "field 2 (hour): value 24 out of range 0-23 at position 3");
    EXPECT_EQ(message("* * 0 * *"),
              "field 3 (day of month): value 0 out of range 1-31 at position 5");
    EXPECT_EQ(message("* * * 13 *"), "field 4 (month): value 13 out of range 1-12 at position 7");
    EXPECT_EQ(message("* * * * 8"),
              "field 5 (day of week): value 8 out of range 0-7 at position 9");
    EXPECT_EQ(message("* * * 1-13 *"),
              "field 4 (month): value 13 out of range 1-12 at position 9");
    EXPECT_EQ(message("99999999999 * * * *"),
              "field 1 (minute): value 99999999999 out of range 0-59 at position 1");
    EXPECT_EQ(message("60 * * * * *"),
              "field 1 (second): value 60 out of range 0-59 at position 1");
    EXPECT_EQ(message("0 0 * * * 8"),
              "field 6 (day of week): value 8 out of range 0-7 at position 11");
}

TEST(CronParseErrors, Syntax) {
    EXPECT_EQ(message("5x * * * *"), "field 1 (minute): unexpected character 'x' at position 2");
    EXPECT_EQ(message("a * * * *"),
              "field 1 (minute): names are not allowed here, found \"a\" at position 1");
    EXPECT_EQ(message("* * * FOO *"),
              "field 4 (month): unknown month name \"FOO\" at position 7");
    EXPECT_EQ(message("* * * * MONDAY"),
              "field 5 (day of week): unknown day name \"MONDAY\" at position 9");
    EXPECT_EQ(message("*/0 * * * *"), "field 1 (minute): step 0 out of range 1-60 at position 3");
    EXPECT_EQ(message("* */25 * * *"), "field 2 (hour): step 25 out of range 1-24 at position 5");
    EXPECT_EQ(message("30-10 * * * *"), "field 1 (minute): range 30-10 is reversed at position 1");
    EXPECT_EQ(message("* * * * FRI-MON"),
              "field 5 (day of week): range FRI-MON is reversed at position 9");
    EXPECT_EQ(message("1,,2 * * * *"), "field 1 (minute): empty list item at position 3");
    EXPECT_EQ(message("1, * * * *"), "field 1 (minute): empty list item at position 3");
    EXPECT_EQ(message(",1 * * * *"), "field 1 (minute): empty list item at position 1");
    EXPECT_EQ(message("1- * * * *"), "field 1 (minute): missing value at position 3");
    EXPECT_EQ(message("*/ * * * *"), "field 1 (minute): missing step at position 3");
    EXPECT_EQ(message("*/x * * * *"), "field 1 (minute): unexpected character 'x' at position 3");
    EXPECT_EQ(message("*-5 * * * *"), "field 1 (minute): unexpected character '-' at position 2");
    EXPECT_EQ(message("-5 * * * *"), "field 1 (minute): unexpected character '-' at position 1");
    EXPECT_EQ(message("1-2-3 * * * *"), "field 1 (minute): unexpected character '-' at position 4");
    EXPECT_EQ(message("? * * * *"), "field 1 (minute): unexpected character '?' at position 1");
    EXPECT_EQ(message("0 0 L * *"),
              "field 3 (day of month): names are not allowed here, found \"L\" at position 5");
    EXPECT_EQ(message("0 0 * * 5#3"),
              "field 5 (day of week): unexpected character '#' at position 10");
    EXPECT_EQ(message("\x01 * * * *"), "field 1 (minute): unexpected byte 0x01 at position 1");
}

TEST(CronParseErrors, WholeExpression) {
    CronParseResult r = parse_err("");
    EXPECT_STREQ(r.message, "empty cron expression at position 1");
    EXPECT_EQ(r.field, 0);
    EXPECT_EQ(r.field_position, 0);
    EXPECT_EQ(message("   "), "empty cron expression at position 1");
    r = parse_err("* * * *");
    EXPECT_STREQ(r.message,
                 "too few fields: expected 5 (minute hour day-of-month month day-of-week) or 6 "
                 "(with a leading second), found 4 at position 8");
    EXPECT_EQ(r.position, 8);
    EXPECT_EQ(r.field, 0);
    r = parse_err("* * * * * * *");
    EXPECT_STREQ(r.message,
                 "too many fields: expected 5 (minute hour day-of-month month day-of-week) or 6 "
                 "(with a leading second) at position 13");
    EXPECT_EQ(message("@fortnightly"),
              "unknown macro \"@fortnightly\" (known: @yearly @annually @monthly @weekly "
              "@daily @midnight @hourly) at position 1");
    EXPECT_EQ(message("@daily 5"), "a macro stands alone, found \"5\" after @daily at position 8");
    EXPECT_EQ(message("@"), "unknown macro \"@\" (known: @yearly @annually @monthly @weekly "
                            "@daily @midnight @hourly) at position 1");
    EXPECT_FALSE(pgclaim::parse_cron(nullptr).ok);
}

TEST(CronParseErrors, ImpossibleDates) {
    CronParseResult r = parse_err("0 0 30 2 *");
    EXPECT_STREQ(r.message,
                 "field 3 (day of month): none of these days occurs in the months of field 4, so "
                 "the schedule never fires at position 5");
    EXPECT_EQ(r.field, 3);
    EXPECT_EQ(r.position, 5);
    EXPECT_FALSE(pgclaim::parse_cron("0 0 31 4,6,9,11 *").ok);
    EXPECT_FALSE(pgclaim::parse_cron("0 0 30-31 FEB */2").ok);  // '*' day of week: both must match
    EXPECT_FALSE(pgclaim::parse_cron("0 0 0 30 2 *").ok);
    EXPECT_EQ(pgclaim::parse_cron("0 0 0 30 2 *").field, 4);
    // possible ones
    parse_ok("0 0 29 2 *");
    parse_ok("0 0 31 4,5 *");
    parse_ok("0 0 31 4 MON");  // both restricted: Mondays of April fire
    parse_ok("0 0 30 2 MON");
}

// ---------------------------------------------------------------------------
// next fire, UTC and fixed offsets
// ---------------------------------------------------------------------------

TEST(CronNext, StrictlyAfter) {
    const int64_t t = utc(2026, 6, 1, 12, 5);
    EXPECT_EQ(first_fire("*/5 * * * *", kUtc, t * kMicros), "2026-06-01 12:10:00+00:00");
    EXPECT_EQ(first_fire("*/5 * * * *", kUtc, t * kMicros - 1), "2026-06-01 12:05:00+00:00");
    EXPECT_EQ(first_fire("*/5 * * * *", kUtc, t * kMicros + 1), "2026-06-01 12:10:00+00:00");
    EXPECT_EQ(first_fire("*/5 * * * *", kUtc, (t - 170) * kMicros), "2026-06-01 12:05:00+00:00");
    EXPECT_EQ(fires("*/20 9-10 * * *", kUtc, utc(2026, 6, 1, 10, 50), 4),
              (Strings{"2026-06-02 09:00:00+00:00", "2026-06-02 09:20:00+00:00",
                       "2026-06-02 09:40:00+00:00", "2026-06-02 10:00:00+00:00"}));
}

TEST(CronNext, EveryMinuteAndSecond) {
    EXPECT_EQ(fires("* * * * *", kUtc, utc(2026, 6, 1, 23, 58, 30), 3),
              (Strings{"2026-06-01 23:59:00+00:00", "2026-06-02 00:00:00+00:00",
                       "2026-06-02 00:01:00+00:00"}));
    EXPECT_EQ(fires("* * * * * *", kUtc, utc(2026, 12, 31, 23, 59, 58), 3),
              (Strings{"2026-12-31 23:59:59+00:00", "2027-01-01 00:00:00+00:00",
                       "2027-01-01 00:00:01+00:00"}));
    EXPECT_EQ(fires("*/20 0 12 * * *", kUtc, utc(2026, 6, 1, 12, 0, 30), 3),
              (Strings{"2026-06-01 12:00:40+00:00", "2026-06-02 12:00:00+00:00",
                       "2026-06-02 12:00:20+00:00"}));
}

TEST(CronNext, YearBoundary) {
    EXPECT_EQ(fires("0 0 1 1 *", kUtc, utc(2026, 12, 31, 23, 59), 2),
              (Strings{"2027-01-01 00:00:00+00:00", "2028-01-01 00:00:00+00:00"}));
    EXPECT_EQ(fires("59 23 31 12 *", kUtc, utc(2026, 1, 1), 2),
              (Strings{"2026-12-31 23:59:00+00:00", "2027-12-31 23:59:00+00:00"}));
    EXPECT_EQ(fires("@yearly", kUtc, utc(2026, 1, 1), 1), (Strings{"2027-01-01 00:00:00+00:00"}));
    EXPECT_EQ(fires("0 9 * 1 MON", kUtc, utc(2026, 12, 1), 2),
              (Strings{"2027-01-04 09:00:00+00:00", "2027-01-11 09:00:00+00:00"}));
}

TEST(CronNext, MonthEnds) {
    EXPECT_EQ(fires("0 0 31 * *", kUtc, utc(2026, 1, 31), 4),
              (Strings{"2026-03-31 00:00:00+00:00", "2026-05-31 00:00:00+00:00",
                       "2026-07-31 00:00:00+00:00", "2026-08-31 00:00:00+00:00"}));
    EXPECT_EQ(fires("0 0 30 * *", kUtc, utc(2026, 1, 31), 2),
              (Strings{"2026-03-30 00:00:00+00:00", "2026-04-30 00:00:00+00:00"}));
    EXPECT_EQ(fires("0 0 28-31 2 *", kUtc, utc(2027, 1, 1), 3),
              (Strings{"2027-02-28 00:00:00+00:00", "2028-02-28 00:00:00+00:00",
                       "2028-02-29 00:00:00+00:00"}));
    EXPECT_EQ(fires("@monthly", kUtc, utc(2026, 11, 15), 2),
              (Strings{"2026-12-01 00:00:00+00:00", "2027-01-01 00:00:00+00:00"}));
}

TEST(CronNext, Feb29) {
    EXPECT_EQ(fires("0 0 29 2 *", kUtc, utc(2026, 1, 1), 3),
              (Strings{"2028-02-29 00:00:00+00:00", "2032-02-29 00:00:00+00:00",
                       "2036-02-29 00:00:00+00:00"}));
    // 2100 is not a leap year: eight years between fires
    EXPECT_EQ(fires("0 0 29 2 *", kUtc, utc(2096, 3, 1), 1),
              (Strings{"2104-02-29 00:00:00+00:00"}));
    EXPECT_EQ(fires("30 12 29 FEB *", kUtc, utc(2028, 2, 29, 12, 29), 2),
              (Strings{"2028-02-29 12:30:00+00:00", "2032-02-29 12:30:00+00:00"}));
    // '*/7' (Sunday) counts as '*': Feb 29 that is a Sunday (2028-02-29 is a Tuesday)
    EXPECT_EQ(fires("0 0 29 2 */7", kUtc, utc(2026, 1, 1), 1),
              (Strings{"2032-02-29 00:00:00+00:00"}));
    // the last Feb 29 before the year 10000 is 9996: nothing after it
    EXPECT_EQ(fires("0 0 29 2 *", kUtc, utc(9996, 3, 1), 1), (Strings{"none"}));
}

TEST(CronNext, DayOfMonthOrDayOfWeek) {
    // both restricted: either matches (1st, 15th, and every Monday)
    EXPECT_EQ(fires("0 0 1,15 * MON", kUtc, utc(2026, 6, 1, 1), 5),
              (Strings{"2026-06-08 00:00:00+00:00", "2026-06-15 00:00:00+00:00",
                       "2026-06-22 00:00:00+00:00", "2026-06-29 00:00:00+00:00",
                       "2026-07-01 00:00:00+00:00"}));
    // Friday the 13th cannot be written: 13 OR Friday
    EXPECT_EQ(fires("0 0 13 * FRI", kUtc, utc(2026, 3, 1), 3),
              (Strings{"2026-03-06 00:00:00+00:00", "2026-03-13 00:00:00+00:00",
                       "2026-03-20 00:00:00+00:00"}));
    // day of month '*': only the weekday counts
    EXPECT_EQ(fires("0 0 * * MON", kUtc, utc(2026, 6, 1, 1), 2),
              (Strings{"2026-06-08 00:00:00+00:00", "2026-06-15 00:00:00+00:00"}));
    // '*/2' counts as '*': both must match, so odd days that are Mondays
    EXPECT_EQ(fires("0 0 */2 * MON", kUtc, utc(2026, 6, 1, 1), 3),
              (Strings{"2026-06-15 00:00:00+00:00", "2026-06-29 00:00:00+00:00",
                       "2026-07-13 00:00:00+00:00"}));
    // day of week '*': only the day of month counts
    EXPECT_EQ(fires("0 0 10 * *", kUtc, utc(2026, 6, 1), 1),
              (Strings{"2026-06-10 00:00:00+00:00"}));
    // Sunday as 0 and 7
    EXPECT_EQ(fires("0 8 * * 7", kUtc, utc(2026, 6, 1), 1),
              fires("0 8 * * 0", kUtc, utc(2026, 6, 1), 1));
    EXPECT_EQ(fires("0 8 * * 7", kUtc, utc(2026, 6, 1), 1), (Strings{"2026-06-07 08:00:00+00:00"}));
    EXPECT_EQ(fires("@weekly", kUtc, utc(2026, 6, 1), 1), (Strings{"2026-06-07 00:00:00+00:00"}));
    EXPECT_EQ(fires("0 9 * * MON-FRI", kUtc, utc(2026, 6, 5, 10), 2),
              (Strings{"2026-06-08 09:00:00+00:00", "2026-06-09 09:00:00+00:00"}));
}

TEST(CronNext, FixedOffsetZones) {
    const FixedOffsetZone india(5 * 3600 + 1800);
    EXPECT_EQ(fires("0 9 * * *", india, utc(2026, 6, 1), 2),
              (Strings{"2026-06-01 09:00:00+05:30", "2026-06-02 09:00:00+05:30"}));
    int64_t next = 0;
    ASSERT_TRUE(pgclaim::next_fire(parse_ok("0 9 * * *"), india, utc(2026, 6, 1) * kMicros, &next));
    EXPECT_EQ(next, at_local(2026, 6, 1, 9, 0, 5.5) * kMicros);
    const FixedOffsetZone west(-8 * 3600);
    // local date differs from the UTC date
    EXPECT_EQ(fires("0 20 31 12 *", west, utc(2027, 1, 1, 1), 1),
              (Strings{"2026-12-31 20:00:00-08:00"}));
}

TEST(CronNext, PostgresEpochConstant) {
    EXPECT_EQ(pgclaim::kPgEpochUnixMicros, utc(2000, 1, 1) * kMicros);
}

TEST(CronNext, FarRanges) {
    int64_t next = 0;
    const CronSchedule every_minute = parse_ok("* * * * *");
    EXPECT_FALSE(pgclaim::next_fire(every_minute, kUtc, utc(10000, 1, 1) * kMicros, &next));
    EXPECT_FALSE(pgclaim::next_fire(every_minute, kUtc, INT64_MAX, &next));
    EXPECT_FALSE(pgclaim::next_fire(every_minute, kUtc, INT64_MIN, &next));
    EXPECT_EQ(fires("59 23 31 12 *", kUtc, utc(9999, 12, 31, 23, 58), 2),
              (Strings{"9999-12-31 23:59:00+00:00", "none"}));
    EXPECT_EQ(fires("0 0 1 1 *", kUtc, utc(1969, 12, 31, 12), 1),
              (Strings{"1970-01-01 00:00:00+00:00"}));
    EXPECT_EQ(fires("0 0 29 2 *", kUtc, utc(1896, 3, 1), 1),
              (Strings{"1904-02-29 00:00:00+00:00"}));
    // an empty schedule (not from the parser) has no fire time
    EXPECT_FALSE(pgclaim::next_fire(CronSchedule{}, kUtc, 0, &next));
}

TEST(CronCalendar, RoundTrip) {
    for (int64_t d = -800000; d <= 800000; d += 997) {
        int64_t y;
        int m, day;
        pgclaim::civil_from_days(d, &y, &m, &day);
        ASSERT_EQ(pgclaim::days_from_civil(y, m, day), d);
        ASSERT_GE(day, 1);
        ASSERT_LE(day, pgclaim::days_in_month(y, m));
    }
    EXPECT_EQ(pgclaim::days_from_civil(1970, 1, 1), 0);
    EXPECT_EQ(pgclaim::days_from_civil(2000, 3, 1), 11017);
    EXPECT_EQ(pgclaim::days_in_month(2100, 2), 28);
    EXPECT_EQ(pgclaim::days_in_month(2000, 2), 29);
    EXPECT_EQ(pgclaim::days_in_month(2028, 2), 29);
}

TEST(CronMatch, Matches) {
    const CronSchedule s = parse_ok("*/15 9-17 * * MON-FRI");
    EXPECT_TRUE(pgclaim::cron_matches(s, 6, 1, 1, 9, 45, 0));
    EXPECT_FALSE(pgclaim::cron_matches(s, 6, 1, 1, 9, 46, 0));
    EXPECT_FALSE(pgclaim::cron_matches(s, 6, 6, 6, 9, 45, 0));
    EXPECT_FALSE(pgclaim::cron_matches(s, 6, 1, 1, 9, 45, 1));
    EXPECT_FALSE(pgclaim::cron_matches(s, 13, 1, 1, 9, 45, 0));
}

// ---------------------------------------------------------------------------
// zones with transitions
// ---------------------------------------------------------------------------

namespace {

// Offsets from a table; transitions may keep the offset.
class TableZone final : public ZoneRules {
public:
    TableZone(int32_t initial, std::vector<ZoneTransition> trs)
        : initial_(initial), trs_(std::move(trs)) {}
    int32_t utc_offset_at(int64_t t) const noexcept override {
        int32_t off = initial_;
        for (const auto &tr : trs_)
            if (tr.at <= t) off = tr.offset_after;
        return off;
    }
    bool next_transition(int64_t t, ZoneTransition *out) const noexcept override {
        for (const auto &tr : trs_)
            if (tr.at > t) {
                *out = tr;
                return true;
            }
        return false;
    }

private:
    int32_t initial_;
    std::vector<ZoneTransition> trs_;
};

}  // namespace

TEST(CronZone, TableZoneGapAndOverlap) {
    // +1 h; +2 h from 2026-03-29 01:00Z; a transition that keeps the offset;
    // back to +1 h on 2026-10-25 01:00Z
    const TableZone z(3600, {{utc(2026, 3, 29, 1), 3600, 7200},
                             {utc(2026, 6, 1), 7200, 7200},
                             {utc(2026, 10, 25, 1), 7200, 3600}});
    LocalTimeMapping m = pgclaim::map_local_time(z, utc(2026, 3, 29, 2, 30));
    EXPECT_EQ(m.kind, LocalTimeMapping::kSkipped);
    EXPECT_EQ(m.utc_seconds, utc(2026, 3, 29, 1));
    m = pgclaim::map_local_time(z, utc(2026, 10, 25, 2, 30));
    EXPECT_EQ(m.kind, LocalTimeMapping::kRepeated);
    EXPECT_EQ(m.utc_seconds, utc(2026, 10, 25, 0, 30));
    EXPECT_EQ(m.second_utc_seconds, utc(2026, 10, 25, 1, 30));
    m = pgclaim::map_local_time(z, utc(2026, 6, 1, 2, 0));
    EXPECT_EQ(m.kind, LocalTimeMapping::kUnique);
    EXPECT_EQ(m.utc_seconds, utc(2026, 6, 1, 0, 0));
    m = pgclaim::map_local_time(z, utc(2026, 6, 1, 1, 59, 59));
    EXPECT_EQ(m.kind, LocalTimeMapping::kUnique);
    EXPECT_EQ(m.utc_seconds, utc(2026, 5, 31, 23, 59, 59));
    EXPECT_EQ(fires("0 2 * * *", z, utc(2026, 5, 30, 12), 3),
              (Strings{"2026-05-31 02:00:00+02:00", "2026-06-01 02:00:00+02:00",
                       "2026-06-02 02:00:00+02:00"}));
    EXPECT_EQ(fires("30 2 * * *", z, utc(2026, 3, 28), 2),
              (Strings{"2026-03-28 02:30:00+01:00", "2026-03-29 03:00:00+02:00"}));
}

TEST(CronZone, TzifReader) {
    LOAD_ZONE(berlin, "Europe/Berlin");
    EXPECT_EQ(berlin->utc_offset_at(utc(2026, 1, 15)), 3600);
    EXPECT_EQ(berlin->utc_offset_at(utc(2026, 7, 15)), 7200);
    ZoneTransition tr;
    ASSERT_TRUE(berlin->next_transition(utc(2026, 1, 1), &tr));
    EXPECT_EQ(tr.at, utc(2026, 3, 29, 1));
    EXPECT_EQ(tr.offset_before, 3600);
    EXPECT_EQ(tr.offset_after, 7200);
    ASSERT_TRUE(berlin->next_transition(tr.at, &tr));
    EXPECT_EQ(tr.at, utc(2026, 10, 25, 1));
    EXPECT_EQ(tr.offset_after, 3600);
    // past the transitions a fat file lists (2037): the footer rule
    ASSERT_TRUE(berlin->next_transition(utc(2040, 1, 1), &tr));
    EXPECT_EQ(tr.at, utc(2040, 3, 25, 1));
    EXPECT_EQ(berlin->utc_offset_at(utc(2040, 7, 1)), 7200);
    EXPECT_EQ(berlin->utc_offset_at(utc(2040, 12, 1)), 3600);
    LOAD_ZONE(ny, "America/New_York");
    ASSERT_TRUE(ny->next_transition(utc(2026, 1, 1), &tr));
    EXPECT_EQ(tr.at, utc(2026, 3, 8, 7));
    EXPECT_EQ(tr.offset_before, -5 * 3600);
    EXPECT_EQ(tr.offset_after, -4 * 3600);
    ASSERT_TRUE(ny->next_transition(tr.at, &tr));
    EXPECT_EQ(tr.at, utc(2026, 11, 1, 6));
    EXPECT_FALSE(cron_test::TzifZone::load("No/Such_Zone"));
}

TEST(CronDst, BerlinLocalTimeMapping) {
    LOAD_ZONE(z, "Europe/Berlin");
    LocalTimeMapping m = pgclaim::map_local_time(*z, utc(2026, 3, 29, 2, 30));
    EXPECT_EQ(m.kind, LocalTimeMapping::kSkipped);
    EXPECT_EQ(m.utc_seconds, utc(2026, 3, 29, 1));
    m = pgclaim::map_local_time(*z, utc(2026, 3, 29, 3, 0));
    EXPECT_EQ(m.kind, LocalTimeMapping::kUnique);
    EXPECT_EQ(m.utc_seconds, utc(2026, 3, 29, 1));
    m = pgclaim::map_local_time(*z, utc(2026, 3, 29, 1, 59, 59));
    EXPECT_EQ(m.kind, LocalTimeMapping::kUnique);
    EXPECT_EQ(m.utc_seconds, utc(2026, 3, 29, 0, 59, 59));
    m = pgclaim::map_local_time(*z, utc(2026, 10, 25, 2, 0));
    EXPECT_EQ(m.kind, LocalTimeMapping::kRepeated);
    EXPECT_EQ(m.utc_seconds, utc(2026, 10, 25, 0, 0));
    EXPECT_EQ(m.second_utc_seconds, utc(2026, 10, 25, 1, 0));
    m = pgclaim::map_local_time(*z, utc(2026, 10, 25, 3, 0));
    EXPECT_EQ(m.kind, LocalTimeMapping::kUnique);
    EXPECT_EQ(m.utc_seconds, utc(2026, 10, 25, 2, 0));
}

TEST(CronDst, BerlinSpringForwardFixedTimeFiresAtGapEnd) {
    LOAD_ZONE(z, "Europe/Berlin");
    const int64_t day_before = utc(2026, 3, 28, 12);
    EXPECT_EQ(fires("30 2 * * *", *z, day_before, 3),
              (Strings{"2026-03-29 03:00:00+02:00", "2026-03-30 02:30:00+02:00",
                       "2026-03-31 02:30:00+02:00"}));
    EXPECT_EQ(fires("0 2 * * *", *z, day_before, 2),
              (Strings{"2026-03-29 03:00:00+02:00", "2026-03-30 02:00:00+02:00"}));
    // every matching time in the gap fires once, together
    EXPECT_EQ(fires("*/15 2 * * *", *z, day_before, 2),
              (Strings{"2026-03-29 03:00:00+02:00", "2026-03-30 02:00:00+02:00"}));
    // the gap end and a listed 03:00 are one instant: one fire
    EXPECT_EQ(fires("0 2,3 * * *", *z, day_before, 3),
              (Strings{"2026-03-29 03:00:00+02:00", "2026-03-30 02:00:00+02:00",
                       "2026-03-30 03:00:00+02:00"}));
    EXPECT_EQ(fires("30 2,3 * * *", *z, day_before, 3),
              (Strings{"2026-03-29 03:00:00+02:00", "2026-03-29 03:30:00+02:00",
                       "2026-03-30 02:30:00+02:00"}));
    // from just before the gap, and from the gap end itself (already fired)
    EXPECT_EQ(first_fire("30 2 * * *", *z, (utc(2026, 3, 29, 1) - 1) * kMicros),
              "2026-03-29 03:00:00+02:00");
    EXPECT_EQ(first_fire("30 2 * * *", *z, utc(2026, 3, 29, 1) * kMicros),
              "2026-03-30 02:30:00+02:00");
    int64_t next = 0;
    ASSERT_TRUE(pgclaim::next_fire(parse_ok("30 2 * * *"), *z, day_before * kMicros, &next));
    EXPECT_EQ(next, utc(2026, 3, 29, 1) * kMicros);
    // six fields: a skipped second fires at the gap end too
    EXPECT_EQ(fires("30 30 2 * * *", *z, day_before, 1), (Strings{"2026-03-29 03:00:00+02:00"}));
}

TEST(CronDst, BerlinSpringForwardWildcardHourDropsSkippedTimes) {
    LOAD_ZONE(z, "Europe/Berlin");
    const int64_t start = at_local(2026, 3, 29, 0, 30, 1);
    // no 02:00 that day; 03:00 is its own fire, once
    EXPECT_EQ(fires("0 * * * *", *z, start, 3),
              (Strings{"2026-03-29 01:00:00+01:00", "2026-03-29 03:00:00+02:00",
                       "2026-03-29 04:00:00+02:00"}));
    EXPECT_EQ(fires("@hourly", *z, start, 2),
              (Strings{"2026-03-29 01:00:00+01:00", "2026-03-29 03:00:00+02:00"}));
    // no extra run at 03:00 off the schedule's rhythm
    EXPECT_EQ(fires("30 * * * *", *z, start, 3),
              (Strings{"2026-03-29 01:30:00+01:00", "2026-03-29 03:30:00+02:00",
                       "2026-03-29 04:30:00+02:00"}));
    EXPECT_EQ(fires("*/20 * * * *", *z, at_local(2026, 3, 29, 1, 30, 1), 3),
              (Strings{"2026-03-29 01:40:00+01:00", "2026-03-29 03:00:00+02:00",
                       "2026-03-29 03:20:00+02:00"}));
    EXPECT_EQ(fires("* * * * *", *z, at_local(2026, 3, 29, 1, 58, 1), 3),
              (Strings{"2026-03-29 01:59:00+01:00", "2026-03-29 03:00:00+02:00",
                       "2026-03-29 03:01:00+02:00"}));
    EXPECT_EQ(fires("0 */2 * * *", *z, start, 2),
              (Strings{"2026-03-29 04:00:00+02:00", "2026-03-29 06:00:00+02:00"}));
}

TEST(CronDst, BerlinFallBackRepeatedTimesFireOnce) {
    LOAD_ZONE(z, "Europe/Berlin");
    const int64_t day_before = utc(2026, 10, 24, 12);
    // 02:00-02:59 happens twice (CEST, then CET): the first occurrence fires
    EXPECT_EQ(fires("30 2 * * *", *z, day_before, 2),
              (Strings{"2026-10-25 02:30:00+02:00", "2026-10-26 02:30:00+01:00"}));
    EXPECT_EQ(fires("*/30 2 * * *", *z, day_before, 3),
              (Strings{"2026-10-25 02:00:00+02:00", "2026-10-25 02:30:00+02:00",
                       "2026-10-26 02:00:00+01:00"}));
    EXPECT_EQ(fires("0 * * * *", *z, at_local(2026, 10, 25, 0, 30, 2), 4),
              (Strings{"2026-10-25 01:00:00+02:00", "2026-10-25 02:00:00+02:00",
                       "2026-10-25 03:00:00+01:00", "2026-10-25 04:00:00+01:00"}));
    // asked from inside the repeat: the repeated times have fired already
    EXPECT_EQ(first_fire("*/15 2 * * *", *z, at_local(2026, 10, 25, 2, 10, 1) * kMicros),
              "2026-10-26 02:00:00+01:00");
    EXPECT_EQ(first_fire("* * * * *", *z, at_local(2026, 10, 25, 2, 10, 1) * kMicros),
              "2026-10-25 03:00:00+01:00");
    // a time after the repeat is reached normally
    EXPECT_EQ(first_fire("45 2,3 * * *", *z, at_local(2026, 10, 25, 2, 50, 1) * kMicros),
              "2026-10-25 03:45:00+01:00");
}

TEST(CronDst, NewYorkSpringForward) {
    LOAD_ZONE(z, "America/New_York");
    const int64_t day_before = utc(2026, 3, 7, 12);
    EXPECT_EQ(fires("30 2 * * *", *z, day_before, 3),
              (Strings{"2026-03-08 03:00:00-04:00", "2026-03-09 02:30:00-04:00",
                       "2026-03-10 02:30:00-04:00"}));
    EXPECT_EQ(fires("0 * * * *", *z, at_local(2026, 3, 8, 0, 30, -5), 3),
              (Strings{"2026-03-08 01:00:00-05:00", "2026-03-08 03:00:00-04:00",
                       "2026-03-08 04:00:00-04:00"}));
    EXPECT_EQ(fires("15 2 8 3 *", *z, utc(2026, 1, 1), 2),
              (Strings{"2026-03-08 03:00:00-04:00", "2027-03-08 02:15:00-05:00"}));
}

TEST(CronDst, NewYorkFallBackQuarterHoursFireOnce) {
    LOAD_ZONE(z, "America/New_York");
    // 01:00-01:59 happens twice on 2026-11-01 (EDT, then EST)
    EXPECT_EQ(fires("*/15 1 * * *", *z, utc(2026, 10, 31, 12), 6),
              (Strings{"2026-11-01 01:00:00-04:00", "2026-11-01 01:15:00-04:00",
                       "2026-11-01 01:30:00-04:00", "2026-11-01 01:45:00-04:00",
                       "2026-11-02 01:00:00-05:00", "2026-11-02 01:15:00-05:00"}));
    // from inside the repeated hour (01:20 EST)
    EXPECT_EQ(first_fire("*/15 1 * * *", *z, at_local(2026, 11, 1, 1, 20, -5) * kMicros),
              "2026-11-02 01:00:00-05:00");
    // from the last second of the first pass
    EXPECT_EQ(first_fire("*/15 1 * * *", *z, (utc(2026, 11, 1, 6) - 1) * kMicros),
              "2026-11-02 01:00:00-05:00");
    EXPECT_EQ(fires("0 * * * *", *z, at_local(2026, 10, 31, 23, 30, -4), 4),
              (Strings{"2026-11-01 00:00:00-04:00", "2026-11-01 01:00:00-04:00",
                       "2026-11-01 02:00:00-05:00", "2026-11-01 03:00:00-05:00"}));
    EXPECT_EQ(fires("@daily", *z, utc(2026, 10, 31, 12), 3),
              (Strings{"2026-11-01 00:00:00-04:00", "2026-11-02 00:00:00-05:00",
                       "2026-11-03 00:00:00-05:00"}));
}

TEST(CronDst, UtcIsUnaffected) {
    EXPECT_EQ(fires("30 2 * * *", kUtc, utc(2026, 3, 28, 12), 2),
              (Strings{"2026-03-29 02:30:00+00:00", "2026-03-30 02:30:00+00:00"}));
    EXPECT_EQ(fires("*/15 1 * * *", kUtc, utc(2026, 11, 1), 5),
              (Strings{"2026-11-01 01:00:00+00:00", "2026-11-01 01:15:00+00:00",
                       "2026-11-01 01:30:00+00:00", "2026-11-01 01:45:00+00:00",
                       "2026-11-02 01:00:00+00:00"}));
}

TEST(CronDst, FarFutureRuleFromTzifFooter) {
    LOAD_ZONE(z, "Europe/Berlin");
    EXPECT_EQ(fires("30 2 * * *", *z, utc(2040, 3, 24, 12), 2),
              (Strings{"2040-03-25 03:00:00+02:00", "2040-03-26 02:30:00+02:00"}));
}

TEST(CronDst, SamoaSkippedADay) {
    // Pacific/Apia went from -10:00 to +14:00 at the end of 2011-12-29: no 2011-12-30
    LOAD_ZONE(z, "Pacific/Apia");
    EXPECT_EQ(fires("0 12 * * *", *z, utc(2011, 12, 29), 3),
              (Strings{"2011-12-29 12:00:00-10:00", "2011-12-31 00:00:00+14:00",
                       "2011-12-31 12:00:00+14:00"}));
    EXPECT_EQ(fires("0 12 30 12 *", *z, utc(2011, 12, 1), 2),
              (Strings{"2011-12-31 00:00:00+14:00", "2012-12-30 12:00:00+14:00"}));
    // wildcard hour: the skipped day is dropped
    EXPECT_EQ(fires("0 */12 * * *", *z, at_local(2011, 12, 29, 12, 0, -10), 2),
              (Strings{"2011-12-31 00:00:00+14:00", "2011-12-31 12:00:00+14:00"}));
}

TEST(CronDst, LordHoweHalfHourShift) {
    // Australia/Lord_Howe moves by 30 minutes: 2026-10-04 02:00 -> 02:30 (+10:30 -> +11:00)
    LOAD_ZONE(z, "Australia/Lord_Howe");
    EXPECT_EQ(fires("15 2 * * *", *z, utc(2026, 10, 2), 2),
              (Strings{"2026-10-03 02:15:00+10:30", "2026-10-04 02:30:00+11:00"}));
    EXPECT_EQ(fires("*/20 * * * *", *z, at_local(2026, 10, 4, 1, 50, 10.5), 3),
              (Strings{"2026-10-04 02:40:00+11:00", "2026-10-04 03:00:00+11:00",
                       "2026-10-04 03:20:00+11:00"}));
}

namespace {

// Counts the calls next_fire makes into a zone.
class CountingZone final : public ZoneRules {
public:
    explicit CountingZone(const ZoneRules &inner) : inner_(inner) {}
    int32_t utc_offset_at(int64_t t) const noexcept override {
        calls++;
        return inner_.utc_offset_at(t);
    }
    bool next_transition(int64_t t, ZoneTransition *out) const noexcept override {
        calls++;
        return inner_.next_transition(t, out);
    }
    mutable int calls = 0;

private:
    const ZoneRules &inner_;
};

}  // namespace

TEST(CronDst, RepeatedHourIsSkippedInBoundedWork) {
    // Asked at 01:00:10 EST, in the repeat: an every-second schedule's candidates
    // up to 01:59:59 have all fired in the first pass; they are skipped in one step.
    LOAD_ZONE(z, "America/New_York");
    const CountingZone counting(*z);
    int64_t next = 0;
    ASSERT_TRUE(pgclaim::next_fire(parse_ok("* * * * * *"), counting,
                                   (utc(2026, 11, 1, 6) + 10) * kMicros, &next));
    EXPECT_EQ(local_text(*z, next / kMicros), "2026-11-01 02:00:00-05:00");
    EXPECT_LT(counting.calls, 20);
}

TEST(CronDst, ManySchedulesStayBounded) {
    // Every schedule over a year of DST changes: fire times strictly increase
    // and each lies on a matching local time or a gap end.
    LOAD_ZONE(z, "America/New_York");
    const char *exprs[] = {"* * * * *", "*/7 * * * *", "0 * * * *", "30 1,2 * * *",
                           "0 0 29 2 *", "0 0 1,15 * MON", "59 23 31 12 *", "*/10 2 * * SUN"};
    const CountingZone counting(*z);
    for (const char *e : exprs) {
        const CronSchedule s = parse_ok(e);
        int64_t t = utc(2026, 3, 1) * kMicros;
        const int64_t end = utc(2026, 11, 10) * kMicros;
        int count = 0;
        while (t < end) {
            int64_t next = 0;
            counting.calls = 0;
            ASSERT_TRUE(pgclaim::next_fire(s, counting, t, &next)) << e;
            ASSERT_GT(next, t) << e;
            ASSERT_LT(counting.calls, 20) << e << " after " << local_text(*z, t / kMicros);
            t = next;
            if (++count > 400000) FAIL() << e;
        }
    }
}

// ---------------------------------------------------------------------------
// against a reference that scans UTC minute by minute
// ---------------------------------------------------------------------------

namespace {

bool matches_local(const CronSchedule &s, int64_t local) {
    const int64_t days = local >= 0 ? local / 86400 : -((-local + 86399) / 86400);
    const int64_t rest = local - days * 86400;
    int64_t y;
    int m, d;
    pgclaim::civil_from_days(days, &y, &m, &d);
    const int weekday = static_cast<int>(((days + 4) % 7 + 7) % 7);
    return pgclaim::cron_matches(s, m, d, weekday, static_cast<int>(rest / 3600),
                                 static_cast<int>(rest / 60 % 60), static_cast<int>(rest % 60));
}

// The documented rules, applied literally to every UTC minute: a minute fires
// when its local time matches and was not seen before (the first pass of an
// overlap), or when the local clock jumped over a matching time and the hour
// field is restricted. Needs offsets and transitions on whole minutes.
// Returns -1 when nothing fires within `horizon` seconds after `after`.
int64_t reference_next(const CronSchedule &s, const ZoneRules &z, int64_t after, int64_t horizon) {
    const int64_t start = (after / 60 - 24 * 60) * 60;
    int64_t max_local = INT64_MIN, prev_local = 0;
    for (int64_t t = start; t <= after + horizon; t += 60) {
        const int64_t local = t + z.utc_offset_at(t);
        bool fire = local > max_local && matches_local(s, local);
        if (t > start && local - prev_local > 60 && !s.hour_star)
            for (int64_t skipped = prev_local + 60; skipped < local && !fire; skipped += 60)
                fire = matches_local(s, skipped);
        if (fire && t > after) return t;
        if (local > max_local) max_local = local;
        prev_local = local;
    }
    return -1;
}

}  // namespace

TEST(CronDst, AgreesWithMinuteByMinuteReference) {
    struct ZoneCase {
        const char *name;
        int64_t transitions[2];
    } zones[] = {
        {"Europe/Berlin", {utc(2026, 3, 29, 1), utc(2026, 10, 25, 1)}},
        {"America/New_York", {utc(2026, 3, 8, 7), utc(2026, 11, 1, 6)}},
        {"Australia/Lord_Howe", {utc(2026, 4, 4, 15), utc(2026, 10, 3, 15, 30)}},
        {"Pacific/Apia", {utc(2011, 12, 30, 10), utc(2011, 4, 2, 14)}},
    };
    const char *minutes[] = {"*", "*/15", "0", "30", "0,30", "5-10", "*/7", "59", "15"};
    const char *hours[] = {"*", "1", "2", "1-3", "*/2", "2,3", "0", "23", "3"};
    const char *doms[] = {"*", "*", "1", "29", "31", "*/2", "25-31", "4"};
    const char *months[] = {"*", "*", "3", "10,11", "3,4,10", "*/2", "12"};
    const char *dows[] = {"*", "*", "0", "1-5", "SUN", "6", "*/3"};
    uint64_t rng = 0x9e3779b97f4a7c15u;
    auto next = [&rng](uint64_t n) {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        return rng % n;
    };
    int compared = 0, loaded = 0;
    for (const ZoneCase &zc : zones) {
        auto z = zone(zc.name);
        if (!z) continue;
        loaded++;
        for (int64_t transition : zc.transitions) {
            for (int i = 0; i < 100; i++) {
                char expr[96];
                std::snprintf(expr, sizeof expr, "%s %s %s %s %s", minutes[next(9)], hours[next(9)],
                              doms[next(8)], months[next(7)], dows[next(7)]);
                const CronParseResult r = pgclaim::parse_cron(expr);
                if (!r.ok) continue;
                // from up to three hours before the transition to three after, any
                // second; then the next fires in a chain
                int64_t after = transition - 3 * 3600 + static_cast<int64_t>(next(6 * 3600));
                const int64_t horizon = 2 * 86400;
                for (int k = 0; k < 4; k++) {
                    const int64_t want = reference_next(r.schedule, *z, after, horizon);
                    int64_t got = 0;
                    const bool found = pgclaim::next_fire(r.schedule, *z, after * kMicros, &got);
                    if (want < 0) {
                        if (found) {
                            EXPECT_GT(got / kMicros, after + horizon)
                                << zc.name << " '" << expr << "' after " << local_text(*z, after);
                        }
                        break;
                    }
                    ASSERT_TRUE(found) << zc.name << " '" << expr << "' after "
                                       << local_text(*z, after);
                    ASSERT_EQ(local_text(*z, got / kMicros), local_text(*z, want))
                        << zc.name << " '" << expr << "' after " << local_text(*z, after);
                    after = want;
                }
                compared++;
            }
        }
    }
    if (loaded == 0) GTEST_SKIP() << "no time zone files under /usr/share/zoneinfo (tzdata)";
    EXPECT_GT(compared, 400);
}
