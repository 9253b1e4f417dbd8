// Tokens that know their partition (core/token.hpp, docs/partitions.md).
#pragma once

#include "core/token.hpp"
#include "pg/pg.hpp"

namespace pgclaim::api {

// pg_claim.partition (registered by src/module.cpp): what the sessions of this
// database expect its partition to be, 0..token::kMaxPartition. The
// partition itself is the range of claim.token_seq (claim.set_partition
// changes both); before_tokens refuses a grant where they differ.
extern int guc_partition;

// The token for a value of claim.token_seq: the sequence hands out whole
// tokens, partition bits included.
inline int64 make_token(int64 seq) { return seq; }

}  // namespace pgclaim::api

// The same as SQL, for statements that take their token inside the
// statement.
#define PGCLAIM_NEXT_TOKEN_SQL "pg_catalog.nextval('claim.token_seq')"
