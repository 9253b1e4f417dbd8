// Server layer: the rules a table can carry that direct heap and index
// writes (direct.hpp) do not keep, and the statements that keep them.
//
// The direct writes fill every column of the extension's own and write the
// heap and the indexes themselves. That keeps the table's rules only while
// the table has none beyond those the extension installed. When claim.items
// or claim.claims carries any of these, the write of that call goes through
// SQL (INSERT or DELETE through SPI, with the executor) instead:
//   - a trigger that fires in this session (by its ENABLE state and
//     session_replication_role): a user's, pg_repack's log trigger, the
//     action triggers of a foreign key that references the table;
//   - row-level security that applies to the calling role (the reads of
//     claim.items are then also checked row by row, so that a claimer only
//     gets the items its policies let it see);
//   - on inserts: a CHECK constraint beyond the extension's, a column the
//     direct write does not fill that has a default, a generation
//     expression or NOT NULL, a deferrable or exclusion index.
// The checks read the relation cache of the open table (no catalog access):
// a trigger, a policy, a column or a constraint added or dropped sends an
// invalidation, and the next call sees it.
#pragma once

#include "pg/direct_tables.hpp"

namespace pgclaim::pg::direct {

// History: a slot of claim.finished (or the table itself), whose own CHECK
// (finished_state_check) the direct write keeps; its columns are checked by
// direct_history.cpp.
enum class Table { Items, Claims, History, Other };

// Does a write of `which` (an insert when `insert`, else a delete) in `rel`
// need SQL? `idx`: the indexes an insert writes (n of them), or none.
bool needs_sql(Relation rel, Table which, bool insert, Relation *idx, int n);
// Does row-level security of `rel` apply to the calling role?
bool rls_applies(Relation rel);

// The row in `slot` (filled by fill_item or claim_insert) inserted through
// SQL; returns the id of the inserted item (Items; what a trigger made of
// it), or the slot's own when a BEFORE trigger skipped the row.
int64 sql_insert(Table which, TupleTableSlot *slot);
// The row version `tid` deleted through SQL; false when it was not (gone,
// changed, or not visible under the role's policies).
bool sql_delete(Table which, const ItemPointerData *tid);
// Under row-level security: may the calling role see item `id`?
bool sql_item_visible(int64 id);
// One statement of the SQL path in a SPI connection of its own, under the
// caller's search_path (the statements name every object with its schema),
// with the latest snapshot; returns the rows processed.
uint64 sql_run(Stmt &s, Datum *values, const char *nulls);

}  // namespace pgclaim::pg::direct
