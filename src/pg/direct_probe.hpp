// Many rows by key at once (see direct.hpp for the rules): the claim rows
// of a batch's items, the claim rows carrying a batch's tokens, the item
// rows of a batch. A dense key set is read with one range scan of the index
// instead of one descent per key.
#pragma once

#include "pg/direct_read.hpp"

namespace pgclaim::pg::direct {

// The claim row of each item ids[i] visible to `snap` (has[i]; out[i] when
// it has one): what claim_of gives for each, in one pass.
void claims_of(Tables *t, const int64 *ids, int n, Snapshot snap, ClaimRow *out, bool *has);
// The claim row of item_id at tuple id `tid`, if that version is visible to
// `snap`. A row visible to a snapshot taken under the item's lock is the
// item's claim row as claim_of would read it; false says only that this
// version is not (updated since, or gone): claims_of then tells.
bool claim_at(Tables *t, int64 item_id, const ItemPointerData *tid, Snapshot snap,
              ClaimRow *out);
// The items whose claim row, visible to `snap`, carries one of tokens[0..n):
// fn(k, item_id, claim_tid, arg) for each (token index k, item) pair, the
// pairs of one token in no particular order (what items_with_token gives
// for each), with the tuple id of the claim row.
using TokenItemFn = void (*)(int k, int64 item_id, const ItemPointerData *claim_tid, void *arg);
void items_with_tokens(Tables *t, const int64 *tokens, int n, Snapshot snap, TokenItemFn fn,
                       void *arg);
// The tuple id of the row of each item ids[i] visible to `snap` (found[i]):
// item_at(tids[i]) then reads what item_get(ids[i]) would.
void item_tids(Tables *t, const int64 *ids, int n, Snapshot snap, ItemPointerData *tids,
               bool *found);

// claim_of for a walk over the ready index: the items it asks about come in
// ascending id order (one priority), so one forward scan of claims_pkey
// answers them, reading each leaf page once. An id not above the last one
// starts a new scan. Reset it before the snapshot it was used with is
// released.
struct ClaimCursor;
ClaimCursor *claim_cursor_begin(Tables *t);
bool claim_of_cursor(ClaimCursor *c, int64 item_id, Snapshot snap, ClaimRow *out);
void claim_cursor_reset(ClaimCursor *c);
void claim_cursor_end(ClaimCursor *c);

}  // namespace pgclaim::pg::direct
