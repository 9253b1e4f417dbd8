// The change a call of claim.enqueue_trigger describes (see triggers.cpp
// for what it does), shared by its parts: the payload (trigger_payload.hpp),
// the statement-level paths over transition tables (trigger_statement.hpp)
// and coalescing (trigger_coalesce.hpp). Header-only (plain structs).
#pragma once

#include "pg/pg.hpp"

extern "C" {
#include "commands/trigger.h"
}

namespace pgclaim::api::trigger {

struct Change {
    const char *queue;  // name
    int32 priority;
    bool coalesce;
    int32 batch;        // rows per item ('batch'), 0 for one item per row
    int fair_att;       // column of the fair key ('fair_key=col'), 0 for none
    const char *op;
    const char *schema;
    const char *table;
};

// One side of the change: the row from its slot, or an already built
// jsonb row; nothing when neither is given.
struct Side {
    TupleTableSlot *slot;
    Datum jsonb;
};

}  // namespace pgclaim::api::trigger
