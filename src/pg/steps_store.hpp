// Durable steps (docs/steps.md): what the worker keeps tidy. Checkpoints
// (claim.steps) have no foreign key to claim.items (a foreign key there
// would take completions off their direct path): the checkpoints of items
// that are gone, and not kept in the history of a queue that retains them,
// are deleted here, as are events past their retention and the waits of
// items that are gone. SPI must be connected.
#pragma once

#include "pg/pg.hpp"

namespace pgclaim::pg {

// How long an emitted event is remembered for waiters that come later.
inline constexpr int64 kEventRetentionUs = 7 * USECS_PER_DAY;

// Whether the catalog has claim.steps (false before the update to 0.4.0).
bool steps_catalog();

// Deletes up to kStepsPurgeBatch orphaned checkpoints, expired events and
// waits of vanished items; returns how many rows went.
inline constexpr int64 kStepsPurgeBatch = 10000;
int64 purge_steps(TimestampTz now);

}  // namespace pgclaim::pg
