// Server layer: recurring schedules (claim.schedule, docs/schedules.md).
//
// Cron expressions (core/cron.hpp) evaluated in PostgreSQL's time zones
// (pg_tzset), and the worker's firing of due schedules.
#pragma once

#include "pg/pg.hpp"

namespace pgclaim::pg {

// The zone named `tz` as PostgreSQL spells it (palloc'd, e.g. "Europe/Berlin"
// for "europe/berlin"); 22023 when PostgreSQL does not know it or it uses
// leap seconds.
const char *canonical_zone(const char *tz);

// The first tick of the cron expression `cron` (`len` bytes) in zone `tz`
// strictly after `after`. 22023 with the parser's message (which names the
// bad field and its position) for a bad expression, 22023 for an unknown zone
// and when the expression fires no more before the year 9999.
TimestampTz cron_next(const char *cron, int len, const char *tz, TimestampTz after);

// The worker's duty, once per round (a transaction open, SPI connected):
// every schedule whose next_run is due at `now` enqueues one item into its
// queue, and its next_run moves to its first tick after `now`, both in the
// current transaction, guarded by the next_run that was read (at most
// kFireBatch schedules per call). *next is lowered to the earliest next_run
// left (to `now` when more are due). Returns how many items were enqueued.
// Does nothing when the installed extension has no schedules.
int64 fire_schedules(TimestampTz now, TimestampTz *next);

inline constexpr int kFireBatch = 1000;

}  // namespace pgclaim::pg
