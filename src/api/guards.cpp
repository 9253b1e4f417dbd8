// SQL surface: once-only guards.
//   claim.once, claim.guard_begin, claim.guard_finish, claim.guard_abandon,
//   claim.guard_result
//
// Both live in logged tables and are transactional:
//  * claim.once inserts the key into claim.once_keys. A concurrent caller
//    with the same key waits on the unique index for the transaction that
//    holds the key: false if that one commits; if it rolls back, the waiters
//    retry their inserts and the one PostgreSQL lets through first gets true,
//    the others wait on it in turn.
//    With a ttl an expired key is taken again.
//  * the guard ledger claim.guards keeps one row per key: an attempt begins
//    with a new token from claim.token_seq (so a later attempt always has a
//    higher token), and ends finished (permanent, with its result) or
//    abandoned. An attempt whose lease ran out no longer blocks the key: the
//    next guard_begin starts a new attempt and the old token becomes stale.
//    Until then the old attempt may still finish or abandon.
#include "api/partition.hpp"
#include "api/tokens.hpp"
#include "core/lease_rules.hpp"

#include <string_view>

extern "C" {
#include "mb/pg_wchar.h"
#include "core/rules.hpp"
}

using namespace pgclaim;
using pgclaim::pg::Stmt;

namespace {

Stmt s_once = {
    "INSERT INTO claim.once_keys AS o (key, taken_at, expires_at) VALUES ($1, $2, $3) "
    "ON CONFLICT (key) DO UPDATE SET taken_at = EXCLUDED.taken_at, expires_at = EXCLUDED.expires_at"
    "  WHERE o.expires_at IS NOT NULL AND o.expires_at <= EXCLUDED.taken_at "
    "RETURNING true",
    3, {TEXTOID, TIMESTAMPTZOID, TIMESTAMPTZOID}, nullptr};

Stmt s_begin = {
    "INSERT INTO claim.guards AS g (key, token, state, attempts, started_at, lease_until) "
    "VALUES ($1, " PGCLAIM_NEXT_TOKEN_SQL ", 'r', 1, $2, $3) "
    "ON CONFLICT (key) DO UPDATE"
    "  SET token = EXCLUDED.token, state = 'r', attempts = g.attempts + 1,"
    "      started_at = EXCLUDED.started_at, lease_until = EXCLUDED.lease_until,"
    "      finished_at = NULL, result = NULL"
    "  WHERE g.state = 'a' OR (g.state = 'r' AND g.lease_until <= EXCLUDED.started_at) "
    "RETURNING g.token",
    3, {TEXTOID, TIMESTAMPTZOID, TIMESTAMPTZOID}, nullptr};

// A NULL result is stored as JSON null, so guard_result can tell "finished
// without a result" from "not finished".
Stmt s_finish = {
    "UPDATE claim.guards SET state = 'f', finished_at = $3,"
    "  result = COALESCE($4, 'null'::jsonb) "
    "WHERE key = $1 AND token = $2 AND state = 'r' RETURNING 1",
    4, {TEXTOID, INT8OID, TIMESTAMPTZOID, JSONBOID}, nullptr};

Stmt s_abandon = {
    "UPDATE claim.guards SET state = 'a', finished_at = $3 "
    "WHERE key = $1 AND token = $2 AND state = 'r' RETURNING 1",
    3, {TEXTOID, INT8OID, TIMESTAMPTZOID}, nullptr};

Stmt s_result = {"SELECT result FROM claim.guards WHERE key = $1 AND state = 'f'", 1, {TEXTOID},
                 nullptr};

Stmt s_guard_state = {"SELECT token, state FROM claim.guards WHERE key = $1", 1, {TEXTOID}, nullptr};

struct KeyArg {
    text *t;
    char *shown;  // for messages: clipped to whole characters
};

KeyArg key_arg(FunctionCallInfo fcinfo, int argno) {
    KeyArg k;
    k.t = PG_GETARG_TEXT_PP(argno);
    const char *d = VARDATA_ANY(k.t);
    int len = (int)VARSIZE_ANY_EXHDR(k.t);
    pg::call_core([&] { check_guard_key(std::string_view(d, (size_t)len)); });
    constexpr int kShown = 200;
    if (len <= kShown) {
        k.shown = pnstrdup(d, len);
    } else {
        int cut = pg_mbcliplen(d, len, kShown);
        k.shown = (char *)palloc(cut + 4);
        memcpy(k.shown, d, cut);
        memcpy(k.shown + cut, "...", 4);
    }
    return k;
}

// PC001 for a token that is not the running attempt of the key (SPI connected).
[[noreturn]] void stale_guard_token(const KeyArg &k, int64 token) {
    Datum v[1] = {PointerGetDatum(k.t)};
    const char *detail;
    if (pg::run(s_guard_state, v, nullptr) == 0) {
        detail = "No attempt of this key has begun.";
    } else {
        bool isnull;
        int64 current = pg::col_int64(0, 1);
        char state = DatumGetChar(pg::col(0, 2, &isnull));
        if (current != token)
            detail = "A newer attempt of this key began (its lease had run out).";
        else if (state == 'f')
            detail = "This attempt has finished already.";
        else
            detail = "This attempt was abandoned.";
    }
    pg::error({pg::kStaleToken,
               "Another attempt may be calling the service now; record nothing under this token.",
               detail},
              "token %lld is not the running attempt of guard \"%s\"", (long long)token, k.shown);
}

}  // namespace

