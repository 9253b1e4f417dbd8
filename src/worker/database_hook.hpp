// The ProcessUtility hook that keeps workers out of the way of DROP
// DATABASE and friends (see database_hook.cpp).
#pragma once

namespace pgclaim::worker {

// From _PG_init, only when preloaded.
void install_database_hook();

}  // namespace pgclaim::worker
