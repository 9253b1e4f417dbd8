// SQL surface: the internals of the coordination service (docs/coordination.md).
//   claim._coord_token, claim._coord_wait, claim._coord_wake
//
// Sessions, elections, latches and the watch are SQL functions of the 0.4.0
// update script (their rules are in docs/coordination.md); what they need
// from C is here:
//  * _coord_token: one fencing token from claim.token_seq, durable before it
//    leaves the server (api/tokens.hpp), for session ids and leader epochs;
//  * _coord_wait: sleep in the server until a commit wakes the key (or the
//    time passes), through the waiters of shmem/wakeup.hpp, so a wait is one
//    statement and a commit wakes it with no LISTEN/NOTIFY. Like every wait
//    it ends with a cancel, statement_timeout, or (with
//    client_connection_check_interval) a client that went away;
//  * _coord_wake: wake every waiter of the key when this transaction
//    commits (nothing if it aborts).
#include "api/partition.hpp"
#include "api/tokens.hpp"
#include "shmem/wakeup.hpp"

using namespace pgclaim;
using pgclaim::pg::Stmt;

namespace {

Stmt s_token = {"SELECT " PGCLAIM_NEXT_TOKEN_SQL, 0, {}, nullptr};

// The longest a single wait sleeps; the SQL caller loops up to its deadline.
constexpr int64 kMaxWaitMs = 3600 * 1000;

}  // namespace

PGCLAIM_FUNCTION(pgclaim_coord_token) {
    pg::require_primary("claim._coord_token");
    SPI_connect();
    api::before_tokens();
    pg::run(s_token, nullptr, nullptr);
    int64 token = pg::col_int64(0, 1);
    // The token must be durable before it leaves the server.
    api::after_tokens();
    SPI_finish();
    PG_RETURN_INT64(token);
}

PGCLAIM_FUNCTION(pgclaim_coord_wait) {
    pg::require_args(fcinfo, "key", "wait_ms");
    int64 key = PG_GETARG_INT64(0);
    int64 ms = PG_GETARG_INT64(1);
    if (ms <= 0) PG_RETURN_BOOL(false);
    if (ms > kMaxWaitMs) ms = kMaxWaitMs;
    PG_RETURN_BOOL(shmem::wait_for(shmem::WaitKind::Coord, key, (long)ms));
}

PGCLAIM_FUNCTION(pgclaim_coord_wake) {
    pg::require_arg(fcinfo, 0, "key");
    shmem::notify_ready(shmem::WaitKind::Coord, PG_GETARG_INT64(0), PG_INT32_MAX);
    PG_RETURN_VOID();
}
