// The polling fallback of waits: without the preload (or with more
// backends than waiter slots) a waiter naps briefly instead of sleeping
// until it is woken, and says once, as a NOTICE, that preloading makes
// waits event-driven.
#pragma once

#include "pg/pg.hpp"

namespace pgclaim::shmem {

// Nap for at most `timeout_ms` (kPollMs at the most); handles interrupts.
void poll_wait(long timeout_ms);

}  // namespace pgclaim::shmem
