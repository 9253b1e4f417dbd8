// SQL surface: named leases and counting semaphores.
//   claim.lease_acquire, claim.lease_renew, claim.lease_release,
//   claim.lease_assert (the view claim.leases is plain SQL)
//
// Concurrency model (docs/leases.md):
//  * a lease named N with `permits` slots has one row per granted slot in
//    claim.lease_holders; a slot is held while expires_at is in the future
//    (server clock). The table is logged: leases survive a restart;
//  * a slot is granted under a transaction-level lock on (N, slot)
//    (pg::lock_lease, a 64-bit hash of both). Acquirers only *try* it and
//    skip busy slots, so they never wait for each other; they keep it until
//    their transaction ends, so an uncommitted grant is not granted twice;
//  * lease_assert waits for that lock and keeps it until the caller's
//    transaction ends: no acquirer can grant the slot meanwhile, even when
//    the holder's lease runs out. A paused holder cannot commit writes that
//    it guarded with lease_assert after someone else took over;
//  * a release records the token in the UNLOGGED claim.lease_released (no
//    WAL, no flush at commit; lost in a crash, when the lease stays held
//    until its ttl ends). A slot is free when its holder expired or was
//    released; the next grant updates the holder row in place (HOT);
//  * renew and release work on the holder's row by (N, token) without the
//    slot lock: a concurrent grant of the slot replaces the token, and the
//    update re-checks its condition on the latest row version;
//  * shared holders (claim.lease_acquire_shared) take slots 1 .. 1000 with
//    permits 0 and coexist; the exclusive holder takes slot 0 as a plain
//    lease of 1 permit. A request of one mode is granted when no holder of
//    the other mode is live; expired holders of the other mode are retired
//    first (other_mode_allows). Shared and exclusive grants in flight are
//    announced with different counts, so they never both succeed;
//  * every check reads the latest committed state. The grant of a slot that
//    has a row, the read of the holders and the release go through direct
//    index probes and updates (pg/direct_leases.hpp); the rest through SPI.
#include "api/lease_watch.hpp"
#include "api/partition.hpp"
#include "api/tokens.hpp"
#include "pg/compat.hpp"
#include "pg/item_locks.hpp"
#include "pg/direct_leases.hpp"
#include "core/error.hpp"
#include "core/lease_rules.hpp"
#include "core/rules.hpp"
#include "shmem/lease_grants.hpp"
#include "shmem/wakeup.hpp"

#include <string>
#include <string_view>

extern "C" {
#include "common/hashfn.h"
#include "mb/pg_wchar.h"
#include "tcop/utility.h"
}

using namespace pgclaim;
using pgclaim::pg::Stmt;
namespace direct = pgclaim::pg::direct;

