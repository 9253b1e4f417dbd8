// Fencing tokens (docs/queues.md; docs/partitions.md): what every
// function that hands out or takes tokens calls.
#pragma once

#include "pg/pg.hpp"

namespace pgclaim::api {

// Fencing tokens survive a crash. Every function that hands out tokens
// calls before_tokens() before its first nextval and after_tokens() once
// they are granted (SPI connected). With the preload, the first grant in a
// database after shared memory was set up moves the sequence 2^32 ahead and
// flushes that; later grants need no flush. Without it, every grant flushes
// the WAL covering its tokens.
void before_tokens();
void after_tokens();
// The same, for a caller that knows the highest sequence value (before
// make_token) it drew: no read of the sequence.
void after_tokens(int64 highest);

// The checks a call taking a token (argument `argno`) starts with: the
// token is not NULL (22004) and the server is a primary (25006, naming
// `fn`). Returns the token.
int64 token_arg(FunctionCallInfo fcinfo, int argno, const char *fn);

// A lease argument (argument `argno`): -1 when NULL, else its microseconds,
// checked to be positive and at most the longest lease (22023).
int64 lease_arg(FunctionCallInfo fcinfo, int argno);

// The claims this backend granted, by token: the item and where its claim
// row was written. A hint only (a bounded table, entries overwritten): the
// completion checks the pair under the item's lock and looks the token up
// the ordinary way when it does not hold.
void remember_grant(int64 token, int64 item, const ItemPointerData *claim_tid);
bool granted_here(int64 token, int64 *item, ItemPointerData *claim_tid);
void forget_grants();

// PC001 for a token that is not a live claim.
[[noreturn]] void stale_token(int64 token, const char *why);

}  // namespace pgclaim::api
