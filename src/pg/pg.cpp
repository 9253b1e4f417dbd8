// Server layer: see pg.hpp for the rules this file follows.
#include "pg/pg.hpp"

#include <cstring>

extern "C" {
#include "utils/guc.h"
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
// field4 values of our advisory-lock space (pg_advisory_* uses 1 and 2).
constexpr uint16 kLockItem = 0x5043;   // "PC"
constexpr uint16 kLockLease = 0x5046;

void copy(char *dst, size_t size, const char *src) noexcept {
    if (!src) {
        dst[0] = '\0';
        return;
    }
    size_t n = strlen(src);
    if (n >= size) n = size - 1;
    memcpy(dst, src, n);
    dst[n] = '\0';
}
}  // namespace

void capture(PendingError &err, const std::exception *e) noexcept {
    err.set = true;
    err.hint[0] = err.detail[0] = '\0';
    if (const auto *pe = dynamic_cast<const pgclaim::Error *>(e)) {
        copy(err.code, sizeof err.code, pe->code());
        copy(err.message, sizeof err.message, pe->what());
        copy(err.hint, sizeof err.hint, pe->hint().c_str());
        copy(err.detail, sizeof err.detail, pe->detail().c_str());
    } else if (e && dynamic_cast<const std::bad_alloc *>(e)) {
        copy(err.code, sizeof err.code, "53200");
        copy(err.message, sizeof err.message, "out of memory in pg_claim");
    } else {
        copy(err.code, sizeof err.code, "XX000");
        copy(err.message, sizeof err.message, e ? e->what() : "unknown C++ exception in pg_claim");
    }
}

void raise(const PendingError &err) {
    error(err.code, err.message, err.hint[0] ? err.hint : nullptr,
          err.detail[0] ? err.detail : nullptr);
}

void error(const char *c, const char *message, const char *hint, const char *detail) {
    ereport(ERROR, (errcode(MAKE_SQLSTATE(c[0], c[1], c[2], c[3], c[4])),
                    errmsg_internal("%s", message),
                    hint ? errhint("%s", hint) : 0,
                    detail ? errdetail_internal("%s", detail) : 0));
    pg_unreachable();
}

void require_arg(FunctionCallInfo fcinfo, int argno, const char *name) {
    if (PG_ARGISNULL(argno)) {
        char msg[128];
        snprintf(msg, sizeof msg, "%s must not be NULL", name);
        error("22004", msg);
    }
}

int64_t interval_us(const Interval *iv, const char *what) {
    int64 days_us, months_us, total;
    if (pg_mul_s64_overflow((int64)iv->day, USECS_PER_DAY, &days_us) ||
        pg_mul_s64_overflow((int64)iv->month, (int64)DAYS_PER_MONTH * USECS_PER_DAY, &months_us) ||
        pg_add_s64_overflow(iv->time, days_us, &total) ||
        pg_add_s64_overflow(total, months_us, &total)) {
        char msg[128];
        snprintf(msg, sizeof msg, "%s is out of range", what);
        error("22023", msg);
    }
    return total;
}

char *arg_cstring(FunctionCallInfo fcinfo, int argno) {
    return text_to_cstring(PG_GETARG_TEXT_PP(argno));
}

void require_primary(const char *fn) {
    if (RecoveryInProgress()) {
        char msg[160];
        snprintf(msg, sizeof msg, "cannot call %s on a hot standby", fn);
        error("25006", msg, "Connect to the primary: claims, tokens and leases are written there.");
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
            elog(ERROR, "pg_claim: SPI_prepare failed (%s) for: %s",
                 SPI_result_code_string(SPI_result), s.sql);
        if (SPI_keepplan(p) != 0) elog(ERROR, "pg_claim: SPI_keepplan failed");
        s.plan = p;
    }
    int rc = SPI_execute_snapshot(s.plan, values, nulls, GetLatestSnapshot(), InvalidSnapshot,
                                  false, true, limit);
    if (rc < 0) elog(ERROR, "pg_claim: SPI failed (%s) for: %s", SPI_result_code_string(rc), s.sql);
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

int64_t col_int64(uint64 row, int colno) {
    bool isnull;
    Datum d = col(row, colno, &isnull);
    return isnull ? 0 : DatumGetInt64(d);
}

int32_t col_int32(uint64 row, int colno) {
    bool isnull;
    Datum d = col(row, colno, &isnull);
    return isnull ? 0 : DatumGetInt32(d);
}

bool lock_item(int64_t item_id, bool wait) {
    LOCKTAG tag;
    SET_LOCKTAG_ADVISORY(tag, MyDatabaseId, (uint32)((uint64)item_id >> 32), (uint32)item_id,
                         kLockItem);
    return LockAcquire(&tag, ExclusiveLock, false, !wait) != LOCKACQUIRE_NOT_AVAIL;
}

void unlock_item(int64_t item_id) {
    LOCKTAG tag;
    SET_LOCKTAG_ADVISORY(tag, MyDatabaseId, (uint32)((uint64)item_id >> 32), (uint32)item_id,
                         kLockItem);
    (void)LockRelease(&tag, ExclusiveLock, false);
}

bool lock_lease(uint64 key, bool wait) {
    LOCKTAG tag;
    SET_LOCKTAG_ADVISORY(tag, MyDatabaseId, (uint32)(key >> 32), (uint32)key, kLockLease);
    return LockAcquire(&tag, ExclusiveLock, false, !wait) != LOCKACQUIRE_NOT_AVAIL;
}

void unlock_lease(uint64 key) {
    LOCKTAG tag;
    SET_LOCKTAG_ADVISORY(tag, MyDatabaseId, (uint32)(key >> 32), (uint32)key, kLockLease);
    (void)LockRelease(&tag, ExclusiveLock, false);
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

void flush_token_wal() {
    Oid nsp = get_namespace_oid("claim", false);
    Oid relid = get_relname_relid("token_seq", nsp);
    if (!OidIsValid(relid)) elog(ERROR, "pg_claim: sequence claim.token_seq is missing");
    Relation rel = relation_open(relid, AccessShareLock);
    Buffer buf = ReadBuffer(rel, 0);
    LockBuffer(buf, BUFFER_LOCK_SHARE);
    XLogRecPtr lsn = PageGetLSN(BufferGetPage(buf));
    UnlockReleaseBuffer(buf);
    relation_close(rel, AccessShareLock);
    if (lsn > GetFlushRecPtr(NULL)) XLogFlush(lsn);
}

}  // namespace pgclaim::pg
