// SQL surface: recurring schedules (docs/schedules.md).
//   claim.schedule, claim.unschedule (admin functions), claim.cron_next
#include "api/keys.hpp"
#include "api/queue_lookup.hpp"
#include "pg/schedule_fire.hpp"
#include "shmem/shared.hpp"

using namespace pgclaim;
using pgclaim::pg::Stmt;

namespace {

constexpr int kMaxScheduleNameBytes = 200;

Stmt s_upsert = {
    "INSERT INTO claim.schedule_defs AS s (name, cron, timezone, queue_id, payload, group_key,"
    "                                      priority, next_run) "
    "VALUES ($1, $2, $3, $4, $5, $6, $7, $8) "
    "ON CONFLICT (name) DO UPDATE SET cron = EXCLUDED.cron, timezone = EXCLUDED.timezone,"
    "  queue_id = EXCLUDED.queue_id, payload = EXCLUDED.payload,"
    "  group_key = EXCLUDED.group_key, priority = EXCLUDED.priority,"
    "  next_run = EXCLUDED.next_run",
    8, {TEXTOID, TEXTOID, TEXTOID, INT4OID, JSONBOID, TEXTOID, INT4OID, TIMESTAMPTZOID}, nullptr};

Stmt s_delete = {"DELETE FROM claim.schedule_defs WHERE name = $1", 1, {TEXTOID}, nullptr};

// Said once per session: without the preload there is no worker to fire.
bool unpreloaded_noticed = false;

void check_name(FunctionCallInfo fcinfo, int argno) {
    size_t len = VARSIZE_ANY_EXHDR(PG_GETARG_TEXT_PP(argno));
    if (len == 0 || len > (size_t)kMaxScheduleNameBytes)
        pg::error({ERRCODE_INVALID_NAME}, "invalid schedule name: it must be 1 to %d bytes long",
                  kMaxScheduleNameBytes);
}

}  // namespace

PGCLAIM_FUNCTION(pgclaim_schedule) {
    pg::require_args(fcinfo, "name", "cron", "queue", "payload", nullptr, "priority", "timezone");
    pg::require_primary("claim.schedule");
    check_name(fcinfo, 0);
    if (!PG_ARGISNULL(4)) api::check_key_length(PG_GETARG_TEXT_PP(4), "group_key");
    text *cron = PG_GETARG_TEXT_PP(1);
    char *queue = pg::arg_cstring(fcinfo, 2);
    const char *zone = pg::canonical_zone(pg::arg_cstring(fcinfo, 6));
    TimestampTz next = pg::cron_next(VARDATA_ANY(cron), (int)VARSIZE_ANY_EXHDR(cron), zone,
                                     pg::clock_now());
    if (!shmem::preloaded() && !unpreloaded_noticed) {
        unpreloaded_noticed = true;
        ereport(NOTICE,
                (errmsg("schedules fire only where pg_claim is preloaded"),
                 errhint("Add pg_claim to shared_preload_libraries and restart the server: its "
                         "worker enqueues the items of due schedules.")));
    }

    SPI_connect();
    api::QueueInfo q = api::lookup_queue(queue);
    pg::free_result();
    Datum v[8] = {PG_GETARG_DATUM(0),         PG_GETARG_DATUM(1),
                  CStringGetTextDatum(zone),  Int32GetDatum(q.queue_id),
                  PG_GETARG_DATUM(3),         PG_ARGISNULL(4) ? (Datum)0 : PG_GETARG_DATUM(4),
                  PG_GETARG_DATUM(5),         TimestampTzGetDatum(next)};
    char nulls[9] = "        ";
    if (PG_ARGISNULL(4)) nulls[5] = 'n';
    pg::run(s_upsert, v, nulls);
    SPI_finish();
    PG_RETURN_VOID();
}

PGCLAIM_FUNCTION(pgclaim_unschedule) {
    pg::require_arg(fcinfo, 0, "name");
    pg::require_primary("claim.unschedule");
    SPI_connect();
    Datum v[1] = {PG_GETARG_DATUM(0)};
    bool found = pg::run(s_delete, v, nullptr) > 0;
    SPI_finish();
    PG_RETURN_BOOL(found);
}

PGCLAIM_FUNCTION(pgclaim_cron_next) {
    pg::require_args(fcinfo, "cron", "after", "timezone");
    text *cron = PG_GETARG_TEXT_PP(0);
    TimestampTz after = PG_GETARG_TIMESTAMPTZ(1);
    if (TIMESTAMP_NOT_FINITE(after))
        pg::error({ERRCODE_INVALID_PARAMETER_VALUE}, "after must be a finite timestamp");
    const char *zone = pg::canonical_zone(pg::arg_cstring(fcinfo, 2));
    PG_RETURN_TIMESTAMPTZ(
        pg::cron_next(VARDATA_ANY(cron), (int)VARSIZE_ANY_EXHDR(cron), zone, after));
}
