// Server layer: direct access to claim.lease_holders and
// claim.lease_released for the lease hot paths (lease_acquire,
// lease_release): index probes with the latest committed snapshot and
// in-place updates through the table AM, no SPI, no planner.
//
// Every update re-checks its condition on the latest version of the row,
// as UPDATE does: when a concurrent transaction changed the row, the call
// waits for it to end and reads the row again.
#pragma once

#include "pg/pg.hpp"

namespace pgclaim::pg::direct {

// The relations of one call, opened with the locks and privilege checks the
// equivalent SQL takes. Closed by lease_close() (or by the resource owner on
// error).
struct LeaseTables;
enum class LeaseMode { Acquire, Release };
LeaseTables *lease_open(LeaseMode mode);
void lease_close(LeaseTables *t);

// One holder row of a lease, read with the latest committed snapshot.
struct LeaseHolderRow {
    int32 slot;
    int32 permits;
    TimestampTz expires_at;  // DT_NOBEGIN (-infinity) when it was released
    int64 token;
    TimestampTz acquired_at;
};

// The holder rows of the lease `name` (a text datum) in slot order; a
// released holder reads as expired at -infinity. Returns the count; the rows
// are palloc'd in *out (grown from *cap as needed).
int lease_holders(LeaseTables *t, Datum name, LeaseHolderRow **out, int *cap);

// Grants `slot` of `name` to a new holder: the row must still carry
// `old_token` and, when `only_expired`, have expired at `now` (a renew may
// have won the race with the expiry). Draws the new token from
// claim.token_seq only then. Returns false when the row changed or is gone.
bool lease_take(LeaseTables *t, Datum name, int32 slot, int64 old_token, bool only_expired,
                TimestampTz now, TimestampTz until, Datum holder, bool holder_null,
                int32 permits, int64 *token);

// Releases the holding of `token`: its holder row must be live at `now`.
enum class ReleaseResult {
    NotLive,   // no live holder carries the token (or it was released already)
    Released,  // recorded in claim.lease_released
    NoRow,     // live, but its slot has no claim.lease_released row yet
};
ReleaseResult lease_release(LeaseTables *t, Datum name, int64 token, TimestampTz now);

}  // namespace pgclaim::pg::direct
