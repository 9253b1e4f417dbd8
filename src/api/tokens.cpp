// Fencing tokens (README, "Tokens"): the jump of the token sequence after
// a restart, the WAL flush without the preload, the checks of a token
// argument, and PC001 for a token that is not a live claim.
#include "api/shared.hpp"

#include "shmem/wakeup.hpp"

namespace pgclaim::api {

namespace {
// 2^32: more tokens than a server could hand out between two WAL flushes.
pg::Stmt s_token_jump = {
    "SELECT pg_catalog.setval('claim.token_seq',"
    "                         pg_catalog.nextval('claim.token_seq') + 4294967296)",
    0, {}, nullptr};
}  // namespace

void before_tokens() {
    if (!shmem::preloaded() || shmem::tokens_fenced()) return;
    pg::run(s_token_jump, nullptr, nullptr);
    pg::flush_token_wal();
    shmem::mark_tokens_fenced();
}

void after_tokens() {
    if (!shmem::preloaded()) pg::flush_token_wal();
}

int64 token_arg(FunctionCallInfo fcinfo, int argno, const char *fn) {
    pg::require_arg(fcinfo, argno, "token");
    pg::require_primary(fn);
    return PG_GETARG_INT64(argno);
}

void stale_token(int64 token, const char *why) {
    pg::error({pg::kStaleToken,
               "The lease expired, or the item was re-claimed, completed, failed or released. "
               "Discard this worker's result; the item is (or will be) delivered again under a "
               "new token.",
               why},
              "token %lld is not a live claim", (long long)token);
}

}  // namespace pgclaim::api
