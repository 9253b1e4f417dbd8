// NOTIFY bookkeeping. A producer's commit records the queues it made ready
// in its database's registry slot and sets the slot's notify_pending; the
// database's worker takes them and sends one coalesced NOTIFY per queue
// (worker/round.cpp). None of these functions raises.
#pragma once

#include "shmem/shared.hpp"

namespace pgclaim::shmem {

// The slot a committing producer records its queues in: NULL when the
// database has no worker slot, when pg_claim.notify is off, or in the worker
// itself (it sends its own).
DbSlot *notify_slot();
// Record a queue (once; past kNotifyQueues: every queue of the database).
void add_notify_queue(DbSlot *slot, int32 queue_id);
// After the queues were added: the worker is woken unless it already was.
void request_notify(DbSlot *slot);

// The worker: whether producers asked for a NOTIFY, and the queues they
// recorded (at most kNotifyQueues into `out`; *all: every queue). Taking
// them clears the request.
bool notify_requested(DbSlot *slot);
int take_notify_queues(DbSlot *slot, int32 *out, bool *all);

}  // namespace pgclaim::shmem
