// PostgreSQL major-version differences of the shared-memory and process APIs
// that src/shmem uses, each behind one small named helper.
// Header-only (inline functions).
#pragma once

#include "pg/pg.hpp"

extern "C" {
#include "storage/proc.h"
}

namespace pgclaim::shmem::compat {

// The index of a PGPROC in ProcGlobal->allProcs, 0 .. MaxBackends +
// auxiliary processes - 1. 17 dropped the PGPROC.pgprocno field in favour of
// GetNumberFromPGProc().
inline int proc_number(const PGPROC *proc) {
#if PG_VERSION_NUM >= 170000
    return (int)GetNumberFromPGProc(proc);
#else
    return proc->pgprocno;
#endif
}

}  // namespace pgclaim::shmem::compat
