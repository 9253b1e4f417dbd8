// Transaction-scoped locks in shared memory: see xact_locks.hpp.
//
// The table is PostgreSQL's shared hash (pg/shared_hash.hpp) split into
// kPartitions partitions, each with its own LWLock and condition variable. An entry
// names its holder by the holder's virtual transaction id, or marks it held
// by a prepared transaction. Entries are removed by the holder's
// transaction callbacks; an entry of a prepared transaction is backed by a
// heavyweight lock of the same name (taken at PREPARE, kept by the prepared
// transaction through a restart), and removed by the first backend that
// finds that heavyweight lock free.
#include "pg/xact_locks.hpp"

#include "pg/shared_hash.hpp"

extern "C" {
#include "access/twophase.h"
#include "pgstat.h"
#include "storage/condition_variable.h"
#include "storage/lwlock.h"
#include "storage/proc.h"
#include "storage/shmem.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/wait_event.h"
}

namespace pgclaim::pg {

int guc_max_xact_locks = 65536;

namespace {

constexpr int kPartitions = 128;  // a power of two (dynahash's rule)
// A waiter first sleeps on its partition's condition variable, which every
// release wakes (a claimer that tried an item and let it go at once); past
// this it waits on the holder's transaction, where deadlocks are detected.
constexpr int kShortWaitMs = 20;

struct Key {
    Oid db;
    uint16 space;
    uint16 pad;  // always 0: keys are compared as bytes
    uint64 key;
};

struct Entry {
    Key key;
    VirtualTransactionId owner;  // invalid while prepared
    bool prepared;
    uint8 tag;  // what the taker said of the key (xact_lock's `tag`)
};

struct Control {
    pg_atomic_uint64 used;      // entries in the table
    pg_atomic_uint32 restored;  // 1 once the prepared transactions' locks are entered
    struct {
        ConditionVariable cv;
        pg_atomic_uint32 waiters;
        char pad[64];
    } part[kPartitions];
};

// One LWLock per partition, and one more for restore_prepared().
pg::SharedHash shash = {"pg_claim xact locks", "transaction locks", "pg_claim.max_xact_locks",
                        sizeof(Key), sizeof(Entry), &guc_max_xact_locks, kPartitions, 1,
                        nullptr, nullptr, nullptr};
Control *ctl = nullptr;

// This backend's holds in the current transaction.
struct Held {
    Key key;
    int32 count;
    int32 level;  // transaction nesting level that took it first
};
HTAB *held = nullptr;
int64 nheld = 0;
// The virtual transaction id the entries of this transaction carry (kept
// here: at the end callbacks MyProc no longer has it).
VirtualTransactionId holder;
bool callbacks_registered = false;

Key make_key(LockSpace space, uint64 key) {
    Key k;
    memset(&k, 0, sizeof(k));
    k.db = MyDatabaseId;
    k.space = (uint16)space;
    k.key = key;
    return k;
}

void set_tag(LOCKTAG *tag, const Key &k) {
    SET_LOCKTAG_ADVISORY(*tag, k.db, (uint32)(k.key >> 32), (uint32)k.key, k.space);
}

VirtualTransactionId my_vxid() {
    VirtualTransactionId v;
    GET_VXID_FROM_PGPROC(v, *MyProc);
    return v;
}

uint32 partition_of(uint32 hash) { return hash % kPartitions; }
LWLock *lock_of(uint32 part) { return &shash.locks[part].lock; }

// Caller holds the partition's lock. Removes the entry and counts it.
void remove_entry(const Key &k, uint32 hash) {
    bool found;
    hash_search_with_hash_value(shash.htab, &k, hash, HASH_REMOVE, &found);
    if (found) pg_atomic_fetch_sub_u64(&ctl->used, 1);
}

void wake(uint32 part) {
    if (pg_atomic_read_u32(&ctl->part[part].waiters) > 0)
        ConditionVariableBroadcast(&ctl->part[part].cv);
}

// Removes this backend's entry of `k` from the shared table.
void release_shared(const Key &k) {
    uint32 hash = get_hash_value(shash.htab, &k);
    uint32 part = partition_of(hash);
    LWLockAcquire(lock_of(part), LW_EXCLUSIVE);
    bool found;
    Entry *e = (Entry *)hash_search_with_hash_value(shash.htab, &k, hash, HASH_FIND, &found);
    if (found && !e->prepared && VirtualTransactionIdEquals(e->owner, holder))
        remove_entry(k, hash);
    LWLockRelease(lock_of(part));
    wake(part);
}

void forget_all() {
    if (held != nullptr) {
        hash_destroy(held);
        held = nullptr;
    }
    nheld = 0;
}

// Calls f(h) for every lock this backend holds; f may remove h from `held`
// (dynahash allows that during a seq scan).
template <class F>
void for_each_held(F f) {
    HASH_SEQ_STATUS st;
    hash_seq_init(&st, held);
    Held *h;
    while ((h = (Held *)hash_seq_search(&st)) != nullptr) f(h);
}

// Transaction end: give every lock back. Never raises (LWLocks and dynahash
// removal do not).
void release_all() {
    if (nheld == 0) return;
    for_each_held([](Held *h) { release_shared(h->key); });
    forget_all();
}

// PREPARE TRANSACTION: the prepared transaction keeps its locks. Before the
// prepare, each is also taken as a heavyweight lock, which PostgreSQL hands
// to the prepared transaction and keeps through a restart; after it, the
// entries are marked prepared and leave this backend.
void before_prepare() {
    if (nheld == 0) return;
    for_each_held([](Held *h) {
        LOCKTAG tag;
        set_tag(&tag, h->key);
        (void)LockAcquire(&tag, ExclusiveLock, false, false);
    });
}

void after_prepare() {
    if (nheld == 0) return;
    for_each_held([](Held *h) {
        uint32 hash = get_hash_value(shash.htab, &h->key);
        uint32 part = partition_of(hash);
        LWLockAcquire(lock_of(part), LW_EXCLUSIVE);
        bool found;
        Entry *e = (Entry *)hash_search_with_hash_value(shash.htab, &h->key, hash, HASH_FIND, &found);
        if (found) {
            e->prepared = true;
            SetInvalidVirtualTransactionId(e->owner);
        }
        LWLockRelease(lock_of(part));
    });
    forget_all();
}

void on_xact(XactEvent event, void *) {
    switch (event) {
        case XACT_EVENT_COMMIT:
        case XACT_EVENT_ABORT:
        case XACT_EVENT_PARALLEL_COMMIT:
        case XACT_EVENT_PARALLEL_ABORT:
            release_all();
            break;
        case XACT_EVENT_PRE_PREPARE:
            before_prepare();
            break;
        case XACT_EVENT_PREPARE:
            after_prepare();
            break;
        default:
            break;
    }
}

// A subtransaction that rolls back gives back what it took; one that
// commits hands its locks to its parent.
void on_subxact(SubXactEvent event, SubTransactionId, SubTransactionId, void *) {
    if (nheld == 0) return;
    if (event != SUBXACT_EVENT_ABORT_SUB && event != SUBXACT_EVENT_COMMIT_SUB) return;
    int level = GetCurrentTransactionNestLevel();
    for_each_held([&](Held *h) {
        if (h->level < level) return;
        if (event == SUBXACT_EVENT_COMMIT_SUB) {
            h->level = level - 1;
            return;
        }
        release_shared(h->key);
        Key k = h->key;
        hash_search(held, &k, HASH_REMOVE, nullptr);
        --nheld;
    });
}

void ensure_local() {
    if (!callbacks_registered) {
        RegisterXactCallback(on_xact, nullptr);
        RegisterSubXactCallback(on_subxact, nullptr);
        callbacks_registered = true;
    }
    if (held == nullptr) {
        HASHCTL c;
        memset(&c, 0, sizeof(c));
        c.keysize = sizeof(Key);
        c.entrysize = sizeof(Held);
        c.hcxt = TopMemoryContext;
        held = hash_create("pg_claim held locks", 64, &c, HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
    }
}

// After a restart, prepared transactions hold their heavyweight locks but
// the table is empty: the first caller puts their entries back.
void restore_prepared() {
    if (pg_atomic_read_u32(&ctl->restored) == 1) return;
    LWLock *once = lock_of(kPartitions);
    LWLockAcquire(once, LW_EXCLUSIVE);
    if (pg_atomic_read_u32(&ctl->restored) == 1) {
        LWLockRelease(once);
        return;
    }
    if (max_prepared_xacts > 0) {
        LockData *ld = GetLockStatusData();
        for (int i = 0; i < ld->nelements; ++i) {
            LockInstanceData *li = &ld->locks[i];
            const LOCKTAG &t = li->locktag;
            if (t.locktag_type != LOCKTAG_ADVISORY || li->pid != 0 ||
                (li->holdMask & LOCKBIT_ON(ExclusiveLock)) == 0)
                continue;
            if (t.locktag_field4 != (uint16)LockSpace::Item &&
                t.locktag_field4 != (uint16)LockSpace::LeaseSlot)
                continue;
            Key k;
            memset(&k, 0, sizeof(k));
            k.db = t.locktag_field1;
            k.space = t.locktag_field4;
            k.key = ((uint64)t.locktag_field2 << 32) | t.locktag_field3;
            uint32 hash = get_hash_value(shash.htab, &k);
            uint32 part = partition_of(hash);
            LWLockAcquire(lock_of(part), LW_EXCLUSIVE);
            bool found;
            Entry *e = (Entry *)hash_search_with_hash_value(shash.htab, &k, hash, HASH_ENTER_NULL, &found);
            if (e != nullptr && !found) {
                pg_atomic_fetch_add_u64(&ctl->used, 1);
                e->prepared = true;
                e->tag = 0;
                SetInvalidVirtualTransactionId(e->owner);
            }
            LWLockRelease(lock_of(part));
        }
    }
    pg_atomic_write_u32(&ctl->restored, 1);
    LWLockRelease(once);
}

// Is the prepared transaction behind entry `k` still there? Takes and gives
// back its heavyweight lock (without waiting) to find out.
bool prepared_gone(const Key &k) {
    LOCKTAG tag;
    set_tag(&tag, k);
    if (LockAcquire(&tag, ExclusiveLock, false, true) == LOCKACQUIRE_NOT_AVAIL) return false;
    (void)LockRelease(&tag, ExclusiveLock, false);
    return true;
}

[[noreturn]] void table_full() {
    error({ERRCODE_CONFIGURATION_LIMIT_EXCEEDED,
           "Raise pg_claim.max_xact_locks (a restart applies it), or claim fewer items in one "
           "transaction.",
           nullptr},
          "pg_claim's lock table is full: %d items and lease slots are locked by open "
          "transactions",
          guc_max_xact_locks);
}

enum class Try { Taken, Busy, BusyPrepared };

// One attempt under the partition's lock.
Try try_take(const Key &k, uint32 hash, VirtualTransactionId me, uint8 tag,
             VirtualTransactionId *owner) {
    uint32 part = partition_of(hash);
    LWLockAcquire(lock_of(part), LW_EXCLUSIVE);
    bool found;
    Entry *e = (Entry *)hash_search_with_hash_value(shash.htab, &k, hash, HASH_FIND, &found);
    if (found && e->prepared) {
        if (!prepared_gone(k)) {
            LWLockRelease(lock_of(part));
            return Try::BusyPrepared;
        }
        remove_entry(k, hash);
        found = false;
    }
    if (found) {
        *owner = e->owner;
        LWLockRelease(lock_of(part));
        return Try::Busy;
    }
    if (pg_atomic_fetch_add_u64(&ctl->used, 1) >= (uint64)guc_max_xact_locks) {
        pg_atomic_fetch_sub_u64(&ctl->used, 1);
        LWLockRelease(lock_of(part));
        table_full();
    }
    e = (Entry *)hash_search_with_hash_value(shash.htab, &k, hash, HASH_ENTER_NULL, &found);
    if (e == nullptr) {
        pg_atomic_fetch_sub_u64(&ctl->used, 1);
        LWLockRelease(lock_of(part));
        table_full();
    }
    e->owner = me;
    e->prepared = false;
    e->tag = tag;
    LWLockRelease(lock_of(part));
    return Try::Taken;
}

// Heavyweight fallback without the preload.
bool hw_lock(const Key &k, bool wait) {
    LOCKTAG tag;
    set_tag(&tag, k);
    return LockAcquire(&tag, ExclusiveLock, false, !wait) != LOCKACQUIRE_NOT_AVAIL;
}

}  // namespace

Size xact_locks_shmem_size() {
    Size s = MAXALIGN(sizeof(Control));
    return add_size(s, pg::shared_hash_size(shash));
}

void xact_locks_shmem_request() { pg::shared_hash_request(shash); }

void xact_locks_shmem_init() {
    bool found;
    ctl = (Control *)ShmemInitStruct("pg_claim xact locks control", sizeof(Control), &found);
    if (!found) {
        pg_atomic_init_u64(&ctl->used, 0);
        pg_atomic_init_u32(&ctl->restored, 0);
        for (int i = 0; i < kPartitions; ++i) {
            ConditionVariableInit(&ctl->part[i].cv);
            pg_atomic_init_u32(&ctl->part[i].waiters, 0);
        }
    }
    pg::shared_hash_init(shash);
}

bool xact_lock(LockSpace space, uint64 key, bool wait, uint8 tag) {
    Key k = make_key(space, key);
    if (shash.htab == nullptr) return hw_lock(k, wait);
    ensure_local();
    bool found;
    Held *h = (Held *)hash_search(held, &k, HASH_FIND, &found);
    if (found) {
        ++h->count;
        return true;
    }
    restore_prepared();
    // The local entry first: once the shared one exists, nothing may fail
    // before this backend knows it has to give it back.
    Held *n = (Held *)hash_search(held, &k, HASH_ENTER, &found);
    n->count = 0;
    n->level = GetCurrentTransactionNestLevel();
    ++nheld;
    uint32 hash = get_hash_value(shash.htab, &k);
    uint32 part = partition_of(hash);
    VirtualTransactionId me = my_vxid();
    holder = me;
    TimestampTz since = 0;
    bool sleeping = false;
    Try r;
    for (;;) {
        VirtualTransactionId owner;
        SetInvalidVirtualTransactionId(owner);
        r = try_take(k, hash, me, tag, &owner);
        if (r == Try::Taken || !wait) break;
        if (r == Try::BusyPrepared) {
            // Wait for the prepared transaction through its heavyweight lock.
            if (sleeping) {
                ConditionVariableCancelSleep();
                pg_atomic_fetch_sub_u32(&ctl->part[part].waiters, 1);
                sleeping = false;
            }
            LOCKTAG tag;
            set_tag(&tag, k);
            (void)LockAcquire(&tag, ExclusiveLock, false, false);
            (void)LockRelease(&tag, ExclusiveLock, false);
            continue;
        }
        if (!sleeping) {
            // Registered before looking again, so a release in between
            // wakes this sleep.
            ConditionVariablePrepareToSleep(&ctl->part[part].cv);
            pg_atomic_fetch_add_u32(&ctl->part[part].waiters, 1);
            sleeping = true;
            since = GetCurrentTimestamp();
            continue;
        }
        if (TimestampDifferenceExceeds(since, GetCurrentTimestamp(), kShortWaitMs)) {
            // A longer wait: wait on the holder's transaction itself, which
            // PostgreSQL's deadlock detector sees (after deadlock_timeout).
            ConditionVariableCancelSleep();
            pg_atomic_fetch_sub_u32(&ctl->part[part].waiters, 1);
            sleeping = false;
            (void)VirtualXactLock(owner, true);
            continue;
        }
        (void)ConditionVariableTimedSleep(&ctl->part[part].cv, kShortWaitMs, PG_WAIT_EXTENSION);
        CHECK_FOR_INTERRUPTS();
    }
    if (sleeping) {
        ConditionVariableCancelSleep();
        pg_atomic_fetch_sub_u32(&ctl->part[part].waiters, 1);
    }
    if (r != Try::Taken) {
        hash_search(held, &k, HASH_REMOVE, nullptr);
        --nheld;
        return false;
    }
    n->count = 1;
    return true;
}

void xact_unlock(LockSpace space, uint64 key) {
    Key k = make_key(space, key);
    if (shash.htab == nullptr) {
        LOCKTAG tag;
        set_tag(&tag, k);
        (void)LockRelease(&tag, ExclusiveLock, false);
        return;
    }
    if (held == nullptr) return;
    bool found;
    Held *h = (Held *)hash_search(held, &k, HASH_FIND, &found);
    if (!found) return;
    if (--h->count > 0) return;
    hash_search(held, &k, HASH_REMOVE, nullptr);
    --nheld;
    release_shared(k);
}

int xact_lock_busy_tag(LockSpace space, uint64 key) {
    // No entry anywhere (an idle queue, polled): nothing to look up. A lock
    // taken right after this read is one taken right after the look.
    if (shash.htab == nullptr || pg_atomic_read_u64(&ctl->used) == 0) return -1;
    Key k = make_key(space, key);
    if (held != nullptr && hash_search(held, &k, HASH_FIND, nullptr) != nullptr) return -1;
    uint32 hash = get_hash_value(shash.htab, &k);
    uint32 part = partition_of(hash);
    LWLockAcquire(lock_of(part), LW_SHARED);
    bool found;
    Entry *e = (Entry *)hash_search_with_hash_value(shash.htab, &k, hash, HASH_FIND, &found);
    int tag = found && !e->prepared ? e->tag : -1;
    LWLockRelease(lock_of(part));
    return tag;
}

bool xact_lock_busy(LockSpace space, uint64 key) { return xact_lock_busy_tag(space, key) >= 0; }

void xact_locks_release_all() {
    if (shash.htab != nullptr) release_all();
}

bool xact_locks_in_shmem() { return shash.htab != nullptr; }

int64 xact_locks_held() { return nheld; }

int64 xact_locks_in_use() { return ctl == nullptr ? 0 : (int64)pg_atomic_read_u64(&ctl->used); }

}  // namespace pgclaim::pg
