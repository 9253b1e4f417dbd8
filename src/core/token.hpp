// Pure layer: never includes postgres.h.
//
// Fencing tokens that know their partition (docs/partitions.md). A token is
// a positive bigint of at most 53 bits, so every driver and every JSON
// reader holds it exactly (2^53 - 1 is JavaScript's largest safe integer):
// bits 52..47 hold the partition of the database that handed it out
// (0..63), bits 46..0 the count within that partition. claim.token_seq
// hands out the whole token: its range is the block of its partition.
//
// A value above 2^53 - 1 is a token of the older layout (partition in bits
// 62..53), still recognised so that such tokens keep routing to their
// partition.
//
// Crash safety (docs/queues.md): a token leaves the server only below a
// durable ceiling, raised kCeilingBlock at a time and flushed once per
// raise; the first grant after a server start moves the sequence up to that
// ceiling, and kTimelineJump further when the timeline changed since the
// ceiling was written (promotion, point-in-time recovery).
#pragma once

#include <cstdint>

namespace pgclaim::token {

inline constexpr int kTokenBits = 53;
inline constexpr int kPartitionBits = 6;
inline constexpr int kSeqBits = kTokenBits - kPartitionBits;  // 47
inline constexpr int kMaxPartition = (1 << kPartitionBits) - 1;  // 63
// The largest token of any partition: 2^53 - 1.
inline constexpr int64_t kMaxToken = (int64_t(1) << kTokenBits) - 1;
// The largest count within a partition: 2^47 - 1.
inline constexpr int64_t kMaxSeq = (int64_t(1) << kSeqBits) - 1;
// What one partition adds to a count: partition * kPartitionUnit.
inline constexpr int64_t kPartitionUnit = int64_t(1) << kSeqBits;
// Tokens reserved by one raise of the durable ceiling (one WAL flush).
inline constexpr int64_t kCeilingBlock = int64_t(1) << 16;
// How far past the ceiling the first grant on a new timeline moves.
inline constexpr int64_t kTimelineJump = int64_t(1) << 32;

// The older layout: partition in bits 62..53 above the count.
inline constexpr int kOldSeqBits = 53;

// The token for count `seq` (1..kMaxSeq) in `partition` (0..kMaxPartition).
// Throws Error 2200H (sequence generator limit exceeded) when seq is out of
// range and 22023 when the partition is.
int64_t make(int partition, int64_t seq);

// The partition of a token: bits 52..47, or bits 62..53 for a token of the
// older layout (above kMaxToken); -1 for a negative value (never a token).
int partition_of(int64_t token);

// The bounds of claim.token_seq in `partition`: first() .. last().
int64_t first(int partition);
int64_t last(int partition);

// Where the first grant after a server start moves the sequence: past the
// sequence's value `seq` and the durable ceiling `ceiling`, plus
// kTimelineJump when the timeline changed. Never beyond last(partition of
// seq): throws Error 2200H when the partition's tokens have run out.
int64_t fence_start(int64_t seq, int64_t ceiling, bool new_timeline);

// The durable ceiling that covers every token up to `seq`: seq plus one
// block, capped at last(partition of seq).
int64_t ceiling_for(int64_t seq);

}  // namespace pgclaim::token
