// Tokens after a crash (src/api/tokens.cpp, before_tokens): the first grant
// in a database after shared memory was set up (server start, crash
// restart) moves the token sequence far ahead, durably; later grants need
// no flush. These flags say, per database, whether that happened, and which
// durable ceiling of the tokens a backend of this server has flushed.
#pragma once

#include "pg/pg.hpp"

namespace pgclaim::shmem {

// Whether the sequence of MyDatabaseId was moved ahead since shared memory
// was set up; always false without the preload. Neither raises.
bool tokens_fenced();
void mark_tokens_fenced();

// The durable ceiling of MyDatabaseId's ceiling sequence `seq` that a backend
// of this server flushed and published (0: none known), so that a backend
// whose own knowledge of it is behind (its first grant, or one past the
// ceiling it saw) takes the token lock only when the ceiling must really be
// raised. publish_tokens_ceiling() is called after the flush. Neither raises.
int64 tokens_ceiling(Oid seq);
void publish_tokens_ceiling(Oid seq, int64 ceiling);

}  // namespace pgclaim::shmem