PGCLAIM_FUNCTION(pgclaim_once) {
    pg::require_arg(fcinfo, 0, "key");
    pg::require_primary("claim.once");
    KeyArg k = key_arg(fcinfo, 0);
    bool ttl_null = PG_ARGISNULL(1);
    int64_t ttl_us = 0;
    if (!ttl_null) {
        ttl_us = pg::interval_us(PG_GETARG_INTERVAL_P(1), "ttl");
        pg::call_core([&] { check_positive_duration("ttl", ttl_us, kMaxOnceTtlUs); });
    }
    SPI_connect();
    TimestampTz now = pg::clock_now();
    Datum v[3] = {PointerGetDatum(k.t), TimestampTzGetDatum(now),
                  TimestampTzGetDatum(now + ttl_us)};
    char nulls[4] = {' ', ' ', ttl_null ? 'n' : ' ', '\0'};
    bool first = pg::run(s_once, v, nulls) > 0;
    SPI_finish();
    PG_RETURN_BOOL(first);
}

PGCLAIM_FUNCTION(pgclaim_guard_begin) {
    pg::require_args(fcinfo, "key", "lease");
    pg::require_primary("claim.guard_begin");
    KeyArg k = key_arg(fcinfo, 0);
    int64_t lease_us = pg::interval_us(PG_GETARG_INTERVAL_P(1), "lease");
    pg::call_core([&] { check_positive_duration("lease", lease_us, kMaxLeaseTtlUs); });
    SPI_connect();
    api::before_tokens();
    TimestampTz now = pg::clock_now();
    Datum v[3] = {PointerGetDatum(k.t), TimestampTzGetDatum(now),
                  TimestampTzGetDatum(now + lease_us)};
    bool got = pg::run(s_begin, v, nullptr) > 0;
    int64 token = got ? pg::col_int64(0, 1) : 0;
    // The token must be durable before it leaves the server.
    if (got) api::after_tokens();
    SPI_finish();
    if (!got) PG_RETURN_NULL();
    PG_RETURN_INT64(token);
}

PGCLAIM_FUNCTION(pgclaim_guard_finish) {
    pg::require_arg(fcinfo, 0, "key");
    int64 token = api::token_arg(fcinfo, 1, "claim.guard_finish");
    KeyArg k = key_arg(fcinfo, 0);
    SPI_connect();
    Datum v[4] = {PointerGetDatum(k.t), Int64GetDatum(token), TimestampTzGetDatum(pg::clock_now()),
                  PG_ARGISNULL(2) ? (Datum)0 : PG_GETARG_DATUM(2)};
    char nulls[5] = {' ', ' ', ' ', PG_ARGISNULL(2) ? 'n' : ' ', '\0'};
    if (pg::run(s_finish, v, nulls) == 0) stale_guard_token(k, token);
    SPI_finish();
    PG_RETURN_VOID();
}

PGCLAIM_FUNCTION(pgclaim_guard_abandon) {
    pg::require_arg(fcinfo, 0, "key");
    int64 token = api::token_arg(fcinfo, 1, "claim.guard_abandon");
    KeyArg k = key_arg(fcinfo, 0);
    SPI_connect();
    Datum v[3] = {PointerGetDatum(k.t), Int64GetDatum(token), TimestampTzGetDatum(pg::clock_now())};
    if (pg::run(s_abandon, v, nullptr) == 0) stale_guard_token(k, token);
    SPI_finish();
    PG_RETURN_VOID();
}

PGCLAIM_FUNCTION(pgclaim_guard_result) {
    pg::require_arg(fcinfo, 0, "key");
    KeyArg k = key_arg(fcinfo, 0);
    SPI_connect();
    Datum v[1] = {PointerGetDatum(k.t)};
    bool found = pg::run(s_result, v, nullptr) > 0;
    Datum out = (Datum)0;
    if (found) {
        bool isnull;
        // Copy out of SPI's memory before SPI_finish frees it.
        out = SPI_datumTransfer(pg::col(0, 1, &isnull), false, -1);
    }
    SPI_finish();
    if (!found) PG_RETURN_NULL();
    PG_RETURN_DATUM(out);
}