namespace {

// While a slot that looked free is locked by another transaction (a grant
// not yet committed, or a lease_assert), look again this often: such a
// transaction can end without waking anyone.
constexpr int64_t kBusyPollUs = 100 * 1000;
constexpr int kMaxHolderBytes = 1024;

#define RELEASED(a)                                                              \
    "EXISTS (SELECT 1 FROM claim.lease_released r"                              \
    "        WHERE r.name = " a ".name AND r.slot = " a ".slot AND r.token = " a ".token)"

// A slot without a row.
Stmt s_insert = {
    "INSERT INTO claim.lease_holders"
    "  (name, slot, token, holder, permits, acquired_at, expires_at) "
    "VALUES ($1, $2, " PGCLAIM_NEXT_TOKEN_SQL ", $3, $4, $5, $6) "
    "ON CONFLICT (name, slot) DO NOTHING "
    "RETURNING token",
    6, {TEXTOID, INT4OID, TEXTOID, INT4OID, TIMESTAMPTZOID, TIMESTAMPTZOID}, nullptr};

Stmt s_renew = {
    "UPDATE claim.lease_holders h SET expires_at = $3 "
    "WHERE h.name = $1 AND h.token = $2 AND h.expires_at > $4 AND NOT " RELEASED("h") " "
    "RETURNING h.expires_at",
    4, {TEXTOID, INT8OID, TIMESTAMPTZOID, TIMESTAMPTZOID}, nullptr};

// Ends a live holding whose slot has no claim.lease_released row yet (the
// direct path updates the row the slot has).
Stmt s_release = {
    "INSERT INTO claim.lease_released AS x (name, slot, token) "
    "SELECT h.name, h.slot, h.token FROM claim.lease_holders h "
    "WHERE h.name = $1 AND h.token = $2 AND h.expires_at > $3 "
    "ON CONFLICT (name, slot) DO UPDATE SET token = EXCLUDED.token"
    "  WHERE x.token <> EXCLUDED.token "
    "RETURNING 1",
    3, {TEXTOID, INT8OID, TIMESTAMPTZOID}, nullptr};

Stmt s_find = {"SELECT slot FROM claim.lease_holders WHERE name = $1 AND token = $2", 2,
               {TEXTOID, INT8OID}, nullptr};

Stmt s_live_at = {
    "SELECT 1 FROM claim.lease_holders h WHERE h.name = $1 AND h.slot = $2 AND h.token = $3"
    "  AND h.expires_at > $4 AND NOT " RELEASED("h"),
    4, {TEXTOID, INT4OID, INT8OID, TIMESTAMPTZOID}, nullptr};

Stmt s_holder_state = {
    "SELECT CASE WHEN " RELEASED("h") " THEN '-infinity'::timestamptz ELSE h.expires_at END "
    "FROM claim.lease_holders h WHERE h.name = $1 AND h.token = $2",
    2, {TEXTOID, INT8OID}, nullptr};

// The name argument, checked.
struct NameArg {
    text *t;
    const char *data;
    int len;
    char *shown;  // for messages: clipped to whole characters
};

NameArg name_arg(FunctionCallInfo fcinfo, int argno) {
    NameArg n;
    n.t = PG_GETARG_TEXT_PP(argno);
    n.data = VARDATA_ANY(n.t);
    n.len = (int)VARSIZE_ANY_EXHDR(n.t);
    const char *d = n.data;
    int len = n.len;
    pg::call_core([&] { check_lease_name(std::string_view(d, (size_t)len)); });
    constexpr int kShown = 200;
    if (n.len <= kShown) {
        n.shown = pnstrdup(n.data, n.len);
    } else {
        int cut = pg_mbcliplen(n.data, n.len, kShown);
        n.shown = (char *)palloc(cut + 4);
        memcpy(n.shown, n.data, cut);
        memcpy(n.shown + cut, "...", 4);
    }
    return n;
}

// Key of the wake-ups for a lease, and of the lock on one of its slots.
uint64 wake_key(const NameArg &n) {
    return hash_bytes_extended((const unsigned char *)n.data, n.len, 0);
}
uint64 slot_key(const NameArg &n, int32 slot) {
    return hash_bytes_extended((const unsigned char *)n.data, n.len, (uint64)slot + 1);
}

int64_t ttl_arg(FunctionCallInfo fcinfo, int argno) {
    int64_t us = pg::interval_us(PG_GETARG_INTERVAL_P(argno), "ttl");
    pg::call_core([&] { check_positive_duration("ttl", us, kMaxLeaseTtlUs); });
    return us;
}

// PC001 for a token that does not hold the lease (SPI connected).
[[noreturn]] void stale_lease_token(const NameArg &n, int64 token, TimestampTz now) {
    Datum v[2] = {PointerGetDatum(n.t), Int64GetDatum(token)};
    const char *detail;
    if (pg::run(s_holder_state, v, nullptr) == 0) {
        detail = "No holder of this lease carries the token: it is unknown, was released, or its "
                 "slot was granted again.";
    } else {
        bool isnull;
        TimestampTz until = DatumGetTimestampTz(pg::col(0, 1, &isnull));
        if (until == DT_NOBEGIN)
            detail = "The lease was released.";
        else if (until > now)  // renewed or granted in between: say so rather than guess
            detail = "The lease changed while this call ran.";
        else
            detail = psprintf("The lease expired at %s.", timestamptz_to_str(until));
    }
    pg::error({pg::kStaleToken,
               "The lease expired, was released, or its slot went to another holder. Stop the "
               "work done under this token and acquire the lease again.",
               detail},
              "token %lld does not hold lease \"%s\"", (long long)token, n.shown);
}

}  // namespace

