// The polling fallback of waits: see poll.hpp.
#include "shmem/poll.hpp"

extern "C" {
#include "storage/latch.h"
#include "utils/wait_event.h"
}

namespace pgclaim::shmem {

namespace {
constexpr long kPollMs = 50;  // waits poll this often
bool noticed = false;         // the NOTICE was given in this process
}  // namespace

void poll_wait(long timeout_ms) {
    if (!noticed) {
        noticed = true;
        ereport(NOTICE,
                (errmsg("pg_claim waits by polling every %ld ms in this server", kPollMs),
                 errhint("Add pg_claim to shared_preload_libraries and restart the server to "
                         "make waits event-driven (woken at the producer's commit).")));
    }
    long ms = timeout_ms > kPollMs ? kPollMs : (timeout_ms < 1 ? 1 : timeout_ms);
    (void)WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, ms,
                    PG_WAIT_EXTENSION);
    ResetLatch(MyLatch);
    CHECK_FOR_INTERRUPTS();
}

}  // namespace pgclaim::shmem
