// Pure layer: never includes postgres.h.
//
// Parsing cron expressions (the syntax is described in cron.hpp) into a
// CronSchedule. Never throws or allocates.
#pragma once

#include "core/cron.hpp"

namespace pgclaim {

// Result of parse_cron. On failure `ok` is false and:
//   message         e.g. "field 3 (day of month): value 32 out of range 1-31 at position 7"
//   position        1-based character offset of the offending text in the expression
//                   (the end of the expression + 1 when a field is missing)
//   field           1-based number of the bad field as written (in the six-field
//                   form field 1 is the second), 0 when the error concerns the whole
//                   expression (empty, wrong number of fields, unknown macro)
//   field_position  1-based character offset where that field starts (0 with field 0)
struct CronParseResult {
    bool ok;
    CronSchedule schedule;
    int position;
    int field;
    int field_position;
    char message[192];
};

// Parses `expr` (`len` bytes, no terminator needed). Never throws.
CronParseResult parse_cron(const char *expr, int len) noexcept;
CronParseResult parse_cron(const char *expr) noexcept;  // NUL-terminated

}  // namespace pgclaim
