// The backend's scan hints: see hints.hpp.

#include "api/hints.hpp"

#include "api/ready_walk.hpp"
#include "pg/direct.hpp"
#include "shmem/frontier.hpp"
#include "shmem/wakeup.hpp"

namespace pgclaim::api {

// One of each per backend process, made on first use.
ScanHints &hints() { static ScanHints h; return h; }
PromoteSchedule &promote_schedule() { static PromoteSchedule p; return p; }

void forget_hints(int32 queue_id) {
    pg::call_core([&] { hints().forget(queue_id); });
    forget_empty(queue_id);
    shmem::frontier_forget(pg::direct::items_relid(), queue_id);
    forget_at_commit(queue_id);
}

bool wait_for_items(int32 queue_id, TimestampTz deadline, TimestampTz wake_at) {
    TimestampTz now = pg::clock_now();
    if (now >= deadline) return false;
    TimestampTz until = wake_at > 0 && wake_at < deadline ? wake_at : deadline;
    if (until <= now) return true;  // look again at once
    if (shmem::wait_for(shmem::WaitKind::Queue, queue_id, (long)((until - now + 999) / 1000)))
        pg::call_core([&] { hints().forget(queue_id); });
    return true;
}

}  // namespace pgclaim::api
