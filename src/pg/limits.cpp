// Concurrency limits of queues; see limits.hpp.
#include "pg/limits.hpp"

#include "pg/lineage.hpp"

extern "C" {
#include "access/htup_details.h"
#include "access/table.h"
#include "catalog/namespace.h"
#include "storage/bufmgr.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
}

namespace pgclaim::pg {

namespace {

// A lock space of its own, next to the item and lease spaces of
// pg/xact_locks.hpp.
constexpr uint16 kLockQueueClaims = 0x5051;

Stmt s_live = {
    "SELECT count(*) FROM claim.claims WHERE queue_id = $1 AND lease_until > $2", 2,
    {INT4OID, TIMESTAMPTZOID}, nullptr};

Stmt s_earlier = {
    "SELECT count(*) FROM (SELECT FROM claim.items WHERE queue_id = $1 AND group_key = $2"
    "  AND id < $3 AND state = 'r' LIMIT $4) s",
    4, {INT4OID, TEXTOID, INT8OID, INT8OID}, nullptr};

Stmt s_finish = {
    "SELECT retain, max_active IS NOT NULL OR group_limit > 1 FROM claim.queues "
    "WHERE queue_id = $1",
    1, {INT4OID}, nullptr};

int64 count_of(Stmt &s, Datum *v) {
    run(s, v, nullptr);
    bool isnull;
    int64 n = DatumGetInt64(col(0, 1, &isnull));
    free_result();
    return n;
}

}  // namespace

void lock_queue_claims(int32 queue_id) {
    LOCKTAG tag;
    SET_LOCKTAG_ADVISORY(tag, MyDatabaseId, 0, (uint32)queue_id, kLockQueueClaims);
    (void)LockAcquire(&tag, ExclusiveLock, false, false);
}

void unlock_queue_claims(int32 queue_id) {
    LOCKTAG tag;
    SET_LOCKTAG_ADVISORY(tag, MyDatabaseId, 0, (uint32)queue_id, kLockQueueClaims);
    (void)LockRelease(&tag, ExclusiveLock, false);
}

int64 live_claims(int32 queue_id, TimestampTz now) {
    Datum v[2] = {Int32GetDatum(queue_id), TimestampTzGetDatum(now)};
    return count_of(s_live, v);
}

int64 claims_upper_bound() {
    Oid nsp = get_namespace_oid("claim", true);
    Oid relid = OidIsValid(nsp) ? get_relname_relid("claims", nsp) : InvalidOid;
    if (!OidIsValid(relid)) return PG_INT64_MAX;
    Relation rel = table_open(relid, AccessShareLock);
    int64 bound = (int64)RelationGetNumberOfBlocks(rel) * MaxHeapTuplesPerPage;
    table_close(rel, AccessShareLock);
    return bound;
}

int64 earlier_in_group(int32 queue_id, Datum group_key, int64 id, int64 limit) {
    Datum v[4] = {Int32GetDatum(queue_id), group_key, Int64GetDatum(id), Int64GetDatum(limit)};
    return count_of(s_earlier, v);
}

FinishSettings finish_settings(int32 queue_id) {
    FinishSettings fs{0, false};
    if (!lifecycle_catalog()) return fs;
    Datum v[1] = {Int32GetDatum(queue_id)};
    if (run(s_finish, v, nullptr) > 0) {
        bool isnull;
        Datum d = col(0, 1, &isnull);
        if (!isnull) fs.retain_us = interval_us(DatumGetIntervalP(d), "retain");
        fs.limited = DatumGetBool(col(0, 2, &isnull));
    }
    free_result();
    return fs;
}

}  // namespace pgclaim::pg
