// Fair share between keys inside a queue (docs/fairness.md): the fair flag
// of queues, the fair keys of producers' items, and the order in which a
// claim walk of a fair queue visits ready items (the scheduler of
// shmem/fair.hpp over the index items_fair).
#pragma once

#include "pg/direct.hpp"
#include "pg/pg.hpp"

namespace pgclaim::api {

// Is the queue fair? Cached per backend until a queue is altered anywhere
// (shmem::queue_changes), at most a second. False on a catalog without
// fair queues. SPI need not be connected.
bool fair_queue(int32 queue_id);

// The fair key id of a new item of the queue: argument `argno` (a text
// fair_key, 1 to 1024 bytes) when given, else the default key when the
// queue is fair, else -1 (none). A new key is added to claim.fair_keys. The
// key becomes active in the scheduler when the transaction commits. SPI
// need not be connected.
int32 fair_key_arg(FunctionCallInfo fcinfo, int argno, int32 queue_id);
// The same for a key given as text (enqueue_trigger's fair_key column).
int32 fair_key_text(int32 queue_id, text *key);
// The same for items enqueued without a fair_key argument (triggers).
int32 fair_key_default(int32 queue_id);
// Items written by SQL (dedup, `after`) get their fair key afterwards (SPI
// connected).
void fair_mark_items(const int64 *ids, int n, int32 key_id);

// The end of a transaction and of a subtransaction, called by the module's
// transaction callbacks (src/module.cpp): a commit activates the keys the
// transaction added in the scheduler; an abort (also of a savepoint) makes
// the keys its walks took out of the active set active again and forgets the
// cached key ids. No raise.
void fair_at_xact_end(XactEvent event);
void fair_at_subxact_end(SubXactEvent event);

// create_queue and alter_queue: argument `argno` (fair boolean), when the
// catalog passes it, for the queue named by argument 0 (SPI connected).
// Turning a queue fair gives its items without a key the default key
// (under the lock that keeps producers out).
void store_fair_flag(FunctionCallInfo fcinfo, int argno);
// drop_queue: the queue's keys and scheduler state go (SPI connected).
void fair_queue_dropped(int32 queue_id);

// The candidates of one claim round of a fair queue, in the scheduler's
// order: the round's claims are picked key by key (core/fair.hpp), each
// key's ready items in delivery order. When no key yields anything, the
// queue's whole ready index is walked (items without a fair key).
//
// `seen` is fair_activations() read before `snap` was taken: a key that its
// walk finds exhausted leaves the active set only when it was not activated
// since (a commit that made its items ready after the snapshot).
struct FairSource;
uint64 fair_activations();
FairSource *fair_source_begin(pg::direct::Tables *t, int32 queue_id, int n, Snapshot snap,
                              TimestampTz now, uint64 seen);
bool fair_source_next(FairSource *s, int64 *id, int32 *ord, Datum *group_key, bool *group_null,
                      ItemPointerData *tid);
// The item last returned became a candidate of the round.
void fair_source_took(FairSource *s);
// The round still wants `n` items (candidates that failed their checks
// under the lock are looked for again).
void fair_source_wants(FairSource *s, int n);
void fair_source_end(FairSource *s);

}  // namespace pgclaim::api
