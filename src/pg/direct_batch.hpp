// Batched inserts of new items (see direct.hpp for the rules).
#pragma once

#include "pg/direct.hpp"

namespace pgclaim::pg::direct {

// Many new items of one queue at once (a statement-level trigger): the
// heap rows are written in batches (table_multi_insert: one WAL record per
// page instead of one per row), then their index entries. Values passed to
// batch_add must be allocated in batch_memory(b) (or outlive the batch);
// that memory is reset after every flush.
struct ItemBatch;
// fair_key_id >= 0: every item of the batch carries that fair key.
ItemBatch *batch_begin(Tables *t, int32 queue_id, int32 priority, int32 fair_key_id = -1);
MemoryContext batch_memory(ItemBatch *b);
// fair_key_id >= 0: this item's fair key instead of the batch's.
void batch_add(ItemBatch *b, Datum group_key, bool group_null, Datum payload,
               int32 fair_key_id = -1);
// Write what is pending now (values passed so far may then be freed).
void batch_flush(ItemBatch *b);
// Writes what is pending and frees the batch; returns how many items it
// wrote in all.
int64 batch_end(ItemBatch *b);

}  // namespace pgclaim::pg::direct
