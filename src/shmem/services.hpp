// The hooks that size and start every shared-memory service of pg_claim:
// the shared-memory request hook asks for the space and LWLocks of the
// segment (shared.hpp) and of each table (metrics, rates, lease grants,
// claim slots, item and lease locks, drops, fair schedulers, barriers), the
// startup hook sets each up. Only with shared_preload_libraries.
#pragma once

namespace pgclaim::shmem {

// Chains both hooks (from _PG_init, only when preloaded).
void install_shmem_hooks();

}  // namespace pgclaim::shmem
