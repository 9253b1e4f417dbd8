// Tokens that know their partition: see token.hpp.
#include "core/token.hpp"

#include <algorithm>
#include <string>

#include "core/error.hpp"

namespace pgclaim::token {

static_assert(kPartitionBits + kSeqBits == kTokenBits, "a token has 53 bits");
static_assert(int64_t(kMaxPartition) * kPartitionUnit + kMaxSeq == kMaxToken,
              "the last token of the last partition is 2^53 - 1");

namespace {
[[noreturn]] void run_out(int partition) {
    throw Error("2200H",
                "the tokens of partition " + std::to_string(partition) + " have run out",
                "A partition has 2^47 - 1 tokens; see docs/partitions.md, \"How long the "
                "tokens last\". claim.set_partition moves the database to a higher partition.");
}
}  // namespace

int64_t make(int partition, int64_t seq) {
    if (partition < 0 || partition > kMaxPartition)
        throw Error(sqlstate::kInvalidValue,
                    "partition " + std::to_string(partition) + " is out of range",
                    "Partitions are numbered 0 to " + std::to_string(kMaxPartition) + ".");
    if (seq < 1 || seq > kMaxSeq) run_out(partition);
    return int64_t(partition) * kPartitionUnit + seq;
}

int partition_of(int64_t token) {
    if (token < 0) return -1;
    if (token > kMaxToken) return int(token >> kOldSeqBits);
    return int(token >> kSeqBits);
}

int64_t first(int partition) { return make(partition, 1); }
int64_t last(int partition) { return make(partition, kMaxSeq); }

int64_t fence_start(int64_t seq, int64_t ceiling, bool new_timeline) {
    int p = partition_of(seq);
    if (p < 0 || p > kMaxPartition) p = 0;
    int64_t top = last(p);
    int64_t at = std::max(seq, ceiling);
    if (new_timeline) at = (at > top - kTimelineJump) ? top + 1 : at + kTimelineJump;
    // The sequence must still have a token to hand out after `at`.
    if (at >= top) run_out(p);
    return at;
}

int64_t ceiling_for(int64_t seq) {
    int p = partition_of(seq);
    if (p < 0 || p > kMaxPartition) p = 0;
    int64_t top = last(p);
    return seq > top - kCeilingBlock ? top : seq + kCeilingBlock;
}

}  // namespace pgclaim::token
