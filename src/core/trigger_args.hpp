// Pure layer: never includes postgres.h.
//
// Arguments of claim.enqueue_trigger, as written in CREATE TRIGGER:
//   EXECUTE FUNCTION claim.enqueue_trigger('queue' [, 'group_column' [, 'option', ...]])
//   queue         name of the queue (identifier rules, see check_queue_name)
//   group_column  column whose value (text form; NEW, or OLD on DELETE) becomes
//                 the item's group_key; '' for none
//   options       'coalesce'      update the newest pending item of the group in
//                                 place when it comes from the same table and
//                                 operation and is unclaimed and ready (needs a
//                                 group column)
//                 'priority=N'    priority of the enqueued items (default 0)
//                 'batch[=N]'     statement level only: one item per group key
//                                 carrying up to N of the statement's changed
//                                 rows, in statement order (default N 1000,
//                                 at most 10000); not with coalesce
//                 'fair_key=col'  the item's fair key (docs/fairness.md) is the
//                                 text form of column col (NEW, or OLD on
//                                 DELETE; NULL: the queue's default key); not
//                                 with coalesce or batch
// Option names are case-insensitive; each may appear once.
#pragma once

#include <cstdint>

namespace pgclaim {

inline constexpr int kMaxColumnNameBytes = 63;
inline constexpr int32_t kDefaultTriggerBatch = 1000;
inline constexpr int32_t kMaxTriggerBatch = 10000;

// Plain data: the server layer keeps it in frames that call the server.
struct TriggerOptions {
    char queue[64];
    char group_column[64];  // "" when there is no group column
    char fair_column[64];   // "" without 'fair_key=col'
    bool coalesce;
    int32_t priority;
    int32_t batch;  // rows per item with 'batch'; 0 without it
};

// Throws pgclaim::Error (22023, or 42602 for a bad queue name, 42622 for a
// column name that is too long). `trigger` names the trigger in messages.
TriggerOptions parse_trigger_args(const char *trigger, int nargs, const char *const *args);

}  // namespace pgclaim
