// Pure layer: never includes postgres.h.
//
// The cron parser (parse_cron). The next-fire search is in cron.cpp.
#include "core/cron_parse.hpp"

#include <cstdarg>
#include <cstdio>
#include <cstring>

namespace pgclaim {

// ---------------------------------------------------------------------------
// parser
// ---------------------------------------------------------------------------

namespace {

struct FieldSpec {
    const char *name;
    int min;
    int max;    // largest value accepted in the text (7 for day of week)
    int span;   // number of distinct values (largest step)
    const char *const *names;  // three-letter names for min, min+1, ... or null
};

const char *const kMonthNames[] = {"JAN", "FEB", "MAR", "APR", "MAY", "JUN",
                                   "JUL", "AUG", "SEP", "OCT", "NOV", "DEC", nullptr};
const char *const kDayNames[] = {"SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT", nullptr};

enum FieldKind { kSecond, kMinute, kHour, kDayOfMonth, kMonth, kDayOfWeek };

const FieldSpec kSpecs[] = {
    {"second", 0, 59, 60, nullptr},     {"minute", 0, 59, 60, nullptr},
    {"hour", 0, 23, 24, nullptr},       {"day of month", 1, 31, 31, nullptr},
    {"month", 1, 12, 12, kMonthNames},  {"day of week", 0, 7, 7, kDayNames},
};

bool is_space(char c) noexcept { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
bool is_digit(char c) noexcept { return c >= '0' && c <= '9'; }
bool is_alpha(char c) noexcept { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
char upper(char c) noexcept { return (c >= 'a' && c <= 'z') ? static_cast<char>(c - 32) : c; }

bool equal_ci(const char *a, int alen, const char *b) noexcept {
    const int blen = static_cast<int>(std::strlen(b));
    if (alen != blen) return false;
    for (int i = 0; i < alen; i++)
        if (upper(a[i]) != upper(b[i])) return false;
    return true;
}

class Parser {
public:
    Parser(const char *text, int len, CronParseResult *out) noexcept
        : text_(text), len_(len), out_(out) {}

    // Parses one field, text_[begin, end). Sets the bits into *mask.
    bool field(int number, FieldKind kind, int begin, int end, uint64_t *mask) noexcept {
        number_ = number;
        field_begin_ = begin;
        spec_ = &kSpecs[kind];
        kind_ = kind;
        *mask = 0;
        int p = begin;
        for (;;) {
            int item_end = p;
            while (item_end < end && text_[item_end] != ',') item_end++;
            if (item_end == p) return fail(p, "empty list item");
            if (!item(p, item_end, mask)) return false;
            if (item_end == end) break;
            p = item_end + 1;
            if (p == end) return fail(p, "empty list item");
        }
        return true;
    }

    __attribute__((format(printf, 3, 4))) bool fail(int offset, const char *fmt, ...) noexcept {
        char what[128];
        va_list ap;
        va_start(ap, fmt);
        std::vsnprintf(what, sizeof what, fmt, ap);
        va_end(ap);
        out_->ok = false;
        out_->position = offset + 1;
        out_->field = number_;
        out_->field_position = number_ > 0 ? field_begin_ + 1 : 0;
        if (number_ > 0)
            std::snprintf(out_->message, sizeof out_->message, "field %d (%s): %s at position %d",
                          number_, spec_->name, what, offset + 1);
        else
            std::snprintf(out_->message, sizeof out_->message, "%s at position %d", what,
                          offset + 1);
        return false;
    }

    void set_field(int number, int begin, const FieldSpec *spec) noexcept {
        number_ = number;
        field_begin_ = begin;
        spec_ = spec;
    }

private:
    // A number or (in month and day-of-week fields) a name at text_[*p, end).
    // `range_end` makes SUN mean 7 so that FRI-SUN reads as Friday to Sunday.
    bool value(int *p, int end, bool range_end, int *out) noexcept {
        const int start = *p;
        if (start < end && is_digit(text_[start])) {
            int64_t v = 0;
            int q = start;
            while (q < end && is_digit(text_[q])) {
                v = v * 10 + (text_[q] - '0');
                if (v > 1000000) {
                    while (q < end && is_digit(text_[q])) q++;
                    return fail(start, "value %.*s out of range %d-%d", q - start, text_ + start,
                                spec_->min, spec_->max);
                }
                q++;
            }
            if (v < spec_->min || v > spec_->max)
                return fail(start, "value %d out of range %d-%d", static_cast<int>(v), spec_->min,
                            spec_->max);
            *p = q;
            *out = static_cast<int>(v);
            return true;
        }
        if (start < end && is_alpha(text_[start])) {
            int q = start;
            while (q < end && is_alpha(text_[q])) q++;
            if (spec_->names == nullptr)
                return fail(start, "names are not allowed here, found \"%.*s\"", q - start,
                            text_ + start);
            for (int i = 0; spec_->names[i] != nullptr; i++) {
                if (equal_ci(text_ + start, q - start, spec_->names[i])) {
                    *out = spec_->min + i;
                    if (kind_ == kDayOfWeek && range_end && i == 0) *out = 7;
                    *p = q;
                    return true;
                }
            }
            return fail(start, "unknown %s name \"%.*s\"", kind_ == kMonth ? "month" : "day",
                        q - start, text_ + start);
        }
        if (start >= end) return fail(start, "missing value");
        return unexpected(start);
    }

    bool unexpected(int offset) noexcept {
        const unsigned char c = static_cast<unsigned char>(text_[offset]);
        if (c >= 0x21 && c < 0x7f) return fail(offset, "unexpected character '%c'", c);
        return fail(offset, "unexpected byte 0x%02x", c);
    }

    bool item(int begin, int end, uint64_t *mask) noexcept {
        int p = begin;
        int lo, hi;
        bool star = false;
        bool range = false;
        if (text_[p] == '*') {
            star = true;
            lo = spec_->min;
            hi = kind_ == kDayOfWeek ? 6 : spec_->max;
            p++;
        } else {
            if (!value(&p, end, false, &lo)) return false;
            hi = lo;
            if (p < end && text_[p] == '-') {
                p++;
                range = true;
                if (!value(&p, end, true, &hi)) return false;
                if (hi < lo)
                    return fail(begin, "range %.*s is reversed", p - begin, text_ + begin);
            }
        }
        int step = 1;
        if (p < end && text_[p] == '/') {
            p++;
            const int step_at = p;
            if (p >= end) return fail(p, "missing step");
            if (!is_digit(text_[p])) return unexpected(p);
            int64_t v = 0;
            while (p < end && is_digit(text_[p])) {
                if (v <= 1000000) v = v * 10 + (text_[p] - '0');
                p++;
            }
            if (v < 1 || v > spec_->span)
                return fail(step_at, "step %.*s out of range 1-%d", p - step_at, text_ + step_at,
                            spec_->span);
            step = static_cast<int>(v);
            // N/S: from N to the end of the field
            if (!star && !range) hi = kind_ == kDayOfWeek ? (lo == 7 ? 7 : 6) : spec_->max;
        }
        if (p < end) return unexpected(p);
        for (int v = lo; v <= hi; v += step)
            *mask |= uint64_t{1} << (v == 7 && kind_ == kDayOfWeek ? 0 : v);
        return true;
    }

    const char *text_;
    int len_;
    CronParseResult *out_;
    int number_ = 0;
    int field_begin_ = 0;
    const FieldSpec *spec_ = nullptr;
    FieldKind kind_ = kSecond;
};

struct Macro {
    const char *name;
    const char *expansion;
};

const Macro kMacros[] = {
    {"@yearly", "0 0 1 1 *"}, {"@annually", "0 0 1 1 *"}, {"@monthly", "0 0 1 * *"},
    {"@weekly", "0 0 * * 0"}, {"@daily", "0 0 * * *"},    {"@midnight", "0 0 * * *"},
    {"@hourly", "0 * * * *"},
};

void init_result(CronParseResult *r) noexcept {
    std::memset(r, 0, sizeof *r);
}

// Whether some listed day of month exists in some listed month (Feb 29 counts).
bool some_day_exists(uint32_t doms, uint16_t months) noexcept {
    for (int m = 1; m <= 12; m++) {
        if (!(months & (1u << m))) continue;
        const int longest = m == 2 ? 29 : days_in_month(2001, m);
        for (int d = 1; d <= longest; d++)
            if (doms & (1u << d)) return true;
    }
    return false;
}

}  // namespace

CronParseResult parse_cron(const char *expr) noexcept {
    return parse_cron(expr, expr ? static_cast<int>(std::strlen(expr)) : 0);
}

CronParseResult parse_cron(const char *expr, int len) noexcept {
    CronParseResult r;
    init_result(&r);
    if (expr == nullptr || len < 0) len = 0;
    Parser parser(expr, len, &r);

    int p = 0;
    while (p < len && is_space(expr[p])) p++;
    if (p == len) {
        parser.fail(0, "empty cron expression");
        return r;
    }

    if (expr[p] == '@') {
        const int name_at = p;
        while (p < len && !is_space(expr[p])) p++;
        const int name_end = p;
        while (p < len && is_space(expr[p])) p++;
        if (p < len) {
            parser.fail(p, "a macro stands alone, found \"%.*s\" after %.*s", len - p, expr + p,
                        name_end - name_at, expr + name_at);
            return r;
        }
        for (const Macro &m : kMacros) {
            if (equal_ci(expr + name_at, name_end - name_at, m.name)) {
                r = parse_cron(m.expansion);
                return r;
            }
        }
        parser.fail(name_at,
                    "unknown macro \"%.*s\" (known: @yearly @annually @monthly @weekly @daily "
                    "@midnight @hourly)",
                    name_end - name_at, expr + name_at);
        return r;
    }

    int begins[7], ends[7];
    int count = 0;
    while (p < len) {
        if (count == 6) {
            parser.fail(p, "too many fields: expected 5 (minute hour day-of-month month "
                           "day-of-week) or 6 (with a leading second)");
            return r;
        }
        begins[count] = p;
        while (p < len && !is_space(expr[p])) p++;
        ends[count] = p;
        count++;
        while (p < len && is_space(expr[p])) p++;
    }
    if (count < 5) {
        parser.fail(len, "too few fields: expected 5 (minute hour day-of-month month "
                         "day-of-week) or 6 (with a leading second), found %d",
                    count);
        return r;
    }

    const bool with_seconds = count == 6;
    const int first = with_seconds ? 0 : 1;
    uint64_t masks[6] = {1, 0, 0, 0, 0, 0};  // second 0 in the five-field form
    for (int k = first; k < 6; k++) {
        const int i = k - first;
        if (!parser.field(i + 1, static_cast<FieldKind>(k), begins[i], ends[i], &masks[k]))
            return r;
    }

    CronSchedule &s = r.schedule;
    s.seconds = masks[kSecond];
    s.minutes = masks[kMinute];
    s.hours = static_cast<uint32_t>(masks[kHour]);
    s.days_of_month = static_cast<uint32_t>(masks[kDayOfMonth]);
    s.months = static_cast<uint16_t>(masks[kMonth]);
    s.days_of_week = static_cast<uint8_t>(masks[kDayOfWeek]);
    s.hour_star = expr[begins[kHour - first]] == '*';
    s.dom_star = expr[begins[kDayOfMonth - first]] == '*';
    s.dow_star = expr[begins[kDayOfWeek - first]] == '*';
    s.has_seconds = with_seconds;

    // With a '*' in either day field both must match, so the listed days of
    // month must exist in a listed month. (When both are restricted, every
    // listed weekday occurs in every month.)
    if (!s.dom_star && s.dow_star && !some_day_exists(s.days_of_month, s.months)) {
        const int i = kDayOfMonth - first;
        parser.set_field(i + 1, begins[i], &kSpecs[kDayOfMonth]);
        parser.fail(begins[i],
                    "none of these days occurs in the months of field %d, so the schedule "
                    "never fires",
                    kMonth - first + 1);
        return r;
    }
    r.ok = true;
    return r;
}

}  // namespace pgclaim
