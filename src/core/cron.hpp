// Pure layer: never includes postgres.h.
//
// Cron expressions of claim.schedule and the computation of their next fire
// instant in a time zone.
//
// Syntax
//   Five fields, separated by spaces or tabs:
//       minute (0-59)  hour (0-23)  day of month (1-31)  month (1-12)  day of week (0-7)
//   or six, with a leading second field (0-59) for sub-minute schedules:
//       second  minute  hour  day of month  month  day of week
//   Each field is a comma-separated list of items; an item is
//       *            every value of the field
//       N            one value
//       N-M          a range, N <= M
//       */S  N-M/S   every S-th value of the field or of the range, from its start
//       N/S          every S-th value from N to the end of the field
//   Months may be written JAN-DEC and days of week SUN-SAT (any case), also in
//   ranges. Day of week 0 and 7 are both Sunday (5-7 is Friday to Sunday).
//   Macros, alone: @yearly and @annually (0 0 1 1 *), @monthly (0 0 1 * *),
//   @weekly (0 0 * * 0), @daily and @midnight (0 0 * * *), @hourly (0 * * * *).
//
// Day of month and day of week combine as in Vixie cron: when both fields are
// restricted (neither starts with '*'), a day matches when either matches;
// otherwise (one of them starts with '*', including '*/S') both must match.
// So "0 0 1,15 * MON" fires on the 1st, the 15th and every Monday, while
// "0 0 */2 * MON" fires on Mondays that fall on an odd day of the month.
//
// A schedule that can never fire ("0 0 30 2 *", "0 0 31 4,6,9,11 *") is an
// error at parse time; every accepted schedule has a next fire instant within
// a bounded search (kMaxSearchYears).
//
// Time zones (the schedule's fields are local wall-clock times in its zone)
//   - A local time skipped by a forward change (a gap) belongs to no instant.
//     When the hour field is restricted (does not start with '*'), every
//     matching local time in the gap fires once, together, at the first
//     instant after the gap: "30 2 * * *" in Europe/Berlin on 2026-03-29
//     fires at 03:00 CEST. When the hour field starts with '*' ("0 * * * *",
//     "*/20 * * * *", "30 */2 * * *") the schedule is periodic within the
//     day and the skipped times are dropped: "30 * * * *" fires at 01:30 CET
//     and then 03:30 CEST that day, with no extra run at 03:00 off its rhythm,
//     and "0 * * * *" simply has no 02:00 (its 03:00 run is its own). This is
//     the rule standard cron implementations follow for fixed-time jobs
//     against wildcard-hour jobs.
//   - A local time repeated by a backward change (an overlap) fires once, at
//     its first occurrence, whatever the schedule: "*/15 1 * * *" in
//     America/New_York on 2026-11-01 fires at 01:00, 01:15, 01:30 and 01:45
//     EDT and not again in the repeated hour; "0 * * * *" fires at 01:00 EDT
//     and next at 02:00 EST, and "* * * * *" does not fire during the repeated
//     hour (01:00-01:59 EST): every local time it names fired in the first pass.
//
// Nothing here throws or allocates: the server layer calls it from frames that
// also call the server.
#pragma once

#include <cstdint>

