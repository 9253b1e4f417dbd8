// Server layer: see pg.hpp for the rules this file follows.
#include "pg/pg.hpp"
#include "pg/compat.hpp"

#include <cstdarg>
#include <cstring>

extern "C" {
#include "catalog/pg_authid.h"
#include "utils/guc.h"
#include "utils/syscache.h"
#include "lib/stringinfo.h"
#include "utils/memutils.h"
#include "access/relation.h"
#include "access/xlog.h"
#include "catalog/namespace.h"
#include "common/hashfn.h"
#include "common/int.h"
#include "storage/bufmgr.h"
#include "utils/lsyscache.h"
#include "utils/snapmgr.h"
}

namespace pgclaim::pg {

namespace {
// A copy of `src` in the current memory context; NULL when out of memory
// (never raises: called in catch scopes).
const char *copy(const char *src) noexcept {
    if (src == nullptr || src[0] == '\0') return nullptr;
    size_t n = strlen(src) + 1;
    char *dst = (char *)MemoryContextAllocExtended(CurrentMemoryContext, n, MCXT_ALLOC_NO_OOM);
    if (dst != nullptr) memcpy(dst, src, n);
    return dst;
}
}  // namespace

void capture(PendingError &err, const std::exception *e) noexcept {
    err.set = true;
    err.hint = err.detail = nullptr;
    if (const auto *pe = dynamic_cast<const pgclaim::Error *>(e)) {
        err.code = sqlstate_code(pe->code());
        err.message = copy(pe->what());
        err.hint = copy(pe->hint().c_str());
        err.detail = copy(pe->detail().c_str());
        if (err.message == nullptr) {
            err.code = ERRCODE_OUT_OF_MEMORY;
            err.message = "out of memory in pg_claim";
        }
    } else if (e && dynamic_cast<const std::bad_alloc *>(e)) {
        err.code = ERRCODE_OUT_OF_MEMORY;
        err.message = "out of memory in pg_claim";
    } else {
        err.code = ERRCODE_INTERNAL_ERROR;
        const char *m = e ? copy(e->what()) : nullptr;
        err.message = m ? m : "unknown C++ exception in pg_claim";
    }
}

void raise(const PendingError &err) {
    ereport(ERROR, (errcode(err.code), errmsg_internal("%s", err.message),
                    err.hint ? errhint("%s", err.hint) : 0,
                    err.detail ? errdetail_internal("%s", err.detail) : 0));
    pg_unreachable();
}

void error(Err e, const char *fmt, ...) {
    StringInfoData buf;
    initStringInfo(&buf);
    for (;;) {
        va_list args;
        va_start(args, fmt);
        int needed = appendStringInfoVA(&buf, fmt, args);
        va_end(args);
        if (needed == 0) break;
        enlargeStringInfo(&buf, needed);
    }
    ereport(ERROR, (errcode(e.code), errmsg_internal("%s", buf.data),
                    e.hint ? errhint("%s", e.hint) : 0,
                    e.detail ? errdetail_internal("%s", e.detail) : 0));
    pg_unreachable();
}

void missing_object(const char *what) {
    error({ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
           "The extension's objects were altered; re-create the extension."},
          "pg_claim: %s is missing", what);
}

void require_arg(FunctionCallInfo fcinfo, int argno, const char *name) {
    if (PG_ARGISNULL(argno)) {
        error({ERRCODE_NULL_VALUE_NOT_ALLOWED}, "%s must not be NULL", name);
    }
}

int64_t interval_us(const Interval *iv, const char *what) {
    int64 days_us, months_us, total;
    if (pg_mul_s64_overflow((int64)iv->day, USECS_PER_DAY, &days_us) ||
        pg_mul_s64_overflow((int64)iv->month, (int64)DAYS_PER_MONTH * USECS_PER_DAY, &months_us) ||
        pg_add_s64_overflow(iv->time, days_us, &total) ||
        pg_add_s64_overflow(total, months_us, &total)) {
        error({ERRCODE_INVALID_PARAMETER_VALUE}, "%s is out of range", what);
    }
    return total;
}

char *arg_cstring(FunctionCallInfo fcinfo, int argno) {
    return text_to_cstring(PG_GETARG_TEXT_PP(argno));
}

void require_primary(const char *fn) {
    if (RecoveryInProgress()) {
        error({ERRCODE_READ_ONLY_SQL_TRANSACTION,
               "Connect to the primary: claims, tokens and leases are written there."},
              "cannot call %s on a hot standby", fn);
    }
}

uint64 run(Stmt &s, Datum *values, const char *nulls, long limit) {
    // Names in the statement are resolved when it is prepared, and the plan
    // cache prepares it again whenever search_path differs from then.
    int pin = search_path_pinned() ? -1 : pin_search_path();
    if (s.plan == nullptr) {
        // Generic plans: the statements are short and run constantly; planning
        // them again for each call would cost more than any custom plan gains.
        SPIPlanPtr p = SPI_prepare_cursor(s.sql, s.nargs, s.types, CURSOR_OPT_GENERIC_PLAN);
        if (p == nullptr)
            error({ERRCODE_INTERNAL_ERROR}, "pg_claim: SPI_prepare failed (%s) for: %s",
                  SPI_result_code_string(SPI_result), s.sql);
        if (SPI_keepplan(p) != 0) error({ERRCODE_INTERNAL_ERROR}, "pg_claim: SPI_keepplan failed");
        s.plan = p;
    }
    int rc = SPI_execute_snapshot(s.plan, values, nulls, GetLatestSnapshot(), InvalidSnapshot,
                                  false, true, limit);
    if (rc < 0)
        error({ERRCODE_INTERNAL_ERROR}, "pg_claim: SPI failed (%s) for: %s",
              SPI_result_code_string(rc), s.sql);
    if (pin >= 0) unpin_search_path(pin);
    return SPI_processed;
}

void free_result() {
    if (SPI_tuptable != nullptr) SPI_freetuptable(SPI_tuptable);
    SPI_tuptable = nullptr;
}

Datum int8_array(const int64 *v, int n) {
    Datum *d = (Datum *)palloc(sizeof(Datum) * (n > 0 ? n : 1));
    for (int i = 0; i < n; ++i) d[i] = Int64GetDatum(v[i]);
    return PointerGetDatum(construct_array(d, n, INT8OID, 8, true, TYPALIGN_DOUBLE));
}

Datum col(uint64 row, int colno, bool *isnull) {
    return SPI_getbinval(SPI_tuptable->vals[row], SPI_tuptable->tupdesc, colno, isnull);
}

namespace {
[[noreturn]] void unexpected_null(int colno) {
    error({ERRCODE_INTERNAL_ERROR}, "pg_claim: column %d of a result is NULL", colno);
}

// Column `colno` of row `row`, which must not be NULL.
Datum col_not_null(uint64 row, int colno) {
    bool isnull;
    Datum d = col(row, colno, &isnull);
    if (isnull) unexpected_null(colno);
    return d;
}
}  // namespace

int64_t col_int64(uint64 row, int colno) { return DatumGetInt64(col_not_null(row, colno)); }
int32_t col_int32(uint64 row, int colno) { return DatumGetInt32(col_not_null(row, colno)); }

int64_t col_int64_or(uint64 row, int colno, int64_t if_null) {
    bool isnull;
    Datum d = col(row, colno, &isnull);
    return isnull ? if_null : DatumGetInt64(d);
}

int32_t col_int32_or(uint64 row, int colno, int32_t if_null) {
    bool isnull;
    Datum d = col(row, colno, &isnull);
    return isnull ? if_null : DatumGetInt32(d);
}

namespace {
constexpr char kPinnedPath[] = "pg_catalog, pg_temp";
}

bool search_path_pinned() {
    return namespace_search_path != nullptr && strcmp(namespace_search_path, kPinnedPath) == 0;
}

int pin_search_path() {
    int nest = NewGUCNestLevel();
    (void)set_config_option("search_path", kPinnedPath, PGC_USERSET, PGC_S_SESSION,
                            GUC_ACTION_SAVE, true, 0, false);
    return nest;
}

void unpin_search_path(int nest) { AtEOXact_GUC(true, nest); }

uint64 wal_mark() { return XactLastRecEnd; }

void wal_forget(uint64 mark) {
    if (XactLastRecEnd > mark) XactLastRecEnd = mark;
}

}  // namespace pgclaim::pg
