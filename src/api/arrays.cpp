// Array arguments of the SQL surfaces; see arrays.hpp.
#include "api/arrays.hpp"

#include <algorithm>

namespace pgclaim::api {

int64 *int8_arg(FunctionCallInfo fcinfo, int argno, const char *what, bool sorted, int *n) {
    ArrayType *arr = PG_GETARG_ARRAYTYPE_P(argno);
    if (ARR_NDIM(arr) > 1)
        pg::error({ERRCODE_INVALID_PARAMETER_VALUE}, "%s must be a one-dimensional array", what);
    if (array_contains_nulls(arr))
        pg::error({ERRCODE_NULL_VALUE_NOT_ALLOWED}, "%s must not contain NULL elements", what);
    // Checked before anything is locked: each id or token can cost an entry
    // of the lock table, which all databases share.
    int count = ArrayGetNItems(ARR_NDIM(arr), ARR_DIMS(arr));
    if (count > kMaxArrayIds)
        pg::error({ERRCODE_INVALID_PARAMETER_VALUE,
                   psprintf("Pass at most %d per call; split larger sets into several calls.",
                            kMaxArrayIds)},
                  "%s has %d elements, more than %d", what, count, kMaxArrayIds);
    Datum *elems;
    int nelems;
    deconstruct_array(arr, INT8OID, 8, true, TYPALIGN_DOUBLE, &elems, nullptr, &nelems);
    int64 *v = (int64 *)palloc(sizeof(int64) * (nelems > 0 ? nelems : 1));
    for (int i = 0; i < nelems; ++i) v[i] = DatumGetInt64(elems[i]);
    if (sorted) {
        std::sort(v, v + nelems);
        nelems = (int)(std::unique(v, v + nelems) - v);
    }
    *n = nelems;
    return v;
}

}  // namespace pgclaim::api
