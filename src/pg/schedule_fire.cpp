// Server layer: cron expressions in PostgreSQL's time zones, and the firing
// of due schedules by the worker (docs/schedules.md).
#include "pg/schedule_fire.hpp"

#include "core/cron_parse.hpp"
#include "pg/direct.hpp"

extern "C" {
#include "catalog/namespace.h"
#include "pgtime.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/resowner.h"
}

namespace pgclaim::pg {

namespace {

// A due schedule locked by another transaction is looked at again this late.
constexpr int64 kLockedRetryUs = 10 * 1000;

const char *const kCronHint =
    "Five fields: minute hour day-of-month month day-of-week, or six with a leading second "
    "field (\"*/10 * * * * *\"), or a macro such as @hourly or @daily.";

// A PostgreSQL zone (pgtime.h) as next_fire sees it.
class PgZone final : public ZoneRules {
public:
    explicit PgZone(const pg_tz *tz) noexcept : tz_(tz) {}
    int32_t utc_offset_at(int64_t t) const noexcept override {
        pg_time_t pt = t;
        const struct pg_tm *tm = pg_localtime(&pt, tz_);
        return tm ? static_cast<int32_t>(tm->tm_gmtoff) : 0;
    }
    bool next_transition(int64_t t, ZoneTransition *out) const noexcept override {
        pg_time_t pt = t, boundary;
        long before, after;
        int before_dst, after_dst;
        if (pg_next_dst_boundary(&pt, &before, &before_dst, &boundary, &after, &after_dst, tz_) !=
            1)
            return false;
        *out = {boundary, static_cast<int32_t>(before), static_cast<int32_t>(after)};
        return true;
    }

private:
    const pg_tz *tz_;
};

// The first tick of `s` in `tz` strictly after `after`. Never raises.
bool next_tick(const CronSchedule &s, const pg_tz *tz, TimestampTz after,
               TimestampTz *out) noexcept {
    if (TIMESTAMP_NOT_FINITE(after)) return false;
    PgZone zone(tz);
    int64_t fire;
    if (!next_fire(s, zone, static_cast<int64_t>(after) + kPgEpochUnixMicros, &fire))
        return false;
    *out = static_cast<TimestampTz>(fire - kPgEpochUnixMicros);
    return true;
}

// Due schedules, oldest tick first, locked: a second worker (or a round that
// overlaps this one) skips them, and nobody changes them until we commit.
Stmt s_due = {
    "SELECT s.schedule_id, s.cron, s.timezone, s.next_run, s.name FROM claim.schedule_defs s "
    "WHERE s.next_run <= $1 ORDER BY s.next_run LIMIT $2 FOR UPDATE OF s SKIP LOCKED",
    2, {TIMESTAMPTZOID, INT4OID}, nullptr};

// One item per schedule (u.id, its tick u.tick, its next tick u.next), only
// where next_run is still the tick that was read. The rows are locked by
// s_due, so claim.enqueue runs once per row that is updated. The item's
// dedup_key names the schedule and the tick (Unix seconds).
Stmt s_fire = {
    "UPDATE claim.schedule_defs s SET next_run = u.next, last_run = u.tick,"
    "  last_item = claim.enqueue(q.name, s.payload, s.group_key, NULL::timestamptz, s.priority,"
    "    'schedule:' || s.name || ':'"
    "      || pg_catalog.floor(pg_catalog.date_part('epoch', u.tick))::int8) "
    "FROM unnest($1::int8[], $2::timestamptz[], $3::timestamptz[]) AS u(id, tick, next),"
    "     claim.queues q "
    "WHERE s.schedule_id = u.id AND s.next_run = u.tick AND q.queue_id = s.queue_id",
    3, {INT8ARRAYOID, TIMESTAMPTZARRAYOID, TIMESTAMPTZARRAYOID}, nullptr};

// A tick whose item could not be enqueued is skipped.
Stmt s_skip = {
    "UPDATE claim.schedule_defs SET next_run = $3 WHERE schedule_id = $1 AND next_run = $2", 3,
    {INT8OID, TIMESTAMPTZOID, TIMESTAMPTZOID}, nullptr};

Stmt s_earliest = {"SELECT min(next_run) FROM claim.schedule_defs", 0, {}, nullptr};

// The earliest next_run of all schedules; false when there is none.
bool earliest_next_run(TimestampTz *out) {
    run(s_earliest, nullptr, nullptr);
    bool isnull;
    Datum t = col(0, 1, &isnull);
    if (!isnull) *out = DatumGetTimestampTz(t);
    free_result();
    return !isnull;
}

Datum tstz_array(const TimestampTz *v, int n) {
    Datum *d = (Datum *)palloc(sizeof(Datum) * (n > 0 ? n : 1));
    for (int i = 0; i < n; ++i) d[i] = TimestampTzGetDatum(v[i]);
    return PointerGetDatum(
        construct_array(d, n, TIMESTAMPTZOID, sizeof(TimestampTz), FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
}

// Errors that say nothing about the schedule itself (cancel, shutdown,
// deadlock, serialization, resources): the round ends with them and the
// ticks fire at the next round.
bool transient(int code) {
    const char *s = unpack_sql_state(code);
    return strncmp(s, "40", 2) == 0 || strncmp(s, "53", 2) == 0 || strncmp(s, "57", 2) == 0 ||
           strncmp(s, "58", 2) == 0;
}

// Fires ids[0..n) in a subtransaction. False when it failed (nothing of it
// remains); *fired is the number of items enqueued otherwise.
bool try_fire(const int64 *ids, const TimestampTz *ticks, const TimestampTz *nexts, int n,
              const char *name, uint64 *fired) {
    MemoryContext cxt = CurrentMemoryContext;
    ResourceOwner owner = CurrentResourceOwner;
    volatile bool ok = true;
    BeginInternalSubTransaction(nullptr);
    MemoryContextSwitchTo(cxt);
    PG_TRY();
    {
        Datum v[3] = {int8_array(ids, n), tstz_array(ticks, n), tstz_array(nexts, n)};
        *fired = run(s_fire, v, nullptr);
        ReleaseCurrentSubTransaction();
        MemoryContextSwitchTo(cxt);
        CurrentResourceOwner = owner;
    }
    PG_CATCH();
    {
        MemoryContextSwitchTo(cxt);
        ErrorData *e = CopyErrorData();
        FlushErrorState();
        RollbackAndReleaseCurrentSubTransaction();
        MemoryContextSwitchTo(cxt);
        CurrentResourceOwner = owner;
        if (transient(e->sqlerrcode)) ReThrowError(e);
        if (name != nullptr)
            ereport(WARNING,
                    (errmsg("pg_claim: schedule \"%s\" skipped its tick at %s: %s", name,
                            timestamptz_to_str(ticks[0]), e->message),
                     errhint("Its next tick is %s.", timestamptz_to_str(nexts[0]))));
        FreeErrorData(e);
        ok = false;
    }
    PG_END_TRY();
    return ok;
}

}  // namespace

const char *canonical_zone(const char *tz) {
    pg_tz *z = pg_tzset(tz);
    if (z == nullptr)
        error({ERRCODE_INVALID_PARAMETER_VALUE,
               "Use a name from pg_timezone_names, for example 'UTC' or 'Europe/Berlin'."},
              "time zone \"%s\" is not recognized", tz);
    if (!pg_tz_acceptable(z))
        error({ERRCODE_INVALID_PARAMETER_VALUE}, "time zone \"%s\" uses leap seconds", tz);
    return pstrdup(pg_get_timezone_name(z));
}

TimestampTz cron_next(const char *cron, int len, const char *tz, TimestampTz after) {
    CronParseResult r = parse_cron(cron, len);
    if (!r.ok)
        error({ERRCODE_INVALID_PARAMETER_VALUE, kCronHint}, "invalid cron expression \"%.*s\": %s",
              len, cron, r.message);
    (void)canonical_zone(tz);
    TimestampTz out;
    if (!next_tick(r.schedule, pg_tzset(tz), after, &out))
        error({ERRCODE_INVALID_PARAMETER_VALUE},
              "cron expression \"%.*s\" has no tick after %s in time zone \"%s\"", len, cron,
              timestamptz_to_str(after), tz);
    return out;
}

int64 fire_schedules(TimestampTz now, TimestampTz *next) {
    Oid nsp = get_namespace_oid("claim", true);
    if (!OidIsValid(nsp) || !OidIsValid(get_relname_relid("schedule_defs", nsp))) return 0;

    // Nothing due: one probe of the index on next_run.
    TimestampTz earliest = 0;
    bool have = earliest_next_run(&earliest);
    if (!have || earliest > now) {
        if (have && earliest < *next) *next = earliest;
        return 0;
    }
    // claim.items first, as every producer and drop_queue lock it, then the
    // schedules: drop_queue (which deletes its schedules) waits for this
    // round instead of deadlocking with it.
    direct::lock_items(false);
    Datum v[2] = {TimestampTzGetDatum(now), Int32GetDatum(kFireBatch)};
    uint64 rows = run(s_due, v, nullptr);
    uint64 fired = 0;
    if (rows > 0) {
        int n = (int)rows;
        int64 *ids = (int64 *)palloc(sizeof(int64) * n);
        TimestampTz *ticks = (TimestampTz *)palloc(sizeof(TimestampTz) * n);
        TimestampTz *nexts = (TimestampTz *)palloc(sizeof(TimestampTz) * n);
        char **names = (char **)palloc(sizeof(char *) * n);
        for (int r = 0; r < n; ++r) {
            bool isnull;
            ids[r] = col_int64(r, 1);
            text *cron = DatumGetTextPP(col(r, 2, &isnull));
            char *tz = TextDatumGetCString(col(r, 3, &isnull));
            ticks[r] = DatumGetTimestampTz(col(r, 4, &isnull));
            names[r] = TextDatumGetCString(col(r, 5, &isnull));
            // Missed ticks coalesce: the next one is the first after now.
            CronParseResult p = parse_cron(VARDATA_ANY(cron), (int)VARSIZE_ANY_EXHDR(cron));
            pg_tz *zone = p.ok ? pg_tzset(tz) : nullptr;
            if (zone == nullptr || !next_tick(p.schedule, zone, now, &nexts[r])) {
                // The zone is gone from the server's tzdata (or the row was
                // edited by hand): this tick fires, and then no more.
                ereport(WARNING,
                        (errmsg("pg_claim: schedule \"%s\" has no next tick: %s", names[r],
                                !p.ok ? p.message : zone == nullptr ? "unknown time zone"
                                                                     : "no tick ahead"),
                         errhint("Replace it with claim.schedule().")));
                nexts[r] = DT_NOEND;
            }
        }
        free_result();
        if (!try_fire(ids, ticks, nexts, n, n == 1 ? names[0] : nullptr, &fired)) {
            // One of them failed: each on its own, skipping the ticks that fail.
            fired = 0;
            for (int i = 0; i < n; ++i) {
                uint64 one = 0;
                if (n > 1 && try_fire(&ids[i], &ticks[i], &nexts[i], 1, names[i], &one)) {
                    fired += one;
                    continue;
                }
                Datum sv[3] = {Int64GetDatum(ids[i]), TimestampTzGetDatum(ticks[i]),
                               TimestampTzGetDatum(nexts[i])};
                run(s_skip, sv, nullptr);
            }
        }
        // The worker commits asynchronously; a round that enqueued items
        // commits synchronously, so that no item a claimer may have acted
        // on is lost in a crash and fired again for the same tick.
        if (fired > 0) ForceSyncCommit();
        if (rows >= (uint64)kFireBatch) *next = now;  // more are due: go on at once
    }
    if (earliest_next_run(&earliest)) {
        // Due schedules left are locked by another transaction: look again
        // soon, not at once.
        if (earliest <= now && rows < (uint64)kFireBatch) earliest = now + kLockedRetryUs;
        if (earliest < *next) *next = earliest;
    }
    return (int64)fired;
}

}  // namespace pgclaim::pg
