// Test-only time zone rules read from a compiled TZif file (RFC 8536), such as
// /usr/share/zoneinfo/Europe/Berlin. The server uses PostgreSQL's pg_tz instead.
//
// Reads the 64-bit data block of version 2+ files and the POSIX TZ footer for
// instants past the last listed transition (slim files list few). Footer rules
// of the form STD OFFSET [DST [OFFSET] ,Mm.w.d[/time],Mm.w.d[/time]] are
// understood; a footer with another rule form is treated as absent.
#pragma once

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "core/cron.hpp"

namespace cron_test {

class TzifZone final : public pgclaim::ZoneRules {
public:
    // Null when the file is missing or unreadable.
    static std::unique_ptr<TzifZone> load(const std::string &name,
                                          const std::string &dir = "/usr/share/zoneinfo") {
        std::ifstream in(dir + "/" + name, std::ios::binary);
        if (!in) return nullptr;
        std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        std::unique_ptr<TzifZone> z(new TzifZone());
        if (!z->parse(data)) return nullptr;
        return z;
    }

    int32_t utc_offset_at(int64_t t) const noexcept override {
        if (at_.empty() || t < at_.front()) {
            if (at_.empty() && has_rule_) return rule_offset_at(t);
            return initial_offset_;
        }
        if (t >= at_.back() && has_rule_) return rule_offset_at(t);
        // last transition <= t
        const auto it = std::upper_bound(at_.begin(), at_.end(), t);
        return offset_after_[static_cast<size_t>(it - at_.begin()) - 1];
    }

    bool next_transition(int64_t t, pgclaim::ZoneTransition *out) const noexcept override {
        const auto it = std::upper_bound(at_.begin(), at_.end(), t);
        if (it != at_.end()) {
            const size_t i = static_cast<size_t>(it - at_.begin());
            out->at = at_[i];
            out->offset_before = i == 0 ? initial_offset_ : offset_after_[i - 1];
            out->offset_after = offset_after_[i];
            return true;
        }
        if (!has_rule_) return false;
        // rule transitions after t (and after the listed ones)
        const int64_t year = year_of(t);
        for (int64_t y = year - 1; y <= year + 1; y++) {
            Pair p = rule_transitions(y);
            const Tr cand[2] = {p.first, p.second};
            for (const Tr &c : cand) {
                if (c.at > t) {
                    out->at = c.at;
                    out->offset_before = c.offset_before;
                    out->offset_after = c.offset_after;
                    return true;
                }
            }
        }
        return false;
    }

private:
    struct Tr {
        int64_t at;
        int32_t offset_before, offset_after;
    };
    struct Pair {
        Tr first, second;  // in time order
    };
    struct RuleDate {
        int month, week, weekday;
        int64_t time;  // seconds after local midnight
    };

    static int64_t be(const std::string &d, size_t pos, int bytes) {
        uint64_t v = 0;
        for (int i = 0; i < bytes; i++) v = (v << 8) | static_cast<unsigned char>(d[pos + i]);
        if (bytes == 4) return static_cast<int32_t>(static_cast<uint32_t>(v));
        return static_cast<int64_t>(v);
    }

    bool parse(const std::string &d) {
        if (d.size() < 44 || d.compare(0, 4, "TZif") != 0) return false;
        const char version = d[4];
        size_t pos = 0;
        auto counts = [&](size_t at, int64_t c[6]) {
            for (int i = 0; i < 6; i++) c[i] = be(d, at + 20 + 4 * i, 4);
        };
        int64_t c[6];  // isutcnt isstdcnt leapcnt timecnt typecnt charcnt
        counts(0, c);
        int time_bytes = 4;
        pos = 44;
        if (version >= '2') {
            // skip the 32-bit block
            pos += c[3] * 4 + c[3] + c[4] * 6 + c[5] + c[2] * 8 + c[1] + c[0];
            if (d.size() < pos + 44 || d.compare(pos, 4, "TZif") != 0) return false;
            counts(pos, c);
            pos += 44;
            time_bytes = 8;
        }
        const int64_t timecnt = c[3], typecnt = c[4];
        const size_t need = pos + timecnt * time_bytes + timecnt + typecnt * 6 + c[5] +
                            c[2] * (time_bytes + 4) + c[1] + c[0];
        if (d.size() < need || typecnt < 1) return false;
        std::vector<int64_t> at(timecnt);
        for (int64_t i = 0; i < timecnt; i++) at[i] = be(d, pos + i * time_bytes, time_bytes);
        pos += timecnt * time_bytes;
        std::vector<int> idx(timecnt);
        for (int64_t i = 0; i < timecnt; i++) idx[i] = static_cast<unsigned char>(d[pos + i]);
        pos += timecnt;
        std::vector<int32_t> utoff(typecnt);
        for (int64_t i = 0; i < typecnt; i++)
            utoff[i] = static_cast<int32_t>(be(d, pos + i * 6, 4));
        pos = need;
        initial_offset_ = utoff[0];
        for (int64_t i = 0; i < timecnt; i++) {
            if (idx[i] >= typecnt) return false;
            at_.push_back(at[i]);
            offset_after_.push_back(utoff[idx[i]]);
        }
        if (version >= '2' && pos < d.size() && d[pos] == '\n') {
            const size_t end = d.find('\n', pos + 1);
            if (end != std::string::npos) parse_footer(d.substr(pos + 1, end - pos - 1));
        }
        return true;
    }

