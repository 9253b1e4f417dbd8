// Fencing tokens (docs/queues.md; docs/partitions.md): the partition
// check, the durable ceiling and the move of the sequence at the first grant
// after a server start, the WAL flush without the preload, the checks of a
// token argument, and PC001 for a token that is not a live claim.
#include "api/tokens.hpp"

#include "api/partition.hpp"

#include "core/rules.hpp"
#include "pg/token_store.hpp"
#include "shmem/shared.hpp"
#include "shmem/fencing.hpp"

namespace pgclaim::api {

namespace {
namespace ts = pg::token_store;

// A durable ceiling this backend has seen (of the sequence ceiling_oid): a
// token up to it may leave without another look at the ceiling.
int64 known_ceiling = 0;
Oid ceiling_oid = InvalidOid;

// Before the 0.3.0 update the schema has no ceiling: the first grant after a
// start moves the sequence 2^32 ahead instead, as 0.2.0 did.
pg::Stmt s_old_jump = {
    "SELECT pg_catalog.setval('claim.token_seq',"
    "                         pg_catalog.nextval('claim.token_seq') + 4294967296)",
    0, {}, nullptr};

void forget_other_ceiling(const ts::Seqs &s) {
    if (s.ceiling != ceiling_oid) {
        ceiling_oid = s.ceiling;
        known_ceiling = 0;
    }
}

// The first grant in this database since shared memory was set up: move the
// sequence past the durable ceiling (past every token a crash may have lost),
// a timeline jump further on a new timeline, and reserve the next block.
void fence(const ts::Seqs &s) {
    ts::lock();
    if (!shmem::tokens_fenced()) {
        int64 seq = ts::last_value(s.token_seq);
        int64 ceiling = ts::last_value(s.ceiling);
        uint32 tli = ts::timeline();
        bool new_timeline = (uint64)ts::last_value(s.timeline) != (uint64)tli;
        int64 at = 0, next_ceiling = 0;
        pg::call_core([&] {
            at = token::fence_start(seq, ceiling, new_timeline);
            next_ceiling = token::ceiling_for(at);
        });
        if (at != seq) ts::set_value(s.token_seq, at);
        if (new_timeline) ts::set_value(s.timeline, (int64)tli);
        ts::set_value(s.ceiling, next_ceiling);
        ts::flush(s.ceiling);  // the last of the three records: all are on disk
        forget_other_ceiling(s);
        known_ceiling = next_ceiling;
        shmem::mark_tokens_fenced();
        shmem::publish_tokens_ceiling(s.ceiling, next_ceiling);
    }
    ts::unlock();
}
}  // namespace

void before_tokens() {
    ts::Seqs s = ts::lookup();
    if (!OidIsValid(s.ceiling)) {
        if (guc_partition != 0)
            pg::error({ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
                       "Run ALTER EXTENSION pg_claim UPDATE in this database (docs/partitions.md)."},
                      "pg_claim.partition is %d, but the extension in this database predates 0.3.0, "
                      "whose tokens carry the partition",
                      guc_partition);
        if (!shmem::preloaded() || shmem::tokens_fenced()) return;
        pg::run(s_old_jump, nullptr, nullptr);
        pg::flush_token_wal();
        shmem::mark_tokens_fenced();
        return;
    }
    int partition = ts::partition_of_seq(s.token_seq);
    if (partition != guc_partition)
        pg::error({ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
                   "A database's partition changes only with claim.set_partition(partition), "
                   "which also sets pg_claim.partition for the database; sessions opened before "
                   "it reconnect. Never set pg_claim.partition for a session or a role "
                   "(docs/partitions.md)."},
                  "pg_claim.partition is %d in this session, but this database hands out the "
                  "tokens of partition %d",
                  guc_partition, partition);
    if (!shmem::preloaded() || shmem::tokens_fenced()) return;
    fence(s);
}

namespace {
// handed: the highest value of the sequence that left it (0: read it).
void cover_tokens(int64 handed) {
    if (!shmem::preloaded()) {
        pg::flush_token_wal();
        return;
    }
    ts::Seqs s = ts::lookup();
    if (!OidIsValid(s.ceiling)) return;  // before the update: the jump covers them
    forget_other_ceiling(s);
    if (handed == 0) handed = ts::last_value(s.token_seq);
    if (handed <= known_ceiling) return;
    // A ceiling that another backend flushed may cover it.
    int64 published = shmem::tokens_ceiling(s.ceiling);
    if (published > known_ceiling) known_ceiling = published;
    if (handed <= known_ceiling) return;
    // A token above every ceiling known: it leaves the server only once a
    // durable ceiling covers it.
    ts::lock();
    int64 ceiling = ts::last_value(s.ceiling);
    if (ceiling < handed) {
        pg::call_core([&] { ceiling = token::ceiling_for(handed); });
        ts::set_value(s.ceiling, ceiling);
        ts::flush(s.ceiling);
    }
    shmem::publish_tokens_ceiling(s.ceiling, ceiling);
    known_ceiling = ceiling;
    ts::unlock();
}
}  // namespace

void after_tokens() { cover_tokens(0); }

// The tokens this backend drew are all at or below `highest`: the ones
// other backends drew are theirs to cover.
void after_tokens(int64 highest) { cover_tokens(highest > 0 ? highest : 0); }

namespace {
struct Grant {
    int64 token;  // 0: empty
    int64 item;
    ItemPointerData claim_tid;
};
constexpr int kGrantBits = 10;
Grant grants[1 << kGrantBits];
inline int grant_slot(int64 token) {
    return (int)(((uint64)token * UINT64CONST(0x9E3779B97F4A7C15)) >> (64 - kGrantBits));
}
}  // namespace

void remember_grant(int64 token, int64 item, const ItemPointerData *claim_tid) {
    grants[grant_slot(token)] = Grant{token, item, *claim_tid};
}

bool granted_here(int64 token, int64 *item, ItemPointerData *claim_tid) {
    const Grant &g = grants[grant_slot(token)];
    if (g.token != token || token == 0) return false;
    *item = g.item;
    *claim_tid = g.claim_tid;
    return true;
}

void forget_grants() {
    for (Grant &g : grants) g.token = 0;
}

int64 token_arg(FunctionCallInfo fcinfo, int argno, const char *fn) {
    pg::require_arg(fcinfo, argno, "token");
    pg::require_primary(fn);
    return PG_GETARG_INT64(argno);
}

int64 lease_arg(FunctionCallInfo fcinfo, int argno) {
    if (PG_ARGISNULL(argno)) return -1;
    int64_t us = pg::interval_us(PG_GETARG_INTERVAL_P(argno), "lease");
    pg::call_core([&] { check_positive_duration("lease", us, kMaxLeaseUs); });
    return us;
}

void stale_token(int64 token, const char *why) {
    pg::error({pg::kStaleToken,
               "The lease expired, or the item was re-claimed, completed, failed or released. "
               "Discard this worker's result. An item that was completed, cancelled or is dead "
               "is not delivered again; any other is (or will be), under a new token.",
               why},
              "token %lld is not a live claim", (long long)token);
}

}  // namespace pgclaim::api
