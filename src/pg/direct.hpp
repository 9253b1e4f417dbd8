// Server layer: direct access to claim.items, claim.claims and
// claim.queues for the hot paths (claim_next, complete, enqueue, row-level
// trigger enqueue). No SPI, no planner, no executor start-up: index probes
// and scans with an explicit snapshot, heap inserts and deletes, and index
// entries through the executor's ExecInsertIndexTuples (partial-index
// predicates compiled once per backend). Reads are in direct_read.hpp,
// batched inserts in direct_batch.hpp.
//
// The same rules as pg.hpp: plain data only in frames that may raise.
// Every check that decides a write is made under the item's lock
// (pg::lock_item) with a snapshot taken after the lock was granted.
#pragma once

#include "core/scan_hint.hpp"
#include "pg/pg.hpp"

extern "C" {
#include "storage/itemptr.h"
#include "utils/snapshot.h"
}

namespace pgclaim::pg::direct {

// The OID of claim.items of the installed extension, or InvalidOid when
// there is none (cheap: resolved once, forgotten on invalidation).
Oid items_relid();
// The same for claim.item_parents (InvalidOid also in a catalog without it).
Oid item_parents_relid();

// Forget the resolved relation OIDs (the extension was dropped and created
// again). api::sync_caches() calls it.
void reset();

// A registered copy of the latest committed snapshot; release() it.
Snapshot latest();
// The same; *completions is the number of transactions that had ended
// (committed or aborted) in the server when it was taken, as PostgreSQL
// counts them to reuse a snapshot (0: not known). Two snapshots of one
// command with the same nonzero count see the same rows.
Snapshot latest(uint64 *completions);
void release(Snapshot snap);

// The relations of one call, opened with the locks and privilege checks
// the equivalent SQL would take. Closed by close() (or by the resource
// owner on error).
struct Tables;
// Loop: claim_next(done => ...): the relations of Claim, with the locks,
// rights and rules of Complete as well, opened once for the completion and
// the claim that follows it. use() says which of the two runs now.
enum class Mode { Claim, Complete, Enqueue, Loop };
Tables *open(Mode mode);
void use(Tables *t, Mode mode);
void close(Tables *t);

// Writes. The caller holds the item's lock.
// item_tid: where the item's row version is (kept in claims.item_tid).
// Returns whether the row was written here (not through SQL), with its
// tuple id in *claim_tid.
bool claim_insert(Tables *t, int64 item_id, int32 queue_id, int64 token, int32 attempt,
                  TimestampTz lease_until, TimestampTz claimed_at, Datum worker,
                  bool worker_null, const ItemPointerData *item_tid, ItemPointerData *claim_tid);
// Delete a claim row or an item by tuple id; false when the row was
// deleted or changed concurrently (by something that does not take item
// locks, e.g. drop_queue), in which case nothing was written.
bool claim_delete(Tables *t, const ItemPointerData *tid);
bool item_delete(Tables *t, const ItemPointerData *tid);

// The caller's privileges on claim.items and claim.claims (42501), for the
// calls that lock items before their statements run: checked first, so that
// a role without them never holds or waits for another role's items.
void require_rights(AclMode items, AclMode claims);

// Producers lock claim.items for writing before they look their queue up;
// drop_queue locks it against all writers (drop = true), and claim.claims
// against claimers, before it deletes.
// So a queue a producer found cannot be dropped before the producer's
// transaction ends, and a dropped queue is never found.
void lock_items(bool drop);

// Enqueue: the id of the queue named `name` in `snap`, or -1.
int32 queue_id(Tables *t, Datum name, Snapshot snap);
// Insert a new item (defaults filled in, `ord` computed); returns its id.
// fair_key_id: the item's fair key (direct_fair.hpp), -1 for none.
int64 item_insert(Tables *t, int32 queue_id, int32 priority, Datum run_at, bool run_at_null,
                  Datum group_key, bool group_null, Datum payload, int32 fair_key_id = -1);

// Is a scheduled item of the queue due at `now` (Claim mode; one probe of
// items_scheduled)?
bool scheduled_due(Tables *t, int32 queue_id, TimestampTz now, Snapshot snap);

// The next fencing token (nextval of claim.token_seq, with its USAGE check).
int64 next_token(Tables *t);

}  // namespace pgclaim::pg::direct
