// Moving with logical replication: see switchover.hpp.
#include "pg/switchover.hpp"

#include "core/token.hpp"
#include "pg/token_store.hpp"

extern "C" {
#include "access/htup_details.h"
#include "access/xlog.h"
#include "catalog/namespace.h"
#include "catalog/pg_sequence.h"
#include "commands/trigger.h"
#include "utils/lsyscache.h"
#include "utils/syscache.h"
}

namespace pgclaim::pg::switchover {

namespace {
namespace ts = pg::token_store;

// Tokens: a copied token moves claim.token_seq this far past it (the jump of
// a promotion: the tokens the source handed out after the copied one, claims'
// tokens among them, are not in the copy).
constexpr int64 kTokenMargin = token::kTimelineJump;
// Each move goes this much further, so that a stream of rising values moves a
// sequence once per this many (ids: once per 1024 items).
constexpr int64 kTokenSlack = int64(1) << 20;
constexpr int64 kIdSlack = 1024;

// The values this process made sure a sequence is at or above.
struct Ensured {
    Oid seq;
    int64 value;
};
constexpr int kCached = 8;
Ensured ensured[kCached];
int nensured = 0;

int64 *ensured_of(Oid seq) {
    for (int i = 0; i < nensured; ++i)
        if (ensured[i].seq == seq) return &ensured[i].value;
    if (nensured == kCached) nensured = 0;  // more sequences than expected: start over
    ensured[nensured] = Ensured{seq, 0};
    return &ensured[nensured++].value;
}

int64 seq_max(Oid seq) {
    HeapTuple tup = SearchSysCache1(SEQRELID, ObjectIdGetDatum(seq));
    if (!HeapTupleIsValid(tup)) missing_object("sequence of schema claim");
    int64 max = ((Form_pg_sequence)GETSTRUCT(tup))->seqmax;
    ReleaseSysCache(tup);
    return max;
}

// Makes sure the next value of `seq` is above `need`; when it must move, it
// moves to need + slack (at most the sequence's MAXVALUE). The initial copy
// runs one worker per table at once: the look and the move are one step
// under the token lock, so that no worker moves a sequence back.
void follow(Oid seq, int64 need, int64 slack) {
    int64 *known = ensured_of(seq);
    if (need <= *known) return;
    int64 at = ts::last_value(seq);
    if (at < need) {
        ts::lock();
        at = ts::last_value(seq);
        if (at < need) {
            int64 max = seq_max(seq);
            at = need > max - slack ? max : need + slack;
            ts::set_value(seq, at);
        }
        ts::unlock();
    }
    *known = at;
}

int attnum_of(TupleDesc desc, const char *name) {
    for (int i = 0; i < desc->natts; ++i) {
        Form_pg_attribute a = TupleDescAttr(desc, i);
        if (!a->attisdropped && strcmp(NameStr(a->attname), name) == 0) return i + 1;
    }
    return 0;
}

void follow_token(Oid seq, int64 token) {
    if (token <= 0 || token > token::kMaxToken) return;  // a token of 0.2.0's layout
    int mine = ts::partition_of_seq(seq);
    int theirs = (int)(token >> token::kSeqBits);
    if (theirs != mine)
        error({ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
               "Both sides of a logical replication must have the same partition: drop the "
               "subscription and the extension here, set pg_claim.partition of this database "
               "to the source's, and start again (docs/operations.md, \"Moving with logical "
               "replication\")."},
              "a copied token of partition %d arrived in a database of partition %d", theirs, mine);
    int64 need = token > token::kMaxToken - kTokenMargin ? token::kMaxToken : token + kTokenMargin;
    follow(seq, need, kTokenSlack);
}

Stmt s_mark = {
    "INSERT INTO claim.token_marks AS m (source, ceiling, marked_at) "
    "VALUES ($1, $2, pg_catalog.clock_timestamp()) "
    "ON CONFLICT (source) DO UPDATE SET ceiling = EXCLUDED.ceiling, marked_at = EXCLUDED.marked_at "
    "WHERE m.ceiling OPERATOR(pg_catalog.<) EXCLUDED.ceiling",
    2, {TEXTOID, INT8OID}, nullptr};

Stmt s_subscribed = {
    "SELECT EXISTS (SELECT FROM pg_catalog.pg_subscription_rel r "
    "  JOIN pg_catalog.pg_subscription s ON s.oid OPERATOR(pg_catalog.=) r.srsubid "
    "  WHERE r.srrelid OPERATOR(pg_catalog.=) $1 AND s.subenabled)",
    1, {OIDOID}, nullptr};
}  // namespace

Datum follow_row(FunctionCallInfo fcinfo) {
    if (!CALLED_AS_TRIGGER(fcinfo))
        error({ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED}, "claim._follow_copy() is a trigger function");
    TriggerData *td = (TriggerData *)fcinfo->context;
    if (!TRIGGER_FIRED_BEFORE(td->tg_event) || !TRIGGER_FIRED_FOR_ROW(td->tg_event) ||
        TRIGGER_FIRED_BY_DELETE(td->tg_event))
        error({ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED},
              "claim._follow_copy() must fire BEFORE INSERT OR UPDATE FOR EACH ROW");
    HeapTuple row = TRIGGER_FIRED_BY_UPDATE(td->tg_event) ? td->tg_newtuple : td->tg_trigtuple;
    TupleDesc desc = RelationGetDescr(td->tg_relation);
    Trigger *tg = td->tg_trigger;
    Oid nsp = get_namespace_oid("claim", false);
    for (int i = 0; i + 1 < tg->tgnargs; i += 2) {
        int attnum = attnum_of(desc, tg->tgargs[i]);
        Oid seq = get_relname_relid(tg->tgargs[i + 1], nsp);
        if (attnum == 0 || !OidIsValid(seq) || get_rel_relkind(seq) != RELKIND_SEQUENCE)
            error({ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED},
                  "claim._follow_copy(): no column \"%s\" or no sequence claim.%s", tg->tgargs[i],
                  tg->tgargs[i + 1]);
        bool isnull;
        Datum d = heap_getattr(row, attnum, desc, &isnull);
        if (isnull) continue;
        Oid type = TupleDescAttr(desc, attnum - 1)->atttypid;
        int64 v = type == INT4OID ? (int64)DatumGetInt32(d) : DatumGetInt64(d);
        if (strcmp(tg->tgargs[i + 1], "token_seq") == 0)
            follow_token(seq, v);
        else if (v > 0)
            follow(seq, v, kIdSlack);
    }
    return PointerGetDatum(row);
}

void publish_token_mark() {
    if (!XLogLogicalInfoActive()) return;
    Oid nsp = get_namespace_oid("claim", true);
    if (!OidIsValid(nsp)) return;
    Oid marks = get_relname_relid("token_marks", nsp);
    if (!OidIsValid(marks)) return;  // before the 0.4.0 update
    ts::Seqs s = ts::lookup();
    if (!OidIsValid(s.ceiling)) return;
    int64 c = ts::last_value(s.ceiling);
    int64 handed = ts::last_value(s.token_seq);
    if (handed > c) c = handed;
    static Oid published_rel = InvalidOid;
    static int64 published = 0;
    if (published_rel == marks && c <= published) return;
    char *source = psprintf("%llu/%u", (unsigned long long)GetSystemIdentifier(), MyDatabaseId);
    Datum v[2] = {CStringGetTextDatum(source), Int64GetDatum(c)};
    run(s_mark, v, nullptr);
    free_result();
    published_rel = marks;
    published = c;
}

bool copy_in_progress() {
    Oid nsp = get_namespace_oid("claim", true);
    if (!OidIsValid(nsp)) return false;
    Oid items = get_relname_relid("items", nsp);
    if (!OidIsValid(items)) return false;
    Datum v[1] = {ObjectIdGetDatum(items)};
    run(s_subscribed, v, nullptr);
    bool isnull;
    bool subscribed = DatumGetBool(col(0, 1, &isnull));
    free_result();
    return !isnull && subscribed;
}

}  // namespace pgclaim::pg::switchover
