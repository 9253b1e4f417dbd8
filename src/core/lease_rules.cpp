// Pure layer: never includes postgres.h.
#include "core/lease_rules.hpp"

#include <limits>
#include <string>
#include <vector>

#include "core/error.hpp"

namespace pgclaim {

void check_lease_name(std::string_view name) {
    if (name.empty())
        throw Error(sqlstate::kInvalidName, "lease name must not be empty");
    if (name.size() > static_cast<size_t>(kMaxLeaseNameBytes))
        throw Error(sqlstate::kInvalidName,
                    "lease name is too long: " + std::to_string(name.size()) +
                        " bytes, the maximum is " + std::to_string(kMaxLeaseNameBytes),
                    "Hash long names (for example with md5()) before using them as lease names.");
}

void check_guard_key(std::string_view key) {
    if (key.empty()) throw Error(sqlstate::kInvalidValue, "key must not be empty");
    if (key.size() > static_cast<size_t>(kMaxGuardKeyBytes))
        throw Error(sqlstate::kInvalidValue,
                    "key is too long: " + std::to_string(key.size()) + " bytes, the maximum is " +
                        std::to_string(kMaxGuardKeyBytes),
                    "Hash long keys (for example with md5()) before using them.");
}

void check_permits(int64_t permits) { check_range("permits", permits, 1, kMaxPermits); }

SlotPlan plan_slots(std::string_view name, int32_t permits, const HolderRow *rows, int nrows,
                    int64_t now, int32_t *free_slots) {
    SlotPlan plan{0, 0, std::numeric_limits<int64_t>::max()};
    std::vector<bool> taken(static_cast<size_t>(permits), false);
    for (int i = 0; i < nrows; ++i) {
        const HolderRow &r = rows[i];
        if (r.expires_at <= now) continue;  // expired: its slot is free
        if (r.permits != permits || r.slot < 0 || r.slot >= permits)
            throw Error(sqlstate::kLeaseMismatch,
                        "lease \"" + std::string(name) + "\" is held " +
                            (r.permits == 0 ? std::string("in shared mode")
                                            : "with " + std::to_string(r.permits) + " permit" +
                                                  (r.permits == 1 ? "" : "s")) +
                            ", not " + std::to_string(permits) +
                            (r.permits == 0 ? std::string(" permit") + (permits == 1 ? "" : "s")
                                            : std::string()),
                        "Every caller of a named lease must pass the same permits while it has "
                        "live holders.");
        ++plan.live;
        taken[static_cast<size_t>(r.slot)] = true;
        if (r.expires_at < plan.next_expiry) plan.next_expiry = r.expires_at;
    }
    for (int32_t s = 0; s < permits; ++s)
        if (!taken[static_cast<size_t>(s)]) free_slots[plan.nfree++] = s;
    return plan;
}

int64_t next_wait_us(int64_t now, int64_t deadline, int64_t next_expiry, bool busy,
                     int64_t poll_cap_us) noexcept {
    if (deadline <= now) return 0;
    int64_t until = deadline;
    if (next_expiry > now && next_expiry < until) until = next_expiry;
    int64_t us = until - now;
    if (next_expiry <= now) us = 0;  // an expiry passed already: look again at once
    if (busy && us > poll_cap_us) us = poll_cap_us;
    return us;
}

}  // namespace pgclaim
