// enqueue and enqueue_batch with `after`: items that wait for others.
#pragma once

#include "pg/pg.hpp"

namespace pgclaim::api {

// What enqueue_after inserts: one item per payload (group_keys may be
// NULL: no groups), all into the queue named by `qname`.
struct NewItems {
    Datum qname;
    const char *name;
    Datum priority;
    Datum run_at;  // NULL: ready now
    bool run_at_null;
    Datum payloads;        // jsonb[]
    Datum group_keys;      // text[] or NULL
    bool group_keys_null;
};

// Inserts the items under the `after` list `parents` (non-empty): each waits
// until every listed item has completed; a parent that is dead or cancelled
// ends them the same way at once; an id that is not an unfinished item
// counts as completed. Checked under the parents' item locks, so a parent
// cannot finish unseen meanwhile. The caller locked claim.items for
// producers and connected SPI. Returns the new ids in payload order
// (palloc'd) and their count in *n.
int64 *enqueue_after(const NewItems &items, const int64 *parents, int nparents, int *n);

}  // namespace pgclaim::api
