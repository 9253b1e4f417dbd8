// Server layer: a row as a JSON object, the way to_jsonb(row) writes it,
// without its per-row costs. to_jsonb looks up every column's type category
// and output function on every call and turns integers into numerics by
// printing and parsing them; a RowJson does the lookups once per row type
// and builds the common types directly:
//   bool -> true/false; int2/4/8 -> number; numeric -> number (NaN and
//   infinities as strings, like to_jsonb); float4/8 -> number or string as
//   to_jsonb; text, varchar, bpchar -> string without a copy through the
//   output function; date, timestamp, timestamptz -> ISO 8601 strings;
//   jsonb -> itself; other built-in scalar types -> their text output.
// Everything else (json, arrays, composites, domains over them, types from
// extensions, which may carry a cast to json) goes through to_jsonb itself,
// one column at a time, so the result is always what to_jsonb(row) returns.
#pragma once

#include "pg/pg.hpp"

extern "C" {
#include "executor/tuptable.h"
}

namespace pgclaim::pg {

struct RowJson;

// Prepared for rows of `desc`; allocated (with everything it caches) in
// `mcxt`, which must live as long as it is used.
RowJson *rowjson_prepare(TupleDesc desc, MemoryContext mcxt);

// Is it prepared for this row type?
bool rowjson_matches(const RowJson *rj, TupleDesc desc);

// Push the slot's row as one JSON object (WJB_BEGIN_OBJECT ... END) onto
// *st; used as the value of a key, or on its own (then the result is the
// complete value, as pushJsonbValue returns it).
JsonbValue *rowjson_push(RowJson *rj, JsonbParseState **st, TupleTableSlot *slot);

// Column `attnum` of the slot as text (its output function, cached), or
// (Datum)0 when NULL; always a copy in the current memory context. For the
// group key of trigger items.
Datum rowjson_text(RowJson *rj, TupleTableSlot *slot, AttrNumber attnum);

// The payload of a 'batch' trigger item,
//   {"op": op, "schema": schema, "table": table, "rows": [row, ...]},
// where each row is a jsonb object ({"new", "old"}). Written directly in
// jsonb's binary form: the rows are copied as they are instead of being
// taken apart and built again by pushJsonbValue.
Datum rowjson_batch_payload(const char *op, const char *schema, const char *table,
                            const Datum *rows, int n);

}  // namespace pgclaim::pg