namespace {

// Shared holders (claim.lease_acquire_shared) of a lease: rows with permits
// kSharedMark in slots 1 .. kMaxShared; the exclusive holder of the same
// name has slot 0 and permits 1 (a plain claim.lease_acquire).
constexpr int32 kSharedMark = 0;
constexpr int32 kMaxShared = kMaxPermits;

// Ends the expired holdings of the other mode that were never released, by
// moving their expiry back to their grant: a renew of one that is in
// flight (it checked the expiry before it passed) then waits for this
// update and finds the holding expired; one that committed first is seen
// by s_other_live. $2: the other mode is shared.
#define RETIRE                                                                     \
    "UPDATE claim.lease_holders h SET expires_at = h.acquired_at "                 \
    "WHERE h.name = $1 AND (h.permits = 0) = $2 AND h.expires_at <= $3"            \
    "  AND h.expires_at > h.acquired_at AND NOT " RELEASED("h")

Stmt s_retire = {RETIRE, 3, {TEXTOID, BOOLOID, TIMESTAMPTZOID}, nullptr};

// The same, recording each holding it ends as 'expired' in the watch log
// (pg_claim.watch_leases).
Stmt s_retire_watched = {
    "WITH r AS (" RETIRE " RETURNING h.name, h.token, h.holder) "
    "SELECT claim._coord_log('lease', r.name, 'expired', r.token, r.holder) FROM r ORDER BY r.token",
    3, {TEXTOID, BOOLOID, TIMESTAMPTZOID}, nullptr};

Stmt s_other_live = {
    "SELECT min(h.expires_at) FROM claim.lease_holders h "
    "WHERE h.name = $1 AND (h.permits = 0) = $2 AND h.expires_at > $3 AND NOT " RELEASED("h"),
    3, {TEXTOID, BOOLOID, TIMESTAMPTZOID}, nullptr};

struct Ask {
    bool shared;
    int32 permits;   // 1 when shared
    int64_t ttl_us, wait_us;
    Datum holder;
    bool holder_null;
};

Ask ask_args(FunctionCallInfo fcinfo, bool shared) {
    Ask a;
    a.shared = shared;
    a.ttl_us = ttl_arg(fcinfo, 1);
    a.permits = shared ? 1 : PG_GETARG_INT32(3);
    a.wait_us = pg::interval_us(PG_GETARG_INTERVAL_P(shared ? 3 : 4), "wait");
    int32 permits = a.permits;
    int64_t wait_us = a.wait_us;
    pg::call_core([&] {
        check_permits(permits);
        check_nonnegative_duration("wait", wait_us, kMaxLeaseWaitUs);
    });
    a.holder_null = PG_ARGISNULL(2);
    a.holder = a.holder_null ? (Datum)0 : PG_GETARG_DATUM(2);
    if (!a.holder_null && VARSIZE_ANY_EXHDR(DatumGetTextPP(a.holder)) > (size_t)kMaxHolderBytes) {
        pg::error({ERRCODE_INVALID_PARAMETER_VALUE}, "holder is too long: the maximum is %d bytes",
                  kMaxHolderBytes);
    }
    return a;
}

// The holders of the other mode (shared ones for an exclusive request,
// the exclusive one for a shared request): whether they let this request
// be granted now. Live ones block until their next expiry (*next_expiry);
// an expired one whose slot is locked (its lease_assert is running) makes
// the lease busy; expired ones are retired (s_retire) before the grant.
bool other_mode_allows(const NameArg &n, const Ask &a, const direct::LeaseHolderRow *read,
                       int nrows, TimestampTz now, int64_t *next_expiry, bool *busy) {
    bool blocked = false, to_retire = false;
    for (int r = 0; r < nrows; ++r) {
        const direct::LeaseHolderRow &h = read[r];
        if ((h.permits == kSharedMark) == a.shared) continue;  // same mode
        if (h.expires_at > now) {
            if (a.shared && h.permits != 1) {
                int32 p = h.permits;
                pg::call_core([&] {
                    throw Error(sqlstate::kLeaseMismatch,
                                "lease \"" + std::string(n.shown) + "\" is held with " +
                                    std::to_string(p) + " permits, not in shared mode",
                                "A shared lease is a lease of 1 permit: use the name for a "
                                "semaphore or for a shared and exclusive lease, not both.");
                });
            }
            blocked = true;
            if (h.expires_at < *next_expiry) *next_expiry = h.expires_at;
            continue;
        }
        if (h.expires_at == DT_NOBEGIN || h.expires_at <= h.acquired_at) continue;  // done
        // Expired, not released, not retired: its holder may be inside a
        // lease_assert (it keeps the slot's lock until its transaction ends).
        uint64 key = slot_key(n, h.slot);
        if (!pg::lock_lease(key, false)) {
            *busy = true;
            blocked = true;
            continue;
        }
        // An exclusive request keeps the lock (as it keeps its own slot's);
        // shared requests give it back, so that they do not exclude each other.
        if (a.shared) pg::unlock_lease(key);
        to_retire = true;
    }
    if (blocked) return false;
    if (!to_retire) return true;
    Datum v[3] = {PointerGetDatum(n.t), BoolGetDatum(!a.shared), TimestampTzGetDatum(now)};
    (void)pg::run(api::guc_watch_leases ? s_retire_watched : s_retire, v, nullptr);
    pg::free_result();
    (void)pg::run(s_other_live, v, nullptr);
    bool isnull;
    Datum m = pg::col(0, 1, &isnull);
    int64_t live_until = isnull ? 0 : DatumGetTimestampTz(m);
    pg::free_result();
    if (isnull) return true;
    if (live_until < *next_expiry) *next_expiry = live_until;
    return false;
}

Datum acquire(FunctionCallInfo fcinfo, const NameArg &n, const Ask &a) {
    int32 permits = a.permits;
    // Slots this request plans over: 0 .. permits-1, or the shared ones
    // (1 .. kMaxShared, planned as 0 .. kMaxShared-1).
    int32 nslots = a.shared ? kMaxShared : permits;
    int32 base = a.shared ? 1 : 0;
    int32 mark = a.shared ? kSharedMark : permits;
    SPI_connect();
    api::before_tokens();
    direct::LeaseTables *lt = direct::lease_open(direct::LeaseMode::Acquire);
    int cap = permits + 8;
    direct::LeaseHolderRow *read = (direct::LeaseHolderRow *)palloc(sizeof(*read) * cap);
    HolderRow *rows = (HolderRow *)palloc(sizeof(HolderRow) * cap);
    int32 *free_slots = (int32 *)palloc(sizeof(int32) * nslots);
    int64 *old_token = (int64 *)palloc(sizeof(int64) * nslots);  // 0: no row
    bool *expired = (bool *)palloc(sizeof(bool) * nslots);       // not released
    bool *unrecorded = (bool *)palloc(sizeof(bool) * nslots);    // expired, not retired
    TimestampTz deadline = pg::clock_now() + a.wait_us;
    const char *shown = n.shown;
    int64 token = 0;
    bool granted = false;
    bool held = false;  // an announcement kept while waiting (below)

    // Grants in flight are announced in shared memory before the holders are
    // read: one with another permit count (shared grants count 0) makes the
    // name busy, and one that committed since is seen among the holders
    // (PC002, or the other mode's holder).
    uint64 name_hash = slot_key(n, -1);
    while (!granted) {
        TimestampTz now = pg::clock_now();
        bool announced = held || shmem::lease_grant_begin(name_hash, mark);
        held = false;
        int nrows = direct::lease_holders(lt, PointerGetDatum(n.t), &read, &cap);
        rows = (HolderRow *)repalloc(rows, sizeof(HolderRow) * cap);
        for (int32 s = 0; s < nslots; ++s) {
            old_token[s] = 0;
            expired[s] = false;
            unrecorded[s] = false;
        }
        // Rows planned over: this mode's (the exclusive request of a
        // semaphore plans over every row, as it did before shared holders
        // existed: a live shared holder is another permit count, PC002).
        int nplan = 0;
        bool modes = a.shared || permits == 1;
        for (int r = 0; r < nrows; ++r) {
            int32 slot = read[r].slot - base;
            if (a.shared ? slot < 0 : (modes && read[r].permits == kSharedMark)) continue;
            rows[nplan].slot = slot;
            rows[nplan].permits = a.shared ? nslots : read[r].permits;
            rows[nplan].expires_at = read[r].expires_at;
            ++nplan;
            if (slot >= 0 && slot < nslots) {
                old_token[slot] = read[r].token;
                expired[slot] = read[r].expires_at != DT_NOBEGIN;  // -infinity: released
                unrecorded[slot] = expired[slot] && read[r].expires_at > read[r].acquired_at;
            }
        }
        int32 nfree = 0;
        int64 next_expiry = 0;
        pg::call_core([&] {
            SlotPlan p = plan_slots(shown, nslots, rows, nplan, now, free_slots);
            nfree = p.nfree;
            next_expiry = p.next_expiry;
        });

        bool busy = false;
        if (!announced) {
            busy = true;
            nfree = 0;
        } else if (modes && nfree > 0 &&
                   !other_mode_allows(n, a, read, nrows, now, &next_expiry, &busy)) {
            // Writer preference: an exclusive request that waits for shared
            // holders keeps its announcement, so new shared requests wait
            // behind it (docs/leases.md).
            held = !a.shared && !busy;
            nfree = 0;
        }
        // Shared requests start at a slot of their own backend's choosing,
        // so that many at once do not all try the same free slot first.
        int first = a.shared && nfree > 0 ? pg::compat::my_procno() % nfree : 0;
        for (int k = 0; k < nfree; ++k) {
            int i = (first + k) % nfree;
            int32 slot = free_slots[i] + base;
            uint64 key = slot_key(n, slot);
            if (!pg::lock_lease(key, false)) {  // a grant in flight, or lease_assert
                busy = true;
                continue;
            }
            // A slot that has a row is taken over from its old token (a HOT
            // update). Under the slot's lock the row changes only by a grant
            // that committed since it was read (a new token), or by a renew
            // that won the race with the expiry (the slot was free because
            // it expired, not because it was released); lease_take checks
            // both on the latest row version.
            if (old_token[slot - base] != 0) {
                api::EndedHolding ended;
                if (unrecorded[slot - base])
                    ended = api::watch_lease_ending(PointerGetDatum(n.t), slot,
                                                    old_token[slot - base]);
                granted = direct::lease_take(lt, PointerGetDatum(n.t), slot,
                                             old_token[slot - base], expired[slot - base], now,
                                             now + a.ttl_us, a.holder, a.holder_null, mark,
                                             &token);
                if (granted) {  // the lock stays until the transaction ends
                    api::watch_lease_expired(PointerGetDatum(n.t), ended);
                    break;
                }
            } else {
                Datum gv[6] = {PointerGetDatum(n.t),     Int32GetDatum(slot),
                               a.holder,                 Int32GetDatum(mark),
                               TimestampTzGetDatum(now), TimestampTzGetDatum(now + a.ttl_us)};
                char gn[7] = {' ', ' ', a.holder_null ? 'n' : ' ', ' ', ' ', ' ', '\0'};
                if (pg::run(s_insert, gv, gn) > 0) {
                    token = pg::col_int64(0, 1);
                    granted = true;
                    break;
                }
                pg::free_result();
            }
            pg::unlock_lease(key);  // granted by someone else since we looked
            busy = true;
        }
        if (granted) break;

        now = pg::clock_now();
        if (now >= deadline) held = false;
        if (announced && !held) shmem::lease_grant_cancel(name_hash);
        if (now >= deadline) break;
        int64_t us = 0;
        pg::call_core([&] { us = next_wait_us(now, deadline, next_expiry, busy, kBusyPollUs); });
        if (us > 0)
            (void)shmem::wait_for(shmem::WaitKind::Lease, (int64)wake_key(n),
                                  (long)((us + 999) / 1000));
        else
            CHECK_FOR_INTERRUPTS();
    }
    direct::lease_close(lt);
    if (granted) {
        api::watch_lease_granted(PointerGetDatum(n.t), token, a.shared, a.holder, a.holder_null);
        // The token must be durable before it leaves the server.
        api::after_tokens();
    }
    SPI_finish();
    if (!granted) PG_RETURN_NULL();
    PG_RETURN_INT64(token);
}

}  // namespace

