// Key arguments of the SQL surfaces (group_key, dedup_key).
#pragma once

#include "pg/pg.hpp"

namespace pgclaim::api {

inline constexpr int kMaxKeyBytes = 1024;  // group_key, dedup_key

// 22023 unless the key (group_key, dedup_key) is 1 to kMaxKeyBytes long.
void check_key_length(const text *key, const char *what);

}  // namespace pgclaim::api
