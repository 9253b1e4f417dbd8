// Pure layer: never includes postgres.h.
#include "core/rules.hpp"

#include <string>

#include "core/error.hpp"

namespace pgclaim {

namespace {
bool is_alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
}  // namespace

void check_queue_name(std::string_view name) {
    if (name.empty() || name.size() > static_cast<size_t>(kMaxQueueNameBytes))
        throw Error(sqlstate::kInvalidName,
                    "invalid queue name: it must be 1 to 63 bytes long",
                    "Queue names follow identifier rules: a letter or underscore, then letters, "
                    "digits, underscores or dollar signs.");
    if (!(is_alpha(name[0]) || name[0] == '_'))
        throw Error(sqlstate::kInvalidName,
                    "invalid queue name \"" + std::string(name) +
                        "\": it must start with a letter or an underscore",
                    "Queue names follow identifier rules: a letter or underscore, then letters, "
                    "digits, underscores or dollar signs.");
    for (char c : name) {
        if (!(is_alpha(c) || is_digit(c) || c == '_' || c == '$'))
            throw Error(sqlstate::kInvalidName,
                        "invalid queue name \"" + std::string(name) +
                            "\": only letters, digits, underscores and dollar signs are allowed",
                        "Queue names follow identifier rules: a letter or underscore, then "
                        "letters, digits, underscores or dollar signs.");
    }
}

static std::string describe_us(int64_t us) {
    auto unit = [](int64_t n, const char *one, const char *many) {
        return std::to_string(n) + " " + (n == 1 ? one : many);
    };
    const int64_t hour = 3600 * kUsecPerSec;
    if (us % (24 * hour) == 0) return unit(us / (24 * hour), "day", "days");
    if (us % hour == 0) return unit(us / hour, "hour", "hours");
    if (us % kUsecPerSec == 0) return unit(us / kUsecPerSec, "second", "seconds");
    return std::to_string(us) + " microseconds";
}

void check_positive_duration(const char *what, int64_t us, int64_t max_us) {
    if (us <= 0)
        throw Error(sqlstate::kInvalidValue, std::string(what) + " must be positive",
                    "Give a positive interval, for example '30 seconds'.");
    if (us > max_us)
        throw Error(sqlstate::kInvalidValue,
                    std::string(what) + " is too long: the maximum is " + describe_us(max_us),
                    "Renew long work with a heartbeat instead of one very long " +
                        std::string(what) + ".");
}

void check_nonnegative_duration(const char *what, int64_t us, int64_t max_us) {
    if (us < 0)
        throw Error(sqlstate::kInvalidValue, std::string(what) + " must not be negative");
    if (us > max_us)
        throw Error(sqlstate::kInvalidValue,
                    std::string(what) + " is too long: the maximum is " + describe_us(max_us));
}

void check_range(const char *what, int64_t value, int64_t lo, int64_t hi) {
    if (value < lo || value > hi)
        throw Error(sqlstate::kInvalidValue,
                    std::string(what) + " must be between " + std::to_string(lo) + " and " +
                        std::to_string(hi) + ", got " + std::to_string(value));
}

int64_t backoff_delay_us(int64_t base_us, int attempt) noexcept {
    if (base_us <= 0) return 0;
    if (attempt < 1) attempt = 1;
    int64_t delay = base_us;
    for (int i = 1; i < attempt; ++i) {
        if (delay >= kMaxBackoffUs / 2) return kMaxBackoffUs > base_us ? kMaxBackoffUs : base_us;
        delay *= 2;
    }
    if (delay > kMaxBackoffUs && base_us <= kMaxBackoffUs) return kMaxBackoffUs;
    return delay;
}

}  // namespace pgclaim
