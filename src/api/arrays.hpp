// Array arguments of the SQL surfaces.
#pragma once

#include "pg/pg.hpp"

namespace pgclaim::api {

// The most ids or tokens one array argument may hold (docs/limits.md).
constexpr int kMaxArrayIds = 10000;

// A bigint[] argument as a palloc'd C array: 22023 unless it has at most
// one dimension and at most kMaxArrayIds elements, 22004 if it holds a NULL. `sorted`: ascending without
// duplicates. *n is the number of values (0 for an empty array).
int64 *int8_arg(FunctionCallInfo fcinfo, int argno, const char *what, bool sorted, int *n);

// The same sorted, without duplicates.
inline int64 *int8_arg_sorted(FunctionCallInfo fcinfo, int argno, const char *what, int *n) {
    return int8_arg(fcinfo, argno, what, true, n);
}

}  // namespace pgclaim::api
