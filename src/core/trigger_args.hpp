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
// Option names are case-insensitive; each may appear once.
#pragma once

#include <cstdint>

namespace pgclaim {

inline constexpr int kMaxColumnNameBytes = 63;

// Plain data: the server layer keeps it in frames that call the server.
struct TriggerOptions {
    char queue[64];
    char group_column[64];  // "" when there is no group column
    bool coalesce;
    int32_t priority;
};

// Throws pgclaim::Error (22023, or 42602 for a bad queue name, 42622 for a
// column name that is too long). `trigger` names the trigger in messages.
TriggerOptions parse_trigger_args(const char *trigger, int nargs, const char *const *args);

}  // namespace pgclaim
