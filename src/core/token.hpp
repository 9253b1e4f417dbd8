// Pure layer: never includes postgres.h.
//
// Fencing tokens that know their partition (docs/partitions.md). A token is
// a positive bigint: bits 62..53 hold the partition of the database that
// handed it out (pg_claim.partition, 0..1023), bits 52..0 the value of that
// database's claim.token_seq. Partition 0 gives the sequence value itself.
#pragma once

#include <cstdint>

namespace pgclaim::token {

inline constexpr int kSeqBits = 53;
inline constexpr int kPartitionBits = 10;
inline constexpr int kMaxPartition = (1 << kPartitionBits) - 1;  // 1023
// The largest sequence value a token can carry (claim.token_seq's MAXVALUE).
inline constexpr int64_t kMaxSeq = (int64_t(1) << kSeqBits) - 1;
// What one partition adds to a sequence value: partition * kPartitionUnit.
inline constexpr int64_t kPartitionUnit = int64_t(1) << kSeqBits;

// The token for sequence value `seq` (1..kMaxSeq) in `partition`
// (0..kMaxPartition). Throws Error 2200H (sequence generator limit exceeded)
// when seq is out of range and 22023 when the partition is.
int64_t make(int partition, int64_t seq);

// The partition bits of a token; -1 for a negative value (never a token).
int partition_of(int64_t token);

}  // namespace pgclaim::token
