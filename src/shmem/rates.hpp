// Rate limits across all backends: one GCRA timestamp (core/rate_limit.hpp)
// per (database, queue, group) in a table of shared memory (PostgreSQL's
// shared hash, see txn_table.hpp).
#pragma once

#include "core/rate_limit.hpp"
#include "pg/pg.hpp"

namespace pgclaim::shmem {

// Entries of the table: (database, queue, group) keys with a rate, in all
// databases (pg_claim.max_rate_keys). A key that is idle (its timestamp
// passed) gives its entry up to another; when every entry holds a busy key,
// a claim that needs a new one fails with 53400 (the limit is never
// overshot).
extern int guc_max_rate_keys;

Size rates_shmem_size();
void rates_shmem_request();
void rates_shmem_init();

// Takes up to `want` claims for (queue, group) at `now` (group 0: the whole
// queue); returns how many were granted. When fewer than `want`, *next_at
// is when the next one will be. `install` tells installations of the
// extension apart (pg::direct::items_relid(): queue ids restart with a new
// one). 55000 without the preloaded library.
int rate_take(Oid install, int32 queue_id, uint64 group, const RateRule &rule, int want,
              TimestampTz now, TimestampTz *next_at);
// Claims taken but not used.
void rate_give_back(Oid install, int32 queue_id, uint64 group, const RateRule &rule, int n);

}  // namespace pgclaim::shmem
