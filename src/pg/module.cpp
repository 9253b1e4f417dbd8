// Module entry: the magic block and _PG_init.
#include "pg/pg.hpp"

extern "C" {
PG_MODULE_MAGIC;
void _PG_init(void);
}

void _PG_init(void) {
    // GUCs and the background worker are registered by src/worker when the
    // library is preloaded; without the preload everything works lazily.
    MarkGUCPrefixReserved("pg_claim");
}
