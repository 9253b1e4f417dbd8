// The entry of the module: the magic block, _PG_init, the definitions of
// the GUCs and the one pair of transaction callbacks that ends every
// module's part of a transaction in a written order. The only file that
// knows every layer (see docs/development.md, "Layout").
#include "api/caches.hpp"
#include "api/fair.hpp"
#include "api/lease_watch.hpp"
#include "api/partition.hpp"
#include "pg/pg.hpp"
#include "pg/xact_locks.hpp"
#include "shmem/claim_slots.hpp"
#include "shmem/drops.hpp"
#include "shmem/epochs.hpp"
#include "shmem/lease_grants.hpp"
#include "shmem/metrics.hpp"
#include "shmem/rates.hpp"
#include "shmem/registry.hpp"
#include "shmem/services.hpp"
#include "shmem/shared.hpp"
#include "shmem/wakeup.hpp"
#include "worker/database_hook.hpp"
#include "worker/launcher.hpp"

extern "C" {
#include "miscadmin.h"
#include "utils/guc.h"

PG_MODULE_MAGIC;
void _PG_init(void);
}

namespace {

using namespace pgclaim::shmem;

// Read by SQL (claim._coord_maintain, docs/coordination.md): the setting's
// value is all that matters.
int guc_watch_retention_s = 3600;

void define_gucs() {
    DefineCustomBoolVariable(
        "pg_claim.worker_enabled", "Runs the pg_claim background workers.",
        "Without them waits are still woken at commit, but expiry and scheduled items are "
        "applied lazily by claimers.",
        &guc_worker_enabled, true, PGC_SIGHUP, 0, nullptr, nullptr, nullptr);
    DefineCustomIntVariable(
        "pg_claim.worker_naptime", "Longest sleep of a pg_claim worker between its rounds.",
        "The worker also wakes at the earliest lease end or run_at it knows of.",
        &guc_worker_naptime_ms, 1000, 10, 3600 * 1000, PGC_SIGHUP, GUC_UNIT_MS, nullptr, nullptr,
        nullptr);
    DefineCustomIntVariable(
        "pg_claim.max_databases", "How many databases pg_claim workers serve at once.",
        "Each served database uses one background worker slot (max_worker_processes).",
        &guc_max_databases, 16, 0, kMaxDbSlots, PGC_SIGHUP, 0, nullptr, nullptr, nullptr);
    DefineCustomIntVariable(
        "pg_claim.lease_purge_after",
        "Rows of lease holdings that ended longer ago than this are deleted by the worker.",
        "Checked once a minute, 10000 rows at a time; -1 keeps them (claim.lease_purge() "
        "deletes them on demand).",
        &guc_lease_purge_after_s, 3600, -1, 366 * 24 * 3600, PGC_SIGHUP, GUC_UNIT_S, nullptr,
        nullptr, nullptr);
    DefineCustomIntVariable(
        "pg_claim.watch_retention",
        "Changes of the coordination service older than this leave the watch log.",
        "The worker deletes them; claim.watch() from a revision that was deleted raises PC004 "
        "(docs/coordination.md).",
        &guc_watch_retention_s, 3600, 1, 366 * 24 * 3600, PGC_SUSET, GUC_UNIT_S, nullptr,
        nullptr, nullptr);
    DefineCustomBoolVariable(
        "pg_claim.watch_leases",
        "Records every grant, release and expiry of a named lease in the watch log.",
        "claim.watch() then shows leases taken with claim.lease_acquire and "
        "claim.lease_acquire_shared, not only those of sessions. Each grant and release then "
        "writes the log, whose writers take turns until they commit (docs/coordination.md).",
        &pgclaim::api::guc_watch_leases, false, PGC_SUSET, 0, nullptr, nullptr, nullptr);
    DefineCustomBoolVariable(
        "pg_claim.notify", "The worker sends NOTIFY pg_claim, '<queue>' when items become ready.",
        "One coalesced notification per queue, from the worker's own transaction.", &guc_notify,
        true, PGC_SIGHUP, 0, nullptr, nullptr, nullptr);
    DefineCustomIntVariable(
        "pg_claim.partition", "The partition number of this database in a pg_claim cluster.",
        "Every token handed out carries it in its high bits, so a front (pg_claim_proxy) routes "
        "token calls by the token alone. CREATE EXTENSION takes it as the database's partition; "
        "claim.set_partition() changes it; a session whose value differs from the database's "
        "partition is refused tokens (docs/partitions.md).",
        &pgclaim::api::guc_partition, 0, 0, pgclaim::token::kMaxPartition, PGC_SUSET, 0, nullptr,
        nullptr, nullptr);
}

// The sizes of the tables in shared memory: set at server start, so they
// exist only where the library is preloaded (PostgreSQL refuses to create a
// PGC_POSTMASTER setting later).
void define_shmem_gucs() {
    DefineCustomIntVariable(
        "pg_claim.max_xact_locks",
        "How many items and lease slots open transactions may hold locked at once, in all "
        "databases together.",
        "Each claimed item, completed or asserted token's item and acquired lease slot holds one "
        "until its transaction ends. A transaction that would exceed it fails with 53400.",
        &pgclaim::pg::guc_max_xact_locks, 65536, 1024, 64 * 1024 * 1024, PGC_POSTMASTER, 0,
        nullptr, nullptr, nullptr);
    DefineCustomIntVariable(
        "pg_claim.max_claim_slots",
        "How many queues with max_active may have claims in flight at once, in all databases "
        "together.",
        "A claim under max_active is counted in shared memory until its transaction ends. A "
        "claim that would need one more entry fails with 53400.",
        &guc_max_claim_slots, 1024, 64, 1024 * 1024, PGC_POSTMASTER, 0, nullptr, nullptr, nullptr);
    DefineCustomIntVariable(
        "pg_claim.max_lease_grants",
        "How many lease names may have grants in flight at once, in all databases together.",
        "lease_acquire announces its grant in shared memory until its transaction ends. An "
        "acquire that would need one more entry fails with 53400.",
        &guc_max_lease_grants, 1024, 64, 1024 * 1024, PGC_POSTMASTER, 0, nullptr, nullptr,
        nullptr);
    DefineCustomIntVariable(
        "pg_claim.max_rate_keys",
        "How many rate-limited keys (a queue, or a group of a queue with a per-group rate) "
        "shared memory keeps, in all databases together.",
        "A key whose rate has fully recovered gives its entry up. A claim that needs a new key "
        "while every entry holds a busy one fails with 53400.",
        &guc_max_rate_keys, 4096, 64, 16 * 1024 * 1024, PGC_POSTMASTER, 0, nullptr, nullptr,
        nullptr);
    DefineCustomIntVariable(
        "pg_claim.max_metric_queues",
        "How many queues claim.metrics() counts, in all databases together.",
        "A queue counted first when every slot is taken is not counted: its counters read NULL "
        "and claim.metrics() reports the dropped counts.",
        &guc_max_metric_queues, 4096, 64, 1024 * 1024, PGC_POSTMASTER, 0, nullptr, nullptr,
        nullptr);
}

// The end of a transaction, for every module, in this order:
//  1. what it counted in shared memory: claims in flight under max_active
//     (shmem/claim_slots) and lease grants in flight (shmem/lease_grants),
//     given back at COMMIT and ABORT; at PRE_PREPARE a transaction that
//     holds either is refused (0A000) before anything else moves;
//  2. its item and lease locks (pg/xact_locks): given back at COMMIT and
//     ABORT, handed to the prepared transaction at PREPARE; the locks of
//     prepared transactions that ended (COMMIT PREPARED, ROLLBACK PREPARED)
//     are swept;
//  3. its announcements of queues being dropped (shmem/drops);
//  4. the backend's caches: fair keys activated or reactivated (api/fair),
//     hints, frontiers and producers' queue ids forgotten (api/caches);
//  5. then the wakes: the queue-change epoch moves, the waiters are woken
//     and the launcher or worker poked (COMMIT; ABORT passes a baton on;
//     PREPARE drops them: whoever commits the prepared transaction wakes
//     everyone, worker/database_hook.cpp).
// So a woken claimer finds the items unlocked, the slots given back and the
// fair keys active. Nothing here raises but step 1 at PRE_PREPARE.
void at_xact_end(XactEvent event, void *) {
    claim_slots_at_xact_end(event);
    lease_grants_at_xact_end(event);
    pgclaim::pg::xact_locks_at_xact_end(event);
    drops_at_xact_end(event);
    pgclaim::api::fair_at_xact_end(event);
    pgclaim::api::caches_at_xact_end(event);
    switch (event) {
        case XACT_EVENT_COMMIT:
        case XACT_EVENT_ABORT: {
            bool commit = event == XACT_EVENT_COMMIT;
            epochs_at_xact_end(commit);
            wakeup_at_xact_end(commit);
            pokes_at_xact_end(commit);
            break;
        }
        case XACT_EVENT_PREPARE:
            wakeup_at_prepare();
            pokes_at_xact_end(false);
            break;
        default:
            break;
    }
}

// The end of a subtransaction, in the same order: a rollback gives back what
// it counted, locked and cached; a commit hands it to the parent.
void at_subxact_end(SubXactEvent event, SubTransactionId, SubTransactionId, void *) {
    claim_slots_at_subxact_end(event);
    lease_grants_at_subxact_end(event);
    pgclaim::pg::xact_locks_at_subxact_end(event);
    pgclaim::api::fair_at_subxact_end(event);
    pgclaim::api::caches_at_subxact_end(event);
}

}  // namespace

// Plain C calls only: nothing here throws.
void _PG_init(void) {
    // The GUCs exist in every session (SHOW works with or without the
    // preload); shared memory, hooks and the launcher only come with
    // shared_preload_libraries. Without the preload everything works
    // lazily and waits fall back to short naps (src/shmem/poll.cpp).
    define_gucs();
    if (process_shared_preload_libraries_in_progress) define_shmem_gucs();
    MarkGUCPrefixReserved("pg_claim");
    // Once per process (inherited by the backends with the preload), in
    // every session, also one that only runs COMMIT PREPARED.
    RegisterXactCallback(at_xact_end, nullptr);
    RegisterSubXactCallback(at_subxact_end, nullptr);
    if (!process_shared_preload_libraries_in_progress) return;
    if (IsBinaryUpgrade) return;  // pg_upgrade: no worker, no hooks
    install_shmem_hooks();
    pgclaim::worker::install_database_hook();
    pgclaim::worker::register_launcher();
}
