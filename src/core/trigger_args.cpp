// Pure layer: never includes postgres.h.
#include "core/trigger_args.hpp"

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <string>

#include "core/error.hpp"
#include "core/rules.hpp"

namespace pgclaim {

namespace {

const char *kUsage =
    "Use EXECUTE FUNCTION claim.enqueue_trigger('queue' [, 'group_column' [, 'coalesce' | "
    "'priority=N' | 'batch=N' | 'fair_key=column' ...]]); pass '' as group_column for none.";

std::string lower(std::string s) {
    for (auto &c : s)
        if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    return s;
}

std::string prefix(const char *trigger) {
    return std::string("trigger \"") + (trigger ? trigger : "?") + "\": ";
}

int32_t parse_priority(const char *trigger, const std::string &value) {
    if (value.empty())
        throw Error(sqlstate::kInvalidValue, prefix(trigger) + "option priority needs a value",
                    "Write it as 'priority=10'.");
    errno = 0;
    char *end = nullptr;
    long long v = std::strtoll(value.c_str(), &end, 10);
    if (errno != 0 || end == value.c_str() || *end != '\0' || v < INT32_MIN || v > INT32_MAX)
        throw Error(sqlstate::kInvalidValue,
                    prefix(trigger) + "option priority must be an integer, not \"" + value + "\"",
                    "Write it as 'priority=10'.");
    return static_cast<int32_t>(v);
}

int32_t parse_batch(const char *trigger, bool has_value, const std::string &value) {
    if (!has_value) return kDefaultTriggerBatch;
    errno = 0;
    char *end = nullptr;
    long long v = std::strtoll(value.c_str(), &end, 10);
    if (value.empty() || errno != 0 || end == value.c_str() || *end != '\0' || v < 1 ||
        v > kMaxTriggerBatch)
        throw Error(sqlstate::kInvalidValue,
                    prefix(trigger) + "option batch must be an integer between 1 and " +
                        std::to_string(kMaxTriggerBatch) + ", not \"" + value + "\"",
                    "Write it as 'batch' (1000 rows per item) or 'batch=100'.");
    return static_cast<int32_t>(v);
}

}  // namespace

TriggerOptions parse_trigger_args(const char *trigger, int nargs, const char *const *args) {
    TriggerOptions o;
    std::memset(&o, 0, sizeof o);
    if (nargs < 1 || args == nullptr || args[0] == nullptr)
        throw Error(sqlstate::kInvalidValue,
                    prefix(trigger) + "claim.enqueue_trigger needs the queue name as its first "
                                      "argument",
                    kUsage);
    std::string queue(args[0]);
    check_queue_name(queue);
    std::memcpy(o.queue, queue.data(), queue.size());

    if (nargs >= 2 && args[1] != nullptr && args[1][0] != '\0') {
        std::string col(args[1]);
        if (col.size() > static_cast<size_t>(kMaxColumnNameBytes))
            throw Error("42622",
                        prefix(trigger) + "group column name is longer than 63 bytes", kUsage);
        std::memcpy(o.group_column, col.data(), col.size());
    }

    bool seen_priority = false;
    for (int i = 2; i < nargs; ++i) {
        std::string raw(args[i] ? args[i] : "");
        std::string name = raw, value;
        bool has_value = false;
        if (auto eq = raw.find('='); eq != std::string::npos) {
            name = raw.substr(0, eq);
            value = raw.substr(eq + 1);
            has_value = true;
        }
        name = lower(name);
        if (name == "coalesce") {
            if (has_value)
                throw Error(sqlstate::kInvalidValue,
                            prefix(trigger) + "option coalesce takes no value", kUsage);
            if (o.coalesce)
                throw Error(sqlstate::kInvalidValue,
                            prefix(trigger) + "option coalesce is given twice", kUsage);
            o.coalesce = true;
        } else if (name == "priority") {
            if (seen_priority)
                throw Error(sqlstate::kInvalidValue,
                            prefix(trigger) + "option priority is given twice", kUsage);
            o.priority = parse_priority(trigger, value);
            seen_priority = true;
        } else if (name == "batch") {
            if (o.batch != 0)
                throw Error(sqlstate::kInvalidValue,
                            prefix(trigger) + "option batch is given twice", kUsage);
            o.batch = parse_batch(trigger, has_value, value);
        } else if (name == "fair_key") {
            if (o.fair_column[0] != '\0')
                throw Error(sqlstate::kInvalidValue,
                            prefix(trigger) + "option fair_key is given twice", kUsage);
            if (value.empty())
                throw Error(sqlstate::kInvalidValue,
                            prefix(trigger) + "option fair_key needs a column name",
                            "Write it as 'fair_key=tenant_id'.");
            if (value.size() > static_cast<size_t>(kMaxColumnNameBytes))
                throw Error("42622",
                            prefix(trigger) + "fair_key column name is longer than 63 bytes",
                            kUsage);
            std::memcpy(o.fair_column, value.data(), value.size());
        } else {
            throw Error(sqlstate::kInvalidValue,
                        prefix(trigger) + "unknown option \"" + raw + "\"",
                        "Options are 'coalesce', 'priority=N', 'batch[=N]' and 'fair_key=column'.");
        }
    }
    if (o.coalesce && o.group_column[0] == '\0')
        throw Error(sqlstate::kInvalidValue,
                    prefix(trigger) + "option coalesce needs a group column",
                    "Name the column that identifies the entity as the second argument: changes "
                    "are coalesced per group.");
    if (o.coalesce && o.batch != 0)
        throw Error(sqlstate::kInvalidValue,
                    prefix(trigger) + "options coalesce and batch exclude each other",
                    "coalesce merges changes into pending items one by one; batch packs the "
                    "changed rows of one statement into items. Choose one.");
    if (o.fair_column[0] != '\0' && (o.coalesce || o.batch != 0))
        throw Error(sqlstate::kInvalidValue,
                    prefix(trigger) + "option fair_key excludes coalesce and batch",
                    "A coalesced or packed item gathers the changes of several rows, which may "
                    "belong to different fair keys. Use fair_key with one item per change.");
    return o;
}

}  // namespace pgclaim
