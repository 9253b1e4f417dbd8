// Key arguments of the SQL surfaces: see keys.hpp.
#include "api/keys.hpp"

namespace pgclaim::api {

void check_key_length(const text *key, const char *what) {
    size_t len = VARSIZE_ANY_EXHDR(key);
    if (len == 0 || len > (size_t)kMaxKeyBytes)
        pg::error({ERRCODE_INVALID_PARAMETER_VALUE}, "%s must be 1 to %d bytes long", what,
                  kMaxKeyBytes);
}

}  // namespace pgclaim::api
