// Direct reads of claim.items and claim.claims for the hot paths (see
// direct.hpp for the rules): the ready scan, and rows by id, tuple id or
// token.
#pragma once

#include "pg/direct.hpp"

namespace pgclaim::pg::direct {

// Ready items of a queue in delivery order (ord, id), from the head or
// from `from` (inclusive or strictly after). With `stretch`, the scan first
// reads the entries of from.ord up to id from.id + stretch, and only then
// the rest: the same entries in the same order, but a walk that finds what
// it wants near `from` reads no further into the index page.
struct ReadyScan;
ReadyScan *ready_begin(Tables *t, int32 queue_id, const ScanPos *from, bool inclusive,
                       Snapshot snap, int64 stretch = 0);
// The next visible ready item and its tuple id; *group_key is valid until
// the next call.
bool ready_next(ReadyScan *s, int64 *id, int32 *ord, Datum *group_key, bool *group_null,
                ItemPointerData *tid);
// The same, but each index entry is first shown to `pass` with the item's
// id and ord read from the index: when it returns true, the entry is passed
// over without reading its row (a claimer's walk passes the items other
// claimers hold this way, without touching the heap pages they write).
using PassFn = bool (*)(int64 id, int32 ord, void *arg);
bool ready_next_passing(ReadyScan *s, PassFn pass, void *arg, int64 *id, int32 *ord,
                        Datum *group_key, bool *group_null, ItemPointerData *tid);
void ready_end(ReadyScan *s);
// The next ready, unscheduled item that an index scan over claim.items
// reaches (the scans of items_ready and items_fair); false at the end.
bool next_ready_item(Tables *t, struct IndexScanDescData *scan, int64 *id, int32 *ord, Datum *group_key,
                     bool *group_null, ItemPointerData *tid);
// Ends such a scan (the index stays open).
void end_item_scan(Tables *t, struct IndexScanDescData *scan);

struct ClaimRow {
    int64 token;
    int32 attempt;
    TimestampTz lease_until;
    ItemPointerData tid;
    // claims.item_tid: where the item's row was when it was claimed
    // (has_item_tid false when the row has none).
    ItemPointerData item_tid;
    bool has_item_tid;
};
// The claim row of an item, if one is visible.
bool claim_of(Tables *t, int64 item_id, Snapshot snap, ClaimRow *out);
// Items whose claim row carries `token`, ascending; returns the count and
// a palloc'd array in *ids.
int items_with_token(Tables *t, int64 token, Snapshot snap, int64 **ids);

struct ItemRow {
    int32 queue_id;
    bool ready;  // state 'r' and run_at NULL
    int32 failures;
    bool group_null;
    Datum group_key;  // these datums stay valid until the next item_get()
    Datum payload;
    TimestampTz enqueued_at;
    ItemPointerData tid;
};
bool item_get(Tables *t, int64 id, Snapshot snap, ItemRow *out);
// The same for one row version (from a scan): false unless that version is
// visible to `snap` (it was deleted or updated since).
bool item_at(Tables *t, const ItemPointerData *tid, Snapshot snap, ItemRow *out);
// item_at for the tuple id a claim row kept (claims.item_tid): also false
// when that line is past the end of the table or holds another item's row
// by now (moved by VACUUM FULL or pg_repack, pruned and reused). A version
// of item `id` visible to `snap` is the one item_tids would find.
bool item_of_claim(Tables *t, int64 id, const ItemPointerData *tid, Snapshot snap,
                   ItemRow *out);

// The unfinished items (state 'r') of a group in id order, after
// `after_id` (every one when it is negative); *ready: not scheduled.
struct GroupScan;
GroupScan *group_begin(Tables *t, int32 queue_id, Datum group_key, int64 after_id,
                       Snapshot snap);
bool group_next(GroupScan *s, int64 *id, bool *ready, ItemPointerData *tid);
void group_end(GroupScan *s);

// Is an earlier unfinished item of the group visible?
bool group_has_earlier(Tables *t, int32 queue_id, Datum group_key, int64 id, Snapshot snap);

}  // namespace pgclaim::pg::direct
