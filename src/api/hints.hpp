// The backend's scan hints (one instance per backend process).
#pragma once

#include "core/scan_hint.hpp"

namespace pgclaim::api {
// Only touch it inside pg::call_core(): its methods may allocate.
ScanHints &hints();
PromoteSchedule &promote_schedule();
}  // namespace pgclaim::api
