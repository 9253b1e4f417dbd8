// Waiting for work: the fallback without shared memory (short naps).
#include "worker/wakeup.hpp"

extern "C" {
#include "storage/latch.h"
#include "utils/wait_event.h"
}

namespace pgclaim::worker {

void wait_for(WaitKind, int64, long timeout_ms) {
    long ms = timeout_ms > 50 ? 50 : (timeout_ms < 1 ? 1 : timeout_ms);
    (void)WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, ms,
                    PG_WAIT_EXTENSION);
    ResetLatch(MyLatch);
    CHECK_FOR_INTERRUPTS();
}

void notify_ready(WaitKind, int64) {}

}  // namespace pgclaim::worker
