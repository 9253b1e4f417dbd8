// Tokens that know their partition (core/token.hpp, docs/partitions.md).
#pragma once

#include "core/token.hpp"
#include "pg/pg.hpp"

namespace pgclaim::api {

// pg_claim.partition (defined in module.cpp): the partition number of this
// database, 0..token::kMaxPartition, set with ALTER DATABASE ... SET.
extern int guc_partition;

// The token for a value of claim.token_seq in this database's partition.
int64 make_token(int64 seq);

}  // namespace pgclaim::api

// The same as SQL, for statements that take their token inside the
// statement: nextval('claim.token_seq') placed in the partition of
// pg_claim.partition (the factor is token::kPartitionUnit; partition.cpp
// checks that they agree). claim.token_seq stops at token::kMaxSeq.
#define PGCLAIM_NEXT_TOKEN_SQL                                                  \
    "(pg_catalog.nextval('claim.token_seq') + "                                 \
    "pg_catalog.current_setting('pg_claim.partition')::pg_catalog.int8 * 9007199254740992)"
