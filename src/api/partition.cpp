// Tokens that know their partition: pg_claim.partition and
// claim.token_partition(token).
#include "api/partition.hpp"

namespace pgclaim::api {

static_assert(token::kPartitionUnit == 9007199254740992LL,
              "PGCLAIM_NEXT_TOKEN_SQL multiplies by token::kPartitionUnit");

int guc_partition = 0;

int64 make_token(int64 seq) {
    int64 t = 0;
    pg::call_core([&] { t = token::make(guc_partition, seq); });
    return t;
}

}  // namespace pgclaim::api

// claim.token_partition(token bigint) -> int: the partition bits of a token
// (-1 for a negative value). Pure: the front routes token calls with it.
PGCLAIM_FUNCTION(pgclaim_token_partition) {
    return Int32GetDatum(pgclaim::token::partition_of(PG_GETARG_INT64(0)));
}
