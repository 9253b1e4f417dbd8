// Where fencing tokens come from (docs/queues.md; docs/partitions.md): the
// sequences claim.token_seq (the tokens themselves, its range the block of
// the database's partition), claim.token_ceiling (the durable ceiling no
// token handed out exceeds) and claim.token_timeline (the timeline on which
// that ceiling was last written). Read through their buffers, written with
// setval as their owner (the callers of claim_next and lease_acquire need no
// privilege on them), flushed explicitly.
#pragma once

#include "pg/pg.hpp"

namespace pgclaim::pg::token_store {

struct Seqs {
    Oid token_seq = InvalidOid;
    Oid ceiling = InvalidOid;   // InvalidOid: the schema predates 0.3.0
    Oid timeline = InvalidOid;
};

// The sequences of schema claim; raises 42P01 when claim.token_seq is
// missing. ceiling and timeline stay InvalidOid before the 0.3.0 update.
Seqs lookup();

// The value last handed out by (or set on) a sequence, read from its buffer.
int64 last_value(Oid seq);

// The partition whose block claim.token_seq's range is (its MAXVALUE >> 47).
int partition_of_seq(Oid seq);

// setval(seq, v) as the owner of the sequence: the next nextval gives v + 1.
void set_value(Oid seq, int64 v);

// The WAL record of the last change to the sequence is on disk on return.
void flush(Oid seq);

// The lock that makes moving the sequence and raising the ceiling one step
// at a time in this database (a transaction lock released explicitly).
void lock();
void unlock();

// The timeline WAL is written on.
uint32 timeline();

}  // namespace pgclaim::pg::token_store

namespace pgclaim::pg {

// Make sure the WAL record that covers every token handed out so far is on
// disk before the tokens leave the server, so a crash can never hand one out
// again. Cheap when it already is (the usual case).
void flush_token_wal();

}  // namespace pgclaim::pg
