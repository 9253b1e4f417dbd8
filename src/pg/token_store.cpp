// Where fencing tokens come from: see token_store.hpp.
#include "pg/token_store.hpp"

#include "core/token.hpp"
#include "pg/direct_tables.hpp"

extern "C" {
#include "access/htup_details.h"
#include "access/relation.h"
#include "access/xlog.h"
#include "catalog/namespace.h"
#include "catalog/pg_sequence.h"
#include "commands/sequence.h"
#include "storage/bufmgr.h"
#include "storage/lmgr.h"
#include "utils/fmgrprotos.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/syscache.h"
}

namespace pgclaim::pg::token_store {

namespace {
// The advisory lock tag of the token lock: (database, 0x7063 'pc', 0x746f6b31
// 'tok1', class 3), a key no advisory lock function of SQL can produce
// (those use classes 1 and 2).
void lock_tag(LOCKTAG *tag) {
    SET_LOCKTAG_ADVISORY(*tag, MyDatabaseId, 0x7063, 0x746f6b31, 3);
}
}  // namespace

namespace {
// The sequences' OIDs and the partition, resolved once and forgotten when
// one of the sequences is invalidated (dropped, renamed, altered). Kept
// only when all three exist: a schema updated later is found then.
struct SeqCache {
    bool valid;
    Seqs s;
    bool partition_known;
    int partition;
};
SeqCache sc;

void on_relcache_inval(Datum, Oid relid) {
    if (!sc.valid) return;
    if (!OidIsValid(relid) || relid == sc.s.token_seq || relid == sc.s.ceiling ||
        relid == sc.s.timeline)
        sc.valid = false;
}
}  // namespace

Seqs lookup() {
    if (sc.valid) return sc.s;
    Seqs s;
    Oid nsp = get_namespace_oid("claim", true);
    if (OidIsValid(nsp)) {
        s.token_seq = get_relname_relid("token_seq", nsp);
        s.ceiling = get_relname_relid("token_ceiling", nsp);
        s.timeline = get_relname_relid("token_timeline", nsp);
    }
    if (!OidIsValid(s.token_seq))
        error({ERRCODE_UNDEFINED_TABLE, "Reinstall the extension: DROP EXTENSION pg_claim; CREATE EXTENSION pg_claim."},
              "sequence claim.token_seq of pg_claim is missing");
    if (!OidIsValid(s.ceiling) || !OidIsValid(s.timeline)) {
        s.ceiling = s.timeline = InvalidOid;
        return s;
    }
    direct::register_relcache_callback(on_relcache_inval);
    sc = SeqCache{true, s, false, 0};
    return s;
}

int64 last_value(Oid seq) {
    Relation rel = relation_open(seq, AccessShareLock);
    Buffer buf = ReadBuffer(rel, 0);
    LockBuffer(buf, BUFFER_LOCK_SHARE);
    Page page = BufferGetPage(buf);
    ItemId lp = PageGetItemId(page, FirstOffsetNumber);
    HeapTupleHeader td = (HeapTupleHeader)PageGetItem(page, lp);
    int64 v = ((Form_pg_sequence_data)((char *)td + td->t_hoff))->last_value;
    UnlockReleaseBuffer(buf);
    relation_close(rel, AccessShareLock);
    return v;
}

int partition_of_seq(Oid seq) {
    if (sc.valid && sc.partition_known && seq == sc.s.token_seq) return sc.partition;
    HeapTuple tup = SearchSysCache1(SEQRELID, ObjectIdGetDatum(seq));
    if (!HeapTupleIsValid(tup)) error({ERRCODE_UNDEFINED_TABLE}, "claim.token_seq is not a sequence");
    int64 max = ((Form_pg_sequence)GETSTRUCT(tup))->seqmax;
    ReleaseSysCache(tup);
    int partition = (int)(max >> token::kSeqBits);
    if (sc.valid && seq == sc.s.token_seq) {
        sc.partition = partition;
        sc.partition_known = true;
    }
    return partition;
}

void set_value(Oid seq, int64 v) {
    Oid save_user;
    int save_sec;
    GetUserIdAndSecContext(&save_user, &save_sec);
    Oid owner = InvalidOid;
    HeapTuple tup = SearchSysCache1(RELOID, ObjectIdGetDatum(seq));
    if (HeapTupleIsValid(tup)) {
        owner = ((Form_pg_class)GETSTRUCT(tup))->relowner;
        ReleaseSysCache(tup);
    }
    if (!OidIsValid(owner)) error({ERRCODE_UNDEFINED_TABLE}, "a token sequence of pg_claim is missing");
    SetUserIdAndSecContext(owner, save_sec | SECURITY_LOCAL_USERID_CHANGE);
    PG_TRY();
    {
        DirectFunctionCall2(setval_oid, ObjectIdGetDatum(seq), Int64GetDatum(v));
    }
    PG_FINALLY();
    {
        SetUserIdAndSecContext(save_user, save_sec);
    }
    PG_END_TRY();
}

void flush(Oid seq) {
    Relation rel = relation_open(seq, AccessShareLock);
    Buffer buf = ReadBuffer(rel, 0);
    LockBuffer(buf, BUFFER_LOCK_SHARE);
    XLogRecPtr lsn = PageGetLSN(BufferGetPage(buf));
    UnlockReleaseBuffer(buf);
    relation_close(rel, AccessShareLock);
    if (lsn > GetFlushRecPtr(NULL)) XLogFlush(lsn);
}

void lock() {
    LOCKTAG tag;
    lock_tag(&tag);
    (void)LockAcquire(&tag, ExclusiveLock, false, false);
}

void unlock() {
    LOCKTAG tag;
    lock_tag(&tag);
    (void)LockRelease(&tag, ExclusiveLock, false);
}

uint32 timeline() { return (uint32)GetWALInsertionTimeLine(); }

}  // namespace pgclaim::pg::token_store

namespace pgclaim::pg {

void flush_token_wal() {
    Oid nsp = get_namespace_oid("claim", false);
    Oid relid = get_relname_relid("token_seq", nsp);
    if (!OidIsValid(relid)) missing_object("sequence claim.token_seq");
    token_store::flush(relid);
}

}  // namespace pgclaim::pg
