// Server layer: the base of every layer that talks to PostgreSQL (pg,
// shmem, api, worker; see src/core/error.hpp for the order). Files in
// src/core never include it.
//
// Rules for every function outside src/core:
//  * a frame that calls anything that can raise (palloc, SPI, locks,
//    CHECK_FOR_INTERRUPTS) holds only plain data: no std::string, no
//    containers, no RAII objects;
//  * pure C++ from src/core is called through pgclaim::pg::call_core(), which
//    catches every exception and re-raises it as a PostgreSQL error with its
//    SQLSTATE after the catch scope has ended;
//  * SQL-callable functions are defined with PGCLAIM_FUNCTION, which does the
//    same for the function body.
#pragma once

#include <cstdint>
#include <exception>
#include <new>

#include "core/error.hpp"

extern "C" {
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "storage/lock.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/timestamp.h"
}

namespace pgclaim::pg {

// The integer PostgreSQL's errcode() takes for a five-character SQLSTATE.
constexpr int sqlstate_code(const char *c) { return MAKE_SQLSTATE(c[0], c[1], c[2], c[3], c[4]); }

// SQLSTATEs of pg_claim's own conditions (class "PC"), from their one
// definition in core/error.hpp; docs/errors.md lists every code pg_claim raises.
inline constexpr int kStaleToken = sqlstate_code(sqlstate::kStaleToken);        // not a live claim
inline constexpr int kLeaseMismatch = sqlstate_code(sqlstate::kLeaseMismatch);  // permits differ

// What an error carries besides its message: the SQLSTATE (an ERRCODE_*
// value or one of the above), and optionally a hint and a detail.
struct Err {
    int code;
    const char *hint = nullptr;
    const char *detail = nullptr;
};

// The one way pg_claim raises an error: printf-style message of any length.
//   pg::error({ERRCODE_UNDEFINED_OBJECT, "Create it with claim.create_queue()."},
//             "queue \"%s\" does not exist", name);
[[noreturn]] void error(Err e, const char *fmt, ...) pg_attribute_printf(2, 3);

// An error caught in C++ and waiting to be raised once no C++ scope is live
// (strings in the current memory context).
struct PendingError {
    bool set;
    int code;
    const char *message;
    const char *hint;
    const char *detail;
};

void capture(PendingError &err, const std::exception *e) noexcept;
[[noreturn]] void raise(const PendingError &err);

// Call into src/core (pure C++: no server calls inside!) and turn its
// exceptions into PostgreSQL errors.
template <class F>
inline void call_core(F &&f) {
    PendingError err;
    err.set = false;
    try {
        f();
    } catch (const std::exception &e) {
        capture(err, &e);
    } catch (...) {
        capture(err, nullptr);
    }
    if (err.set) raise(err);
}

// 55000 for an object of the extension that is gone ("sequence claim.x").
[[noreturn]] void missing_object(const char *what);

// --- arguments -------------------------------------------------------------

// Raise 22004 naming the argument when it is NULL.
void require_arg(FunctionCallInfo fcinfo, int argno, const char *name);
// The same for arguments 0, 1, 2, ... named in order; nullptr for an
// argument that may be NULL.
template <class... Names>
inline void require_args(FunctionCallInfo fcinfo, Names... names) {
    const char *n[] = {names...};
    for (int i = 0; i < (int)sizeof...(names); ++i)
        if (n[i] != nullptr) require_arg(fcinfo, i, n[i]);
}
// Interval to microseconds (a month counts 30 days); 22023 on overflow.
int64_t interval_us(const Interval *iv, const char *what);
// Text argument as a NUL-terminated palloc'd string.
char *arg_cstring(FunctionCallInfo fcinfo, int argno);

// --- environment -----------------------------------------------------------

// 25006 on a hot standby: every function that writes calls it first.
void require_primary(const char *fn);
// The server clock, never the transaction start.
inline TimestampTz clock_now() { return GetCurrentTimestamp(); }

// --- SPI with cached plans ---------------------------------------------------

struct Stmt {
    const char *sql;
    int nargs;
    Oid types[10];
    SPIPlanPtr plan;  // prepared on first use, kept for the backend's life
};

// Execute with a fresh snapshot (the latest committed state, also under
// REPEATABLE READ: our checks must see what other claimers committed), with
// search_path pinned (see below). Returns SPI_processed; results in
// SPI_tuptable, which stays until free_result() or SPI_finish(): code that
// runs statements in a loop frees each result once it has read it.
uint64 run(Stmt &s, Datum *values, const char *nulls, long limit = 0);
// Free SPI_tuptable (when there is one).
void free_result();

// Column accessors on SPI_tuptable row `row` (1-based column numbers).
// col_int64/col_int32 read columns the statement never leaves NULL: a NULL
// there raises (the statement and the code disagree); the _or forms say
// what NULL stands for.
Datum col(uint64 row, int colno, bool *isnull);
int64_t col_int64(uint64 row, int colno);
int32_t col_int32(uint64 row, int colno);
int64_t col_int64_or(uint64 row, int colno, int64_t if_null);
int32_t col_int32_or(uint64 row, int colno, int32_t if_null);

// An int8[] Datum of n values (palloc'd).
Datum int8_array(const int64 *v, int n);

// --- commit durability ---------------------------------------------------------
// A transaction that wrote WAL waits at commit until that WAL is on disk.
// Some WAL needs no such wait: heap pruning and hint records written while
// reading, and the token sequence's prefetch record (tokens are protected by
// the jump at startup or by flush_token_wal, pg/token_store.hpp). A claim writes
// only such WAL besides its unlogged claim rows, so wrapping it in
// wal_mark()/wal_forget() lets it commit asynchronously, as PostgreSQL
// commits a read-only transaction that pruned a page. The commit record
// still covers everything; WAL written before the mark or after
// wal_forget() (the caller's own writes) is still waited for.
uint64 wal_mark();
void wal_forget(uint64 mark);

// --- search_path -------------------------------------------------------------
// The SQL the extension runs is written for search_path = pg_catalog,
// pg_temp; functions declare it with SET search_path. Functions called once
// per row or per job whose common path runs no SQL and looks nothing up by
// name (claim.enqueue, claim.enqueue_trigger, claim.claim_next,
// claim.complete) are declared without it, since setting a GUC per call
// costs a few percent of their throughput: run() pins it around every
// statement it prepares or executes, and code that runs SQL otherwise pins
// it itself. pin_search_path() returns the GUC nest level to give to
// unpin_search_path(); an error on the way restores the caller's
// search_path when the (sub)transaction aborts.
int pin_search_path();
void unpin_search_path(int nest);
// Whether search_path is the pinned one already (a function's SET clause or
// an enclosing pin).
bool search_path_pinned();

}  // namespace pgclaim::pg

// Define a SQL-callable function. The body runs inside try/catch; a C++
// exception becomes a PostgreSQL error (with its SQLSTATE) after the catch.
#define PGCLAIM_FUNCTION(name)                                                  \
    static Datum name##_body(FunctionCallInfo fcinfo);                          \
    extern "C" {                                                                \
    PG_FUNCTION_INFO_V1(name);                                                  \
    }                                                                           \
    extern "C" Datum name(PG_FUNCTION_ARGS) {                                   \
        pgclaim::pg::PendingError pgc_err_;                                     \
        pgc_err_.set = false;                                                   \
        Datum pgc_result_ = (Datum)0;                                           \
        try {                                                                   \
            pgc_result_ = name##_body(fcinfo);                                  \
        } catch (const std::exception &e) {                                     \
            pgclaim::pg::capture(pgc_err_, &e);                                 \
        } catch (...) {                                                         \
            pgclaim::pg::capture(pgc_err_, nullptr);                            \
        }                                                                       \
        if (pgc_err_.set) pgclaim::pg::raise(pgc_err_);                         \
        return pgc_result_;                                                     \
    }                                                                           \
    static Datum name##_body(FunctionCallInfo fcinfo)