    // --- POSIX TZ footer -------------------------------------------------

    static bool name(const std::string &s, size_t *p) {
        if (*p < s.size() && s[*p] == '<') {
            const size_t e = s.find('>', *p);
            if (e == std::string::npos) return false;
            *p = e + 1;
            return true;
        }
        const size_t b = *p;
        while (*p < s.size() && std::isalpha(static_cast<unsigned char>(s[*p]))) (*p)++;
        return *p - b >= 3;
    }

    // [+-]hh[:mm[:ss]] as seconds
    static bool hms(const std::string &s, size_t *p, int64_t *out) {
        int sign = 1;
        if (*p < s.size() && (s[*p] == '+' || s[*p] == '-')) sign = s[(*p)++] == '-' ? -1 : 1;
        int64_t parts[3] = {0, 0, 0};
        for (int k = 0; k < 3; k++) {
            if (k > 0) {
                if (*p >= s.size() || s[*p] != ':') break;
                (*p)++;
            }
            const size_t b = *p;
            while (*p < s.size() && std::isdigit(static_cast<unsigned char>(s[*p])))
                parts[k] = parts[k] * 10 + (s[(*p)++] - '0');
            if (*p == b) return false;
        }
        *out = sign * (parts[0] * 3600 + parts[1] * 60 + parts[2]);
        return true;
    }

    static bool rule_date(const std::string &s, size_t *p, RuleDate *r) {
        if (*p >= s.size() || s[*p] != 'M') return false;
        (*p)++;
        int v[3] = {0, 0, 0};
        for (int k = 0; k < 3; k++) {
            if (k > 0) {
                if (*p >= s.size() || s[*p] != '.') return false;
                (*p)++;
            }
            const size_t b = *p;
            while (*p < s.size() && std::isdigit(static_cast<unsigned char>(s[*p])))
                v[k] = v[k] * 10 + (s[(*p)++] - '0');
            if (*p == b) return false;
        }
        r->month = v[0];
        r->week = v[1];
        r->weekday = v[2];
        r->time = 7200;
        if (*p < s.size() && s[*p] == '/') {
            (*p)++;
            if (!hms(s, p, &r->time)) return false;
        }
        return r->month >= 1 && r->month <= 12 && r->week >= 1 && r->week <= 5 &&
               r->weekday >= 0 && r->weekday <= 6;
    }

    void parse_footer(const std::string &s) {
        size_t p = 0;
        int64_t std_west = 0, dst_west = 0;
        if (!name(s, &p) || !hms(s, &p, &std_west)) return;
        std_offset_ = static_cast<int32_t>(-std_west);
        if (p == s.size()) {
            // fixed offset after the last transition
            has_rule_ = false;
            return;
        }
        if (!name(s, &p)) return;
        dst_west = std_west - 3600;
        if (p < s.size() && s[p] != ',' && !hms(s, &p, &dst_west)) return;
        dst_offset_ = static_cast<int32_t>(-dst_west);
        if (p >= s.size() || s[p] != ',') return;
        p++;
        if (!rule_date(s, &p, &start_)) return;
        if (p >= s.size() || s[p] != ',') return;
        p++;
        if (!rule_date(s, &p, &end_)) return;
        if (p != s.size()) return;
        has_rule_ = true;
    }

    static int64_t year_of(int64_t t) {
        int64_t y;
        int m, d;
        pgclaim::civil_from_days(t >= 0 ? t / 86400 : -((-t + 86399) / 86400), &y, &m, &d);
        return y;
    }

    static int64_t local_of(int64_t year, const RuleDate &r) {
        const int64_t first = pgclaim::days_from_civil(year, r.month, 1);
        const int wd_first = static_cast<int>(((first + 4) % 7 + 7) % 7);
        int day = 1 + (r.weekday - wd_first + 7) % 7 + 7 * (r.week - 1);
        while (day > pgclaim::days_in_month(year, r.month)) day -= 7;
        return (first + day - 1) * 86400 + r.time;
    }

    // The year's two transitions, in time order. DST starts at the start
    // rule's local (standard) time and ends at the end rule's local (daylight) time.
    Pair rule_transitions(int64_t year) const {
        const Tr on{local_of(year, start_) - std_offset_, std_offset_, dst_offset_};
        const Tr off{local_of(year, end_) - dst_offset_, dst_offset_, std_offset_};
        return on.at < off.at ? Pair{on, off} : Pair{off, on};
    }

    int32_t rule_offset_at(int64_t t) const {
        const int64_t year = year_of(t);
        int32_t offset = rule_transitions(year - 1).second.offset_after;
        for (int64_t y = year - 1; y <= year + 1; y++) {
            const Pair p = rule_transitions(y);
            if (p.first.at <= t) offset = p.first.offset_after;
            if (p.second.at <= t) offset = p.second.offset_after;
        }
        return offset;
    }

    std::vector<int64_t> at_;
    std::vector<int32_t> offset_after_;
    int32_t initial_offset_ = 0;
    bool has_rule_ = false;
    int32_t std_offset_ = 0, dst_offset_ = 0;
    RuleDate start_{}, end_{};
};

}  // namespace cron_test
