// Tokens after a crash (src/api/tokens.cpp, before_tokens): the first grant
// in a database after shared memory was set up (server start, crash
// restart) moves the token sequence far ahead, durably; later grants need
// no flush. These flags say, per database, whether that happened.
#pragma once

#include "pg/pg.hpp"

namespace pgclaim::shmem {

// Whether the sequence of MyDatabaseId was moved ahead since shared memory
// was set up; always false without the preload. Neither raises.
bool tokens_fenced();
void mark_tokens_fenced();

}  // namespace pgclaim::shmem