namespace pgclaim {

// Years searched ahead of `after` before next_fire gives up. Accepted
// schedules fire far sooner (Feb 29 on a given weekday recurs within 40
// years); this bounds the work for any zone.
inline constexpr int kMaxSearchYears = 50;

// Microseconds between the Unix epoch and PostgreSQL's (2000-01-01 00:00 UTC):
// a TimestampTz is (unix_micros - kPgEpochUnixMicros).
inline constexpr int64_t kPgEpochUnixMicros = INT64_C(946684800000000);

// A parsed schedule: one bit per allowed value. Plain data.
struct CronSchedule {
    uint64_t seconds;        // bits 0-59; only bit 0 in a five-field expression
    uint64_t minutes;        // bits 0-59
    uint32_t hours;          // bits 0-23
    uint32_t days_of_month;  // bits 1-31
    uint16_t months;         // bits 1-12
    uint8_t days_of_week;    // bits 0-6, 0 = Sunday
    bool dom_star;           // day-of-month field starts with '*'
    bool dow_star;           // day-of-week field starts with '*'
    bool hour_star;          // hour field starts with '*' (see the gap rule above)
    bool has_seconds;        // six-field form
};

// Whether the local civil date/time matches (month 1-12, day 1-31, weekday 0-6).
bool cron_matches(const CronSchedule &s, int month, int day, int weekday, int hour, int minute,
                  int second) noexcept;

// A change of a zone's UTC offset.
struct ZoneTransition {
    int64_t at;              // first instant of the new offset, UTC seconds since the Unix epoch
    int32_t offset_before;   // seconds east of UTC in effect just before `at`
    int32_t offset_after;    // seconds east of UTC in effect from `at`
};

// The rules of a time zone, as next_fire needs them. Offsets are seconds
// east of UTC (Berlin in winter: +3600). Implementations must not throw.
//
// PostgreSQL's pg_tz (pgtime.h) maps onto it directly:
//
//   class PgZone final : public pgclaim::ZoneRules {
//   public:
//       explicit PgZone(const pg_tz *tz) : tz_(tz) {}
//       int32_t utc_offset_at(int64_t t) const noexcept override {
//           pg_time_t pt = t;
//           const struct pg_tm *tm = pg_localtime(&pt, tz_);
//           return tm ? static_cast<int32_t>(tm->tm_gmtoff) : 0;
//       }
//       bool next_transition(int64_t t, pgclaim::ZoneTransition *out) const noexcept override {
//           pg_time_t pt = t, boundary;
//           long before, after;
//           int before_dst, after_dst;
//           if (pg_next_dst_boundary(&pt, &before, &before_dst, &boundary, &after, &after_dst,
//                                    tz_) != 1)
//               return false;
//           *out = {boundary, static_cast<int32_t>(before), static_cast<int32_t>(after)};
//           return true;
//       }
//   private:
//       const pg_tz *tz_;
//   };
//
// (pg_next_dst_boundary reports the first listed transition strictly after t;
// pg_tzset(name) returns NULL for an unknown zone name.) Transitions where the
// offset does not change are allowed.
class ZoneRules {
public:
    virtual ~ZoneRules() = default;
    // Offset in effect at the UTC instant `utc_seconds`.
    virtual int32_t utc_offset_at(int64_t utc_seconds) const noexcept = 0;
    // The first transition strictly after `utc_seconds`; false when there is none.
    virtual bool next_transition(int64_t utc_seconds, ZoneTransition *out) const noexcept = 0;
};

// A zone with one fixed offset (UTC: 0).
class FixedOffsetZone final : public ZoneRules {
public:
    explicit FixedOffsetZone(int32_t offset_seconds = 0) noexcept : offset_(offset_seconds) {}
    int32_t utc_offset_at(int64_t) const noexcept override { return offset_; }
    bool next_transition(int64_t, ZoneTransition *) const noexcept override { return false; }

private:
    int32_t offset_;
};

// How a local wall-clock time maps to instants.
struct LocalTimeMapping {
    enum Kind { kUnique, kRepeated, kSkipped } kind;
    // kUnique, kRepeated: the first instant with that local time.
    // kSkipped: the first instant after the gap.
    int64_t utc_seconds;
    // kRepeated: the second instant with that local time.
    int64_t second_utc_seconds;
};

// Maps `local_seconds` (the local wall-clock time as seconds since
// 1970-01-01 00:00 of the local calendar) in `zone`. Never throws.
LocalTimeMapping map_local_time(const ZoneRules &zone, int64_t local_seconds) noexcept;

// The first fire instant of `s` in `zone` strictly after `after_micros`
// (UTC microseconds since the Unix epoch). Fire instants are whole seconds.
// Returns false when there is none within kMaxSearchYears or before the year
// 9999 ends. Never throws.
bool next_fire(const CronSchedule &s, const ZoneRules &zone, int64_t after_micros,
               int64_t *fire_micros) noexcept;

// Calendar helpers (proleptic Gregorian), exposed for the tests and the server layer.
int64_t days_from_civil(int64_t year, int month, int day) noexcept;  // 1970-01-01 is 0
void civil_from_days(int64_t days, int64_t *year, int *month, int *day) noexcept;
int days_in_month(int64_t year, int month) noexcept;

}  // namespace pgclaim
