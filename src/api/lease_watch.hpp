// The watch log's record of named leases (pg_claim.watch_leases,
// docs/coordination.md "Leases in the watch").
#pragma once

#include "pg/pg.hpp"

namespace pgclaim::api {

// pg_claim.watch_leases (registered by src/module.cpp): when on, every grant,
// release and expiry of a lease is a change in claim.watch.
extern bool guc_watch_leases;

// Each records one change of lease `name` (a text datum) through
// claim._coord_log when pg_claim.watch_leases is on, and does nothing when it
// is off. SPI must be connected.
//
// A grant: 'acquired', or 'acquired_shared' for claim.lease_acquire_shared.
void watch_lease_granted(Datum name, int64 token, bool shared, Datum holder, bool holder_null);
// A release that ended a live holding: 'released', with the holder's name.
void watch_lease_released(Datum name, int64 token);
// The holder of `token` in `slot` (a copy in the current memory context) and
// whether it had one, read before a grant takes the slot over from an
// expired holding; then watch_lease_expired records that holding's end.
struct EndedHolding {
    int64 token = 0;
    Datum holder = 0;
    bool holder_null = true;
};
EndedHolding watch_lease_ending(Datum name, int32 slot, int64 token);
void watch_lease_expired(Datum name, const EndedHolding &h);

}  // namespace pgclaim::api
