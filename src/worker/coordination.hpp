// The coordination service's part of a worker round (docs/coordination.md).
#pragma once

#include "pg/pg.hpp"

namespace pgclaim::worker {

// End expired sessions and leaders, trim the watch log (claim._coord_maintain,
// in the round's transaction); lowers *next to when it is due again. Does
// nothing where the extension predates the coordination service.
void coordination_duties(TimestampTz *next);

}  // namespace pgclaim::worker
