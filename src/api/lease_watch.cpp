// Leases in the watch log: the changes of claim.lease_acquire,
// claim.lease_acquire_shared and claim.lease_release recorded through
// claim._coord_log when pg_claim.watch_leases is on. Expiries that no grant
// takes over are recorded by the worker (claim._coord_maintain).
#include "api/lease_watch.hpp"

extern "C" {
#include "utils/datum.h"
}

namespace pgclaim::api {

bool guc_watch_leases = false;

namespace {

pg::Stmt s_log = {"SELECT claim._coord_log('lease', $1, $2, $3, $4)", 4,
                  {TEXTOID, TEXTOID, INT8OID, TEXTOID}, nullptr};

pg::Stmt s_log_holder = {
    "SELECT claim._coord_log('lease', h.name, $3, h.token, h.holder) "
    "FROM claim.lease_holders h WHERE h.name = $1 AND h.token = $2",
    3, {TEXTOID, INT8OID, TEXTOID}, nullptr};

pg::Stmt s_holder = {
    "SELECT h.holder FROM claim.lease_holders h "
    "WHERE h.name = $1 AND h.slot = $2 AND h.token = $3",
    3, {TEXTOID, INT4OID, INT8OID}, nullptr};

void log(Datum name, const char *event, int64 token, Datum holder, bool holder_null) {
    Datum v[4] = {name, CStringGetTextDatum(event), Int64GetDatum(token), holder};
    char n[5] = {' ', ' ', ' ', holder_null ? 'n' : ' ', '\0'};
    (void)pg::run(s_log, v, n);
    pg::free_result();
}

}  // namespace

void watch_lease_granted(Datum name, int64 token, bool shared, Datum holder, bool holder_null) {
    if (!guc_watch_leases) return;
    log(name, shared ? "acquired_shared" : "acquired", token, holder, holder_null);
}

void watch_lease_released(Datum name, int64 token) {
    if (!guc_watch_leases) return;
    Datum v[3] = {name, Int64GetDatum(token), CStringGetTextDatum("released")};
    (void)pg::run(s_log_holder, v, nullptr);
    pg::free_result();
}

EndedHolding watch_lease_ending(Datum name, int32 slot, int64 token) {
    EndedHolding h;
    if (!guc_watch_leases) return h;
    h.token = token;
    Datum v[3] = {name, Int32GetDatum(slot), Int64GetDatum(token)};
    if (pg::run(s_holder, v, nullptr) > 0) {
        Datum d = pg::col(0, 1, &h.holder_null);
        if (!h.holder_null) h.holder = datumCopy(d, false, -1);
    }
    pg::free_result();
    return h;
}

void watch_lease_expired(Datum name, const EndedHolding &h) {
    if (!guc_watch_leases || h.token == 0) return;
    log(name, "expired", h.token, h.holder, h.holder_null);
}

}  // namespace pgclaim::api
