// The launcher of the background workers (connected to no database; see
// launcher.cpp and docs/worker.md).
#pragma once

namespace pgclaim::worker {

// Register the launcher with the postmaster (from _PG_init).
void register_launcher();

}  // namespace pgclaim::worker
