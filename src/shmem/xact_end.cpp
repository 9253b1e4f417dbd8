// The transaction callback of the shared-memory services: see xact_end.hpp.
#include "shmem/xact_end.hpp"

#include "pg/xact_locks.hpp"
#include "shmem/epochs.hpp"
#include "shmem/registry.hpp"
#include "shmem/wakeup.hpp"

namespace pgclaim::shmem {

namespace {

bool registered = false;

void xact_callback(XactEvent event, void *) {
    switch (event) {
        case XACT_EVENT_COMMIT:
            // The items this transaction made ready are unlocked before
            // anyone is woken for them: a woken claimer must find them free.
            pg::xact_locks_release_all();
            epochs_at_xact_end(true);
            wakeup_at_xact_end(true);
            pokes_at_xact_end(true);
            break;
        case XACT_EVENT_ABORT:
            pg::xact_locks_release_all();
            epochs_at_xact_end(false);
            wakeup_at_xact_end(false);
            pokes_at_xact_end(false);
            break;
        case XACT_EVENT_PREPARE:
            wakeup_at_prepare();
            pokes_at_xact_end(false);
            break;
        default:
            break;
    }
}

}  // namespace

void xact_end_register() {
    if (registered) return;
    RegisterXactCallback(xact_callback, nullptr);
    registered = true;
}

}  // namespace pgclaim::shmem
