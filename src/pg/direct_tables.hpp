// The insides of direct access (direct.hpp) shared by direct.cpp,
// direct_read.cpp and direct_batch.cpp: the resolved catalog of the
// extension's tables (loaded by direct.cpp), the relations of one call, and
// the row helpers (direct_tables.cpp).
#pragma once

#include "pg/direct.hpp"

extern "C" {
#include "access/genam.h"
#include "executor/tuptable.h"
#include "nodes/execnodes.h"
#include "utils/inval.h"
#include "utils/rel.h"
}

namespace pgclaim::pg::direct {

// Relation OIDs and attribute numbers, resolved once per installation.
struct Catalog {
    bool valid;
    uint64 generation;  // counts the loads: caches of other files compare it
    Oid items, items_pkey, items_ready, items_group, items_scheduled, claims, claims_pkey, claims_token,
        token_seq, queues, queues_name, item_id_seq;
    Oid item_parents;  // InvalidOid in a catalog without dependencies (0.1.0)
    AttrNumber i_id, i_queue, i_ord, i_state, i_run_at, i_failures, i_group, i_payload, i_enq,
        i_priority, i_dedup;
    AttrNumber q_id, q_name;
    AttrNumber c_item, c_queue, c_token, c_attempt, c_lease, c_claimed, c_worker;
    // claims.item_tid (0.4.0): InvalidAttrNumber while the catalog lacks it.
    AttrNumber c_item_tid;
};

extern Catalog cat;  // valid after open()

struct Tables {
    Mode mode;    // what the relations serve now (Claim or Complete for Loop)
    Mode opened;  // what open() was called with
    // items_pkey and items_group are opened when first used: read them
    // through pkey_index() and group_index().
    Relation items, items_pkey, items_ready, items_group, claims, claims_pkey, claims_token;
    Relation queues, queues_name;
    TupleTableSlot *queue_slot;
    TupleTableSlot *item_slot, *claim_slot, *scan_slot, *group_slot, *ins_slot;
    EState *estate;
    ResultRelInfo *rri;
    // The writes of this call to claim.items / claim.claims go through SQL
    // (direct_rules.hpp); rls_items: reads of claim.items are checked
    // against the role's row-level security policies.
    bool sql_items, sql_claims, rls_items;
    // claim.items' length in blocks when first asked (item_of_claim); the
    // locks held keep it from shrinking while the relations are open.
    BlockNumber items_blocks;
    bool items_blocks_known;
};

// Inserts into one relation without the executor: every index of it opened
// (as ExecOpenIndices opens them, with their IndexInfo from the backend's
// cache), the row stored from `slot`'s values with its index entries
// (partial-index predicates and indisready as ExecInsertIndexTuples keeps
// them). The callers fill every column; the rules this does not keep are in
// direct_rules.hpp.
struct InsertTarget {
    TupleTableSlot *slot;
    EState *estate;
    ResultRelInfo *rri;
};
// claim.items' primary key and items_group of t, opened at the first call.
Relation pkey_index(Tables *t);
Relation group_index(Tables *t);

void target_open(InsertTarget *it, Relation rel);
void target_insert(InsertTarget *it);
void target_close(InsertTarget *it);

// A relation of schema `nsp` and a column of a relation, by name (a clear
// error when missing); the caller's privilege `mode` on a relation (42501).
Oid rel_oid(Oid nsp, const char *name);
AttrNumber att(Oid rel, const char *name);
void require(Oid rel, AclMode mode);

// A relcache callback, registered the first time it is asked for (once per
// backend): the catalogs of direct.cpp and direct_leases.cpp forget their
// OIDs when the extension's relations change.
void register_relcache_callback(RelcacheCallbackFunction fn);

// `dst` emptied and given every value of `src`'s row (by reference into it),
// to be changed and stored as the row's new version.
void copy_values(TupleTableSlot *dst, TupleTableSlot *src);

// An attribute of the row in `slot`.
inline Datum get(TupleTableSlot *slot, AttrNumber a, bool *isnull) {
    return slot_getattr(slot, a, isnull);
}

// An empty row in `slot` (every attribute NULL), and one attribute of it.
void clear_slot(TupleTableSlot *slot);
void set_att(TupleTableSlot *slot, AttrNumber a, Datum v, bool isnull);

// One equality probe of an int8 key (first index column) returning the
// first visible row into `slot`.
bool probe_int8(Relation heap, Relation idx, int64 key, Snapshot snap, TupleTableSlot *slot);

// The new item's priority is one whose ord (-priority) exists; 22003 if not.
void check_priority(int32 priority);
// A new item's row in `slot`'s values (defaults filled in, ord computed, the
// id drawn); returns the id. The caller checked the priority.
int64 fill_item(TupleTableSlot *slot, int32 queue_id, int32 priority, Datum run_at,
                bool run_at_null, Datum group_key, bool group_null, Datum payload);
}  // namespace pgclaim::pg::direct
