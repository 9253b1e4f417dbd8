// Shared memory of pg_claim (only when preloaded): waiter slots, the wake
// stamps that close the race between "found nothing" and "went to sleep",
// and the registry of databases served by the background workers; the
// settings every layer reads. Defined in shared.cpp; the hooks that size and
// start it and the other shared-memory tables are in services.cpp; the
// services on it have their own files (wakeup, epochs, fencing, notify,
// registry, frontier, ...).
//
// Everything but the atomics is protected by one LWLock (tranche
// "pg_claim"). Nothing that can raise runs while it is held.
#pragma once

#include "pg/pg.hpp"

extern "C" {
#include "port/atomics.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "storage/spin.h"
}

namespace pgclaim::shmem {

inline constexpr int kBuckets = 4096;      // wake stamps, hashed by (db, kind, key)
inline constexpr int kMaxDbSlots = 256;    // hard cap of the database registry
inline constexpr int kNotifyQueues = 32;   // queue ids remembered per database for NOTIFY
inline constexpr int kFrontierSlots = 1024; // claim scan frontiers, hashed by queue

// One per PGPROC (indexed by compat::proc_number).
struct Waiter {
    Oid db;
    int kind;
    int64 key;
    Latch *latch;
    uint64 seq;    // registration order: the smallest waited longest
    bool waiting;
    bool woken;    // a waker picked it; others pick someone else
    bool baton;    // the waker's count was a lower bound: pass the wake on
};

enum class DbState : int {
    Free = 0,     // slot unused
    Idle,         // no worker; start one at next_start
    Starting,     // registered with the postmaster, not yet running
    Running,      // a worker serves the database
    Absent,       // the extension is not installed; probe again at next_start
};

// Why a worker ended (set by the worker, read by the launcher).
enum class ExitReason : int { Error = 0, Absent, Disabled, Paused, Duplicate, Yielded };

struct DbSlot {
    Oid db;
    DbState state;
    int pid;                   // worker's pid while it runs
    Latch *latch;              // worker's latch while it runs
    ExitReason exit_reason;
    TimestampTz next_start;    // launcher: when to start (or probe) again
    TimestampTz started_at;    // launcher: when it asked for the worker
    TimestampTz paused_until;  // DROP/ALTER DATABASE in progress: no worker
    // Time-slicing (launcher.cpp): since when the database is due and has no
    // worker (0: not waiting); the launcher asks a worker to hand its slot on.
    TimestampTz waiting_since;
    bool yield_requested;
    uint64 errors;             // rounds that failed and were rolled back
    // Expired claims are counted up to here (kept across the worker
    // processes that take turns; 0: none counted yet).
    TimestampTz last_expiry;
    // Queues that producers made ready since the worker's last NOTIFY.
    slock_t mutex;
    int nnotify;
    bool notify_all;
    int32 notify_queues[kNotifyQueues];
    pg_atomic_uint32 notify_pending;
    // The earliest time a backend asked for a round with duties (an item
    // scheduled before the worker's next round; 0: none), see registry.hpp.
    pg_atomic_uint64 duties_at;
    // Statistics (written by the worker only).
    uint64 cycles, promoted, expired, killed, notifies, purged;
};

// Where claim scans of one queue may start (see frontier.hpp). The key
// includes claim.items' OID, so a re-created extension never reads the
// frontier of its predecessor's queue with the same id.
struct FrontierSlot {
    slock_t mutex;
    bool valid;
    Oid db;
    Oid items;
    int32 queue_id;
    int32 ord;
    int64 id;
    int64 expires;     // TimestampTz: until when the position holds
    int64 head_until;  // TimestampTz: until when the last walk from the head vouches for it
    uint64 epoch;      // moved by every forget (of any queue hashed here)
    int32 max_ord;     // the highest ord published under this epoch (PG_INT32_MIN: none)
};

struct Shared {
    LWLock *lock;
    int launcher_pid;
    Latch *launcher_latch;
    pg_atomic_uint32 rescan;       // ask the launcher to re-read pg_database
    pg_atomic_uint64 queue_drops;  // moved by every drop_queue (producers' queue caches)
    pg_atomic_uint64 queue_changes;  // moved at the commit of alter_queue, pause, resume
    pg_atomic_uint32 nwaiters;
    pg_atomic_uint32 finished_waiters;  // backends inside item_state(wait)
    pg_atomic_uint64 wake_all_stamp;    // last time every waiter was woken (COMMIT PREPARED)
    uint64 next_seq;
    pg_atomic_uint64 stamps[kBuckets];  // last wake time per bucket
    DbSlot dbs[kMaxDbSlots];
    // Databases whose token sequence was moved past anything a crash could
    // have lost since this shared memory was set up (see tokens_fenced()).
    int nfenced;
    Oid fenced[kMaxDbSlots];
    // Per fenced database: the durable token ceiling a backend last flushed,
    // and the ceiling sequence it belongs to (see tokens_ceiling()).
    Oid ceiling_seq[kMaxDbSlots];
    int64 ceiling[kMaxDbSlots];
    FrontierSlot frontiers[kFrontierSlots];
    int nwaiter_slots;
    Waiter waiters[FLEXIBLE_ARRAY_MEMBER];
};

// NULL without shared_preload_libraries.
extern Shared *shared;
// The backend-local flag: this process is a pg_claim worker (its own commits
// do not ask for a NOTIFY, it sends them itself).
extern bool am_worker;

// Settings, registered as GUCs by src/module.cpp; the variables and their
// defaults are in shared.cpp.
extern bool guc_worker_enabled;
extern int guc_worker_naptime_ms;
extern int guc_max_databases;
extern bool guc_notify;
extern int guc_lease_purge_after_s;  // -1: off

// True when the library was preloaded (shared memory and worker available).
bool preloaded();

// The segment: its space and its LWLock tranche (from the shared-memory
// request hook), and its initialisation (from the startup hook, under
// AddinShmemInitLock). Both in services.cpp's hooks.
void shared_shmem_request();
void shared_shmem_init();

// The struct T named `name` in shared memory, zeroed with its spinlock
// `mutex` initialised by the first backend to ask (the services' init hooks,
// under AddinShmemInitLock).
template <typename T>
T *shmem_struct_with_mutex(const char *name) {
    bool found;
    T *p = (T *)ShmemInitStruct(name, sizeof(T), &found);
    if (!found) {
        memset((void *)p, 0, sizeof(T));
        SpinLockInit(&p->mutex);
    }
    return p;
}

}  // namespace pgclaim::shmem
