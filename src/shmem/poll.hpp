// The polling fallback of waits: without the preload (or with more
// backends than waiter slots) a waiter naps briefly instead of sleeping
// until it is woken, and says once, as a NOTICE, that preloading makes
// waits event-driven.
#pragma once

#include "pg/pg.hpp"

namespace pgclaim::shmem {

// Nap for at most `timeout_ms` (kPollMs at the most); handles interrupts.
void poll_wait(long timeout_ms);

// Sleep on MyLatch for at most `ms` as WaitLatch does, but also wake when
// the client's connection closes; then, and whenever the connection is
// found closed, the backend ends (FATAL, "connection to client lost", as
// client_connection_check_interval does) instead of going on to claim or
// grant what it could not hand over. Every wait inside the server sleeps
// here.
void wait_latch(long ms);
// Ends the backend (as above) when its client has gone. Called after a
// wait, before a grant.
void check_client();

}  // namespace pgclaim::shmem
