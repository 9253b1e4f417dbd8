// The polling fallback of waits: see poll.hpp.
#include "shmem/poll.hpp"

extern "C" {
// From libpq/libpq.h, whose libpq-be.h needs the GSSAPI headers: the
// client connection's wait set (the socket at position 0, MyLatch at 1,
// postmaster death at 2; NULL in a background worker) and its check.
extern PGDLLIMPORT WaitEventSet *FeBeWaitSet;
bool pq_check_connection(void);
#include "storage/ipc.h"
#include "miscadmin.h"
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
    wait_latch(ms);
    ResetLatch(MyLatch);
    CHECK_FOR_INTERRUPTS();
    check_client();
}

namespace {
[[noreturn]] void client_lost() {
    // What ProcessInterrupts does for client_connection_check_interval.
    ClientConnectionLost = true;
    InterruptPending = true;
    CHECK_FOR_INTERRUPTS();
    proc_exit(1);  // not reached: ProcessInterrupts raised FATAL
}
}  // namespace

constexpr int kSocketPos = 0;  // FeBeWaitSetSocketPos
constexpr int kEvents = 3;     // FeBeWaitSetNEvents

bool have_client() {
    return MyProcPort != nullptr && FeBeWaitSet != nullptr && WaitEventSetCanReportClosed();
}

void wait_latch(long ms) {
    if (!have_client()) {
        (void)WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, ms,
                        PG_WAIT_EXTENSION);
        return;
    }
    // The client's own wait set (what the backend waits on between
    // queries), told to report the socket's closing, not its data.
    ModifyWaitEvent(FeBeWaitSet, kSocketPos, WL_SOCKET_CLOSED, nullptr);
    WaitEvent ev[kEvents];
    int n = WaitEventSetWait(FeBeWaitSet, ms, ev, kEvents, PG_WAIT_EXTENSION);
    for (int i = 0; i < n; ++i) {
        if (ev[i].events & WL_POSTMASTER_DEATH) proc_exit(1);
        if (ev[i].events & WL_SOCKET_CLOSED) client_lost();
    }
}

void check_client() {
    if (have_client() && !pq_check_connection()) client_lost();
}

}  // namespace pgclaim::shmem
