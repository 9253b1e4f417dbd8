// The coordination service's part of a worker round: claim._coord_maintain()
// ends expired sessions (their leaderships end, lock_delay applies), records
// the end of leaders whose ttl ran out (and, with pg_claim.watch_leases, of
// lease holdings that ran out), and trims the watch log to
// pg_claim.watch_retention; it returns when it is due again.
#include "worker/coordination.hpp"

extern "C" {
#include "catalog/namespace.h"
#include "utils/lsyscache.h"
}

namespace pgclaim::worker {

namespace {

pg::Stmt s_maintain = {"SELECT claim._coord_maintain()", 0, {}, nullptr};

bool have_coordination() {
    Oid nsp = get_namespace_oid("claim", true);
    return OidIsValid(nsp) && OidIsValid(get_relname_relid("coord_sessions", nsp));
}

}  // namespace

void coordination_duties(TimestampTz *next) {
    if (!have_coordination()) return;
    pg::run(s_maintain, nullptr, nullptr);
    bool isnull;
    Datum d = pg::col(0, 1, &isnull);
    if (!isnull && DatumGetTimestampTz(d) < *next) *next = DatumGetTimestampTz(d);
    pg::free_result();
}

}  // namespace pgclaim::worker
