// SQL surface: changing a queue after it was created (admin functions).
//   claim.alter_queue, claim.pause, claim.resume
// and the flow-control settings that create_queue shares with alter_queue.
#include "api/queue_admin.hpp"

#include "api/caches.hpp"
#include "api/queue_lookup.hpp"
#include "api/fair.hpp"
#include "core/rules.hpp"
#include "shmem/epochs.hpp"
#include "shmem/shared.hpp"
#include "shmem/wakeup.hpp"

using namespace pgclaim;
using pgclaim::pg::Stmt;

namespace {

Stmt s_alter = {
    "UPDATE claim.queues SET lease = COALESCE($2, lease),"
    "  max_attempts = COALESCE($3, max_attempts), backoff = COALESCE($4, backoff),"
    "  retain = COALESCE($5, retain) "
    "WHERE name = $1 RETURNING queue_id",
    5, {TEXTOID, INTERVALOID, INT4OID, INTERVALOID, INTERVALOID}, nullptr};

Stmt s_flow = {
    "UPDATE claim.queues SET"
    "  max_active = CASE WHEN $2 IS NULL THEN max_active WHEN $2 = 0 THEN NULL ELSE $2 END,"
    "  group_limit = COALESCE($3, group_limit),"
    "  rate = CASE WHEN $4 IS NULL THEN rate WHEN $4 = 0 THEN NULL ELSE $4 END,"
    "  rate_per = COALESCE($5, rate_per), rate_per_group = COALESCE($6, rate_per_group) "
    "WHERE name = $1 RETURNING queue_id",
    6, {TEXTOID, INT4OID, INT4OID, INT4OID, INTERVALOID, BOOLOID}, nullptr};

Stmt s_set_paused = {"UPDATE claim.queues SET paused = $2 WHERE name = $1 RETURNING queue_id",
                     2, {TEXTOID, BOOLOID}, nullptr};

// Every backend drops its cached definitions of the queue at our commit;
// this one at once.
void queue_changed() {
    shmem::queues_changed_at_commit();
    api::forget_queues();
}

Datum set_paused(FunctionCallInfo fcinfo, bool paused, const char *fn) {
    pg::require_arg(fcinfo, 0, "queue");
    pg::require_primary(fn);
    char *name = pg::arg_cstring(fcinfo, 0);
    SPI_connect();
    Datum v[2] = {PG_GETARG_DATUM(0), BoolGetDatum(paused)};
    if (pg::run(s_set_paused, v, nullptr) == 0) api::unknown_queue(name);
    int32 queue_id = pg::col_int32(0, 1);
    pg::free_result();
    queue_changed();
    // Waiting claimers look again when the resume commits.
    if (!paused) shmem::notify_ready(shmem::WaitKind::Queue, queue_id, PG_INT32_MAX);
    SPI_finish();
    PG_RETURN_VOID();
}

}  // namespace

void pgclaim::api::store_flow_settings(FunctionCallInfo fcinfo, int first, bool altering) {
    if (PG_NARGS() < first + 5) return;  // a catalog without these arguments
    // 0 removes a max_active or rate limit in alter_queue; create_queue
    // takes NULL for "no limit".
    int32 floor = altering ? 0 : 1;
    if (!PG_ARGISNULL(first)) {
        int32 v = PG_GETARG_INT32(first);
        pg::call_core([&] { check_range("max_active", v, floor, kMaxActiveLimit); });
    }
    if (!PG_ARGISNULL(first + 1)) {
        int32 v = PG_GETARG_INT32(first + 1);
        pg::call_core([&] { check_range("group_limit", v, 1, kMaxActiveLimit); });
    }
    if (!PG_ARGISNULL(first + 2)) {
        int32 v = PG_GETARG_INT32(first + 2);
        pg::call_core([&] { check_range("rate", v, floor, kMaxActiveLimit); });
        if (v > 0 && !shmem::preloaded())
            ereport(WARNING,
                    (errcode(ERRCODE_WARNING),
                     errmsg("rate limits need pg_claim in shared_preload_libraries: claims from "
                            "queue \"%s\" fail until it is preloaded",
                            text_to_cstring(PG_GETARG_TEXT_PP(0))),
                     errhint("Add pg_claim to shared_preload_libraries and restart the server.")));
    }
    if (!PG_ARGISNULL(first + 3)) {
        int64_t per = pg::interval_us(PG_GETARG_INTERVAL_P(first + 3), "rate_per");
        pg::call_core([&] { check_positive_duration("rate_per", per, kMaxDelayUs); });
    }
    if (!altering && PG_ARGISNULL(first + 1)) pg::require_arg(fcinfo, first + 1, "group_limit");
    if (!altering && PG_ARGISNULL(first + 3)) pg::require_arg(fcinfo, first + 3, "rate_per");
    if (!altering && PG_ARGISNULL(first + 4)) pg::require_arg(fcinfo, first + 4, "rate_per_group");
    Datum v[6] = {PG_GETARG_DATUM(0)};
    char nulls[6] = {' '};
    for (int i = 0; i < 5; ++i) {
        v[i + 1] = PG_ARGISNULL(first + i) ? (Datum)0 : PG_GETARG_DATUM(first + i);
        nulls[i + 1] = PG_ARGISNULL(first + i) ? 'n' : ' ';
    }
    pg::run(s_flow, v, nulls);
    pg::free_result();
}

PGCLAIM_FUNCTION(pgclaim_alter_queue) {
    pg::require_arg(fcinfo, 0, "queue");
    pg::require_primary("claim.alter_queue");
    char *name = pg::arg_cstring(fcinfo, 0);
    int64_t lease = PG_ARGISNULL(1) ? 1 : pg::interval_us(PG_GETARG_INTERVAL_P(1), "lease");
    int32 max_attempts = PG_ARGISNULL(2) ? 1 : PG_GETARG_INT32(2);
    int64_t backoff = PG_ARGISNULL(3) ? 0 : pg::interval_us(PG_GETARG_INTERVAL_P(3), "backoff");
    int64_t retain = PG_ARGISNULL(4) ? 0 : pg::interval_us(PG_GETARG_INTERVAL_P(4), "retain");
    pg::call_core([&] {
        check_positive_duration("lease", lease, kMaxLeaseUs);
        check_range("max_attempts", max_attempts, 1, kMaxAttemptsLimit);
        check_nonnegative_duration("backoff", backoff, kMaxDelayUs);
        check_nonnegative_duration("retain", retain, kMaxRetainUs);
    });
    SPI_connect();
    Datum v[5];
    char nulls[5];
    for (int i = 0; i < 5; ++i) {
        v[i] = PG_ARGISNULL(i) ? (Datum)0 : PG_GETARG_DATUM(i);
        nulls[i] = PG_ARGISNULL(i) ? 'n' : ' ';
    }
    if (pg::run(s_alter, v, nulls) == 0) api::unknown_queue(name);
    int32 queue_id = pg::col_int32(0, 1);
    pg::free_result();
    api::store_flow_settings(fcinfo, 5, true);
    api::store_fair_flag(fcinfo, 10);
    queue_changed();
    // A raised or removed limit may let waiting claimers in.
    shmem::notify_ready(shmem::WaitKind::Queue, queue_id, PG_INT32_MAX);
    SPI_finish();
    PG_RETURN_VOID();
}

PGCLAIM_FUNCTION(pgclaim_pause) { return set_paused(fcinfo, true, "claim.pause"); }

PGCLAIM_FUNCTION(pgclaim_resume) { return set_paused(fcinfo, false, "claim.resume"); }
