// Pure layer: never includes postgres.h.
//
// Calendar arithmetic, matching and the next-fire search of cron schedules in
// a time zone. The parser is in cron_parse.cpp
// (cron_parse.hpp).
#include "core/cron.hpp"

namespace pgclaim {

// ---------------------------------------------------------------------------
// calendar
// ---------------------------------------------------------------------------

namespace {

int64_t floor_div(int64_t a, int64_t b) noexcept {
    int64_t q = a / b;
    if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
    return q;
}

bool is_leap(int64_t y) noexcept { return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0; }

// 0 = Sunday; 1970-01-01 was a Thursday.
int weekday_of_days(int64_t days) noexcept {
    int64_t w = (days + 4) % 7;
    return static_cast<int>(w < 0 ? w + 7 : w);
}

}  // namespace

int days_in_month(int64_t year, int month) noexcept {
    static const int kDays[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    if (month == 2 && is_leap(year)) return 29;
    return kDays[month - 1];
}

// Counts days in 400-year eras that start on March 1, so that the leap day
// is the last day of an era-year and the month lengths from March on repeat
// in the pattern 31,30,31,30,31 (153 days per five months).
int64_t days_from_civil(int64_t year, int month, int day) noexcept {
    const int64_t y = month <= 2 ? year - 1 : year;
    const int64_t era = floor_div(y, 400);
    const int64_t year_of_era = y - era * 400;                        // 0..399
    const int64_t month_from_march = (month + 9) % 12;               // March = 0
    const int64_t day_of_year = (153 * month_from_march + 2) / 5 + day - 1;  // 0..365
    const int64_t day_of_era =
        year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;  // 0..146096
    return era * 146097 + day_of_era - 719468;  // 719468: days from 0000-03-01 to 1970-01-01
}

void civil_from_days(int64_t days, int64_t *year, int *month, int *day) noexcept {
    const int64_t z = days + 719468;
    const int64_t era = floor_div(z, 146097);
    const int64_t day_of_era = z - era * 146097;  // 0..146096
    const int64_t year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36524 - day_of_era / 146096) / 365;
    const int64_t day_of_year =
        day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    const int64_t month_from_march = (5 * day_of_year + 2) / 153;
    *day = static_cast<int>(day_of_year - (153 * month_from_march + 2) / 5 + 1);
    *month = static_cast<int>(month_from_march < 10 ? month_from_march + 3 : month_from_march - 9);
    *year = year_of_era + era * 400 + (*month <= 2 ? 1 : 0);
}

// ---------------------------------------------------------------------------
// matching and the civil-time search
// ---------------------------------------------------------------------------

namespace {

inline bool has_bit(uint64_t mask, int v) noexcept { return (mask >> v) & 1u; }

// The smallest set bit >= from, or -1.
inline int next_bit(uint64_t mask, int from, int limit) noexcept {
    if (from >= limit) return -1;
    const uint64_t rest = mask >> from;
    if (rest == 0) return -1;
    const int v = from + __builtin_ctzll(rest);
    return v < limit ? v : -1;
}

inline bool day_matches(const CronSchedule &s, int day, int weekday) noexcept {
    const bool dom = has_bit(s.days_of_month, day);
    const bool dow = has_bit(s.days_of_week, weekday);
    return (s.dom_star || s.dow_star) ? (dom && dow) : (dom || dow);
}

struct Civil {
    int64_t year;
    int month, day, hour, minute, second;
};

Civil civil_from_local(int64_t local) noexcept {
    Civil c;
    const int64_t days = floor_div(local, 86400);
    int64_t rest = local - days * 86400;
    civil_from_days(days, &c.year, &c.month, &c.day);
    c.hour = static_cast<int>(rest / 3600);
    rest %= 3600;
    c.minute = static_cast<int>(rest / 60);
    c.second = static_cast<int>(rest % 60);
    return c;
}

int64_t local_from_civil(const Civil &c) noexcept {
    return days_from_civil(c.year, c.month, c.day) * 86400 + c.hour * 3600 + c.minute * 60 +
           c.second;
}

void next_month(Civil *c) noexcept {
    if (++c->month > 12) {
        c->month = 1;
        c->year++;
    }
    c->day = 1;
    c->hour = c->minute = c->second = 0;
}

// The first civil time >= c that matches s, field by field: month, day, hour,
// minute, second. False past the end of year_limit.
bool next_civil_match(const CronSchedule &s, Civil c, int64_t year_limit, Civil *out) noexcept {
    for (;;) {
        if (c.year > year_limit) return false;
        if (!has_bit(s.months, c.month)) {
            const int m = next_bit(s.months, c.month, 13);
            if (m < 0) {
                c.year++;
                c.month = next_bit(s.months, 1, 13);
            } else {
                c.month = m;
            }
            c.day = 1;
            c.hour = c.minute = c.second = 0;
            continue;
        }
        const int dim = days_in_month(c.year, c.month);
        if (c.day > dim) {
            next_month(&c);
            continue;
        }
        int wd = weekday_of_days(days_from_civil(c.year, c.month, c.day));
        if (!day_matches(s, c.day, wd)) {
            int d = c.day;
            do {
                d++;
                wd = wd == 6 ? 0 : wd + 1;
            } while (d <= dim && !day_matches(s, d, wd));
            if (d > dim) {
                next_month(&c);
                continue;
            }
            c.day = d;
            c.hour = c.minute = c.second = 0;
        }
        const int h = next_bit(s.hours, c.hour, 24);
        if (h < 0) {
            c.day++;
            c.hour = c.minute = c.second = 0;
            continue;
        }
        if (h != c.hour) {
            c.hour = h;
            c.minute = c.second = 0;
        }
        const int mi = next_bit(s.minutes, c.minute, 60);
        if (mi < 0) {
            c.minute = c.second = 0;
            if (++c.hour == 24) {
                c.hour = 0;
                c.day++;
            }
            continue;
        }
        if (mi != c.minute) {
            c.minute = mi;
            c.second = 0;
        }
        const int sec = next_bit(s.seconds, c.second, 60);
        if (sec < 0) {
            c.second = 0;
            if (++c.minute == 60) {
                c.minute = 0;
                if (++c.hour == 24) {
                    c.hour = 0;
                    c.day++;
                }
            }
            continue;
        }
        c.second = sec;
        *out = c;
        return true;
    }
}

// Real offsets stay within a day of UTC; the walk starts this far before the
// local time so that its first interval holds or precedes every preimage.
constexpr int64_t kOffsetWindow = 2 * 86400;
constexpr int kMaxWalk = 64;

struct Mapping {
    LocalTimeMapping::Kind kind;
    int64_t first;            // first preimage, or the gap end
    int64_t second;           // second preimage (kRepeated)
    int64_t interval_end;     // end of the constant-offset interval of `first`, or INT64_MAX
    int32_t interval_offset;  // offset of that interval (for kSkipped: the offset after the gap)
};

Mapping map_local(const ZoneRules &zone, int64_t local) noexcept {
    Mapping m{LocalTimeMapping::kUnique, 0, 0, INT64_MAX, 0};
    int64_t start = local - kOffsetWindow;
    int32_t offset = zone.utc_offset_at(start);
    bool found = false;
    for (int i = 0; i < kMaxWalk; i++) {
        ZoneTransition tr;
        bool has = zone.next_transition(start, &tr);
        if (has && tr.at <= start) has = false;  // a broken zone: stop walking
        const int64_t end = has ? tr.at : INT64_MAX;
        const int64_t u = local - offset;
        if (!found) {
            if (u < start && i > 0) {
                // local lies between the previous interval's last local time and
                // this one's first: a gap that ends at `start`
                m.kind = LocalTimeMapping::kSkipped;
                m.first = start;
                m.interval_end = end;
                m.interval_offset = offset;
                return m;
            }
            if (u < end) {
                found = true;
                m.first = u;
                m.interval_end = end;
                m.interval_offset = offset;
            }
        } else {
            if (u < start) return m;  // this interval's local times are all later
            if (u < end) {
                m.kind = LocalTimeMapping::kRepeated;
                m.second = u;
                return m;
            }
        }
        if (!has || (found && tr.at > local + kOffsetWindow)) break;
        start = tr.at;
        offset = tr.offset_after;
    }
    if (!found) {
        // Only reachable with offsets beyond the window: take the local time as UTC shifted
        // by the last offset seen.
        m.first = local - offset;
        m.interval_offset = offset;
    }
    return m;
}

}  // namespace

bool cron_matches(const CronSchedule &s, int month, int day, int weekday, int hour, int minute,
                  int second) noexcept {
    if (month < 1 || month > 12 || day < 1 || day > 31 || weekday < 0 || weekday > 6 ||
        hour < 0 || hour > 23 || minute < 0 || minute > 59 || second < 0 || second > 59)
        return false;
    return has_bit(s.months, month) && day_matches(s, day, weekday) && has_bit(s.hours, hour) &&
           has_bit(s.minutes, minute) && has_bit(s.seconds, second);
}

LocalTimeMapping map_local_time(const ZoneRules &zone, int64_t local_seconds) noexcept {
    const Mapping m = map_local(zone, local_seconds);
    LocalTimeMapping out;
    out.kind = m.kind;
    out.utc_seconds = m.first;
    out.second_utc_seconds = m.kind == LocalTimeMapping::kRepeated ? m.second : m.first;
    return out;
}

bool next_fire(const CronSchedule &s, const ZoneRules &zone, int64_t after_micros,
               int64_t *fire_micros) noexcept {
    constexpr int64_t kMicros = 1000000;
    constexpr int64_t kLastYear = 9999;
    if (s.months == 0 || s.days_of_month == 0 || s.days_of_week == 0 || s.hours == 0 ||
        s.minutes == 0 || s.seconds == 0)
        return false;
    const int64_t after = floor_div(after_micros, kMicros);
    // Every instant in the year 9999 or later is out of range; so is the far past
    // (keeps the arithmetic below far from overflow).
    constexpr int64_t kFarPast = INT64_C(-62135596800) * 8;  // about year -13000
    if (after < kFarPast) return false;
    if (after >= days_from_civil(kLastYear + 1, 1, 1) * 86400) return false;

    Civil c = civil_from_local(after + zone.utc_offset_at(after));
    int64_t year_limit = c.year + kMaxSearchYears;
    if (year_limit > kLastYear) year_limit = kLastYear;

    // Each round moves c forward past a candidate, so the loop ends; the bound
    // only guards against a zone whose rules contradict themselves.
    for (int round = 0; round < 100000; round++) {
        Civil match;
        if (!next_civil_match(s, c, year_limit, &match)) return false;
        const int64_t local = local_from_civil(match);
        const Mapping m = map_local(zone, local);
        int64_t next_local = local + 1;
        if (m.kind != LocalTimeMapping::kSkipped) {
            if (m.first > after) {
                *fire_micros = m.first * kMicros;
                return true;
            }
            // Its first occurrence is past. When `after` lies beyond the interval of
            // that occurrence (in the repeat of an overlap), every local time up to
            // the end of that interval has fired already.
            if (m.interval_end != INT64_MAX && m.interval_end <= after) {
                const int64_t end_local = m.interval_end + m.interval_offset;
                if (end_local > next_local) next_local = end_local;
            }
        } else {
            if (!s.hour_star && m.first > after) {
                *fire_micros = m.first * kMicros;
                return true;
            }
            // Resume at the local time the gap ends on.
            const int64_t end_local = m.first + m.interval_offset;
            if (end_local > next_local) next_local = end_local;
        }
        c = civil_from_local(next_local);
    }
    return false;
}

}  // namespace pgclaim
