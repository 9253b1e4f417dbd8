// Tokens that know their partition: see token.hpp.
#include "core/token.hpp"

#include <string>

#include "core/error.hpp"

namespace pgclaim::token {

static_assert(kPartitionBits + kSeqBits == 63, "a token is a positive bigint");

int64_t make(int partition, int64_t seq) {
    if (partition < 0 || partition > kMaxPartition)
        throw Error(sqlstate::kInvalidValue,
                    "pg_claim.partition " + std::to_string(partition) + " is out of range",
                    "Partitions are numbered 0 to " + std::to_string(kMaxPartition) + ".");
    if (seq < 1 || seq > kMaxSeq)
        throw Error("2200H",
                    "token sequence value " + std::to_string(seq) +
                        " does not fit the " + std::to_string(kSeqBits) + " bits of a token",
                    "claim.token_seq has run out; see docs/partitions.md, \"How long the 53 bits last\".");
    return int64_t(partition) * kPartitionUnit + seq;
}

int partition_of(int64_t token) {
    if (token < 0) return -1;
    return int(token >> kSeqBits);
}

}  // namespace pgclaim::token