PGCLAIM_FUNCTION(pgclaim_lease_acquire) {
    pg::require_args(fcinfo, "name", "ttl", nullptr, "permits", "wait");
    pg::require_primary("claim.lease_acquire");
    NameArg n = name_arg(fcinfo, 0);
    Ask a = ask_args(fcinfo, false);
    return acquire(fcinfo, n, a);
}

PGCLAIM_FUNCTION(pgclaim_lease_acquire_shared) {
    pg::require_args(fcinfo, "name", "ttl", nullptr, "wait");
    pg::require_primary("claim.lease_acquire_shared");
    PreventCommandIfReadOnly("claim.lease_acquire_shared()");
    NameArg n = name_arg(fcinfo, 0);
    Ask a = ask_args(fcinfo, true);
    return acquire(fcinfo, n, a);
}

PGCLAIM_FUNCTION(pgclaim_lease_renew) {
    pg::require_args(fcinfo, "name", "token", "ttl");
    pg::require_primary("claim.lease_renew");
    NameArg n = name_arg(fcinfo, 0);
    int64 token = PG_GETARG_INT64(1);
    int64_t ttl_us = ttl_arg(fcinfo, 2);
    SPI_connect();
    TimestampTz now = pg::clock_now();
    Datum v[4] = {PointerGetDatum(n.t), Int64GetDatum(token), TimestampTzGetDatum(now + ttl_us),
                  TimestampTzGetDatum(now)};
    if (pg::run(s_renew, v, nullptr) == 0) stale_lease_token(n, token, now);
    bool isnull;
    TimestampTz until = DatumGetTimestampTz(pg::col(0, 1, &isnull));
    SPI_finish();
    PG_RETURN_TIMESTAMPTZ(until);
}

