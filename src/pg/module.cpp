// Module entry: the magic block and _PG_init.
#include "pg/pg.hpp"
#include "worker/shared.hpp"

extern "C" {
#include "miscadmin.h"
#include "utils/guc.h"

PG_MODULE_MAGIC;
void _PG_init(void);
}

// Plain C calls only: nothing here throws.
void _PG_init(void) {
    // The GUCs exist in every session (SHOW works with or without the
    // preload); shared memory, hooks and the launcher only come with
    // shared_preload_libraries. Without the preload everything works
    // lazily and waits fall back to short naps (src/worker/wakeup.cpp).
    pgclaim::worker::define_gucs();
    MarkGUCPrefixReserved("pg_claim");
    if (!process_shared_preload_libraries_in_progress) return;
    if (IsBinaryUpgrade) return;  // pg_upgrade: no worker, no hooks
    pgclaim::worker::init_preloaded();
}
