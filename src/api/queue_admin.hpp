// Changing a queue's settings (claim.alter_queue, pause, resume), and the
// flow-control settings that create_queue shares with alter_queue.
#pragma once

#include "pg/pg.hpp"

namespace pgclaim::api {

// Checks and stores the flow-control arguments of create_queue and
// alter_queue (max_active, group_limit, rate, rate_per, rate_per_group,
// from argument `first` on) for the queue named by argument 0. SPI must be
// connected.
void store_flow_settings(FunctionCallInfo fcinfo, int first, bool altering);

}  // namespace pgclaim::api
