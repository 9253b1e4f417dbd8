// Tokens that know their partition: pg_claim.partition and
// claim.token_partition(token).
#include "api/partition.hpp"

namespace pgclaim::api {

int guc_partition = 0;

}  // namespace pgclaim::api

// claim.token_partition(token bigint) -> int: the partition of a token (-1
// for a negative value). Pure: the front routes token calls with it.
PGCLAIM_FUNCTION(pgclaim_token_partition) {
    return Int32GetDatum(pgclaim::token::partition_of(PG_GETARG_INT64(0)));
}
