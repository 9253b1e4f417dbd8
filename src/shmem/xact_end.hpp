// The end of a backend's transaction for the shared-memory services: one
// transaction callback, registered on first use, that at COMMIT and ABORT
// gives back the transaction's locks (pg/xact_locks.hpp), moves the epochs
// (epochs.hpp), wakes waiters and records NOTIFYs (wakeup.hpp, notify.hpp),
// and at COMMIT pokes the launcher or worker (registry.hpp), in that order.
// At PREPARE the wakes and pokes asked for are dropped: whoever commits the
// prepared transaction wakes everyone (worker/database_hook.cpp).
#pragma once

namespace pgclaim::shmem {

// Register the callback (once per process). No raise after the first call.
void xact_end_register();

}  // namespace pgclaim::shmem
