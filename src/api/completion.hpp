// Completing claims: claim.complete (both forms) and claim_next's `done`.
#pragma once

#include "pg/pg.hpp"

namespace pgclaim::pg::direct {
struct Tables;
}

namespace pgclaim::api {

// Complete the items held under `tokens` (ascending, no duplicates). The
// item of token i gets results[i] as its result (NULL when results is
// NULL or result_nulls[i]); queues that retain keep it in their history.
// done[i] tells whether token i completed anything; returns the number of
// items completed. Children waiting for the items are released, and
// item_state waiters are woken at commit. `loop`: the relations opened by
// claim_next in direct::Mode::Loop (left open), or nullptr.
int complete_tokens(const int64 *tokens, int ntok, const Datum *results,
                    const bool *result_nulls, bool *done,
                    pg::direct::Tables *loop = nullptr);

// PC001 for complete(tokens[]) and claim_next(done): lists the first
// stale tokens (those with !done[i]).
[[noreturn]] void stale_tokens(const int64 *tokens, const bool *done, int ntok, const char *hint);

// PC001 for one token, saying why it is refused. SPI must be connected.
[[noreturn]] void refuse_token(int64 token);

}  // namespace pgclaim::api