PGCLAIM_FUNCTION(pgclaim_lease_release) {
    pg::require_arg(fcinfo, 0, "name");
    int64 token = api::token_arg(fcinfo, 1, "claim.lease_release");
    NameArg n = name_arg(fcinfo, 0);
    // The release is recorded in the UNLOGGED claim.lease_released: no WAL,
    // so the commit does not wait for a flush. A release lost in a crash
    // leaves the lease held until its ttl ends. The holder row stays for the
    // next grant of the slot.
    TimestampTz now = pg::clock_now();
    direct::LeaseTables *lt = direct::lease_open(direct::LeaseMode::Release);
    direct::ReleaseResult r = direct::lease_release(lt, PointerGetDatum(n.t), token, now);
    direct::lease_close(lt);
    bool live = r == direct::ReleaseResult::Released;
    if (r == direct::ReleaseResult::NoRow) {
        SPI_connect();
        Datum v[3] = {PointerGetDatum(n.t), Int64GetDatum(token), TimestampTzGetDatum(now)};
        live = pg::run(s_release, v, nullptr) > 0;
        SPI_finish();
    }
    if (live && api::guc_watch_leases) {
        SPI_connect();
        api::watch_lease_released(PointerGetDatum(n.t), token);
        SPI_finish();
    }
    // A slot is free once this commits: wake a waiter.
    if (live) shmem::notify_ready(shmem::WaitKind::Lease, (int64)wake_key(n));
    PG_RETURN_BOOL(live);
}

PGCLAIM_FUNCTION(pgclaim_lease_assert) {
    pg::require_arg(fcinfo, 0, "name");
    int64 token = api::token_arg(fcinfo, 1, "claim.lease_assert");
    NameArg n = name_arg(fcinfo, 0);
    SPI_connect();
    Datum fv[2] = {PointerGetDatum(n.t), Int64GetDatum(token)};
    if (pg::run(s_find, fv, nullptr) == 0) stale_lease_token(n, token, pg::clock_now());
    int32 slot = pg::col_int32(0, 1);
    // Kept until the caller's transaction ends: no acquirer can grant this
    // slot before then, even if the lease runs out meanwhile.
    pg::lock_lease(slot_key(n, slot), true);
    TimestampTz now = pg::clock_now();
    Datum v[4] = {PointerGetDatum(n.t), Int32GetDatum(slot), Int64GetDatum(token),
                  TimestampTzGetDatum(now)};
    if (pg::run(s_live_at, v, nullptr) == 0) stale_lease_token(n, token, now);
    SPI_finish();
    PG_RETURN_VOID();
}
