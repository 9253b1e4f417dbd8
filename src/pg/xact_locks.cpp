// Transaction-scoped locks in shared memory: see xact_locks.hpp.
//
// The table is PostgreSQL's shared hash (pg/shared_hash.hpp) split into
// kPartitions partitions, each with its own LWLock and condition variable. An entry
// names its holder by the holder's virtual transaction id, or marks it held
// by a prepared transaction, by that transaction's xid. Entries are removed
// by the holder's transaction callbacks. The entries of a prepared
// transaction are chained from a slot of their own (one slot per possible
// prepared transaction, max_prepared_transactions of them) and removed all
// together by the first backend whose transaction ends after the prepared
// one has finished: the one that ran COMMIT PREPARED or ROLLBACK PREPARED,
// or a backend that met one of them and found the transaction gone.
// After a restart the table is empty; what a prepared transaction did to
// its items is then kept by their rows (a claimer passes over an item whose
// row an open transaction deletes or updates: direct_read.cpp).
#include "pg/xact_locks.hpp"

#include "pg/shared_hash.hpp"

extern "C" {
#include "access/twophase.h"
#include "pgstat.h"
#include "storage/condition_variable.h"
#include "storage/lmgr.h"
#include "storage/lwlock.h"
#include "storage/procarray.h"
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
    bool has_next;
    uint8 tag;  // what the taker said of the key (xact_lock's `tag`)
    // Prepared: the transaction's xid (invalid for an entry restored from a
    // heavyweight lock, below), and the next entry of its chain.
    TransactionId xid;
    Key next;
};

// The chain of one prepared transaction's entries; xid invalid: free.
struct Prep {
    TransactionId xid;
    bool has_first;
    bool unknown;  // found at start-up: which keys it holds is not known
    Key first;
};

struct Control {
    pg_atomic_uint64 used;      // entries in the table
    pg_atomic_uint32 restored;  // 1 once the prepared transactions' locks are entered
    pg_atomic_uint32 nprep;     // slots of prep[] in use
    pg_atomic_uint32 nunknown;  // of them, found at start-up (Prep::unknown)
    struct {
        ConditionVariable cv;
        pg_atomic_uint32 waiters;
        char pad[64];
    } part[kPartitions];
    int nslots;  // max_prepared_transactions
    Prep prep[FLEXIBLE_ARRAY_MEMBER];
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

// The lock taken by restore_prepared() and by the changes to the chains of
// prepared transactions (after the partitions' locks: never the other way).
LWLock *prep_lock() { return lock_of(kPartitions); }

// The xid of the transaction being prepared (PrepareTransaction assigned
// one before it called the callbacks).
TransactionId preparing_xid = InvalidTransactionId;

// PREPARE TRANSACTION: the prepared transaction keeps its locks. The entries
// are marked prepared with its xid and chained from a free slot; they leave
// this backend.
void after_prepare() {
    if (nheld == 0) return;
    TransactionId xid = preparing_xid;
    LWLockAcquire(prep_lock(), LW_EXCLUSIVE);
    Prep *slot = nullptr;
    for (int i = 0; i < ctl->nslots && slot == nullptr; ++i)
        if (!TransactionIdIsValid(ctl->prep[i].xid)) slot = &ctl->prep[i];
    if (slot != nullptr) {
        slot->xid = xid;
        slot->has_first = false;
        slot->unknown = false;
        pg_atomic_fetch_add_u32(&ctl->nprep, 1);
    }
    for_each_held([&](Held *h) {
        uint32 hash = get_hash_value(shash.htab, &h->key);
        uint32 part = partition_of(hash);
        LWLockAcquire(lock_of(part), LW_EXCLUSIVE);
        bool found;
        Entry *e = (Entry *)hash_search_with_hash_value(shash.htab, &h->key, hash, HASH_FIND, &found);
        if (found) {
            e->prepared = true;
            e->xid = xid;
            SetInvalidVirtualTransactionId(e->owner);
            // Without a slot (not expected: there is one per possible
            // prepared transaction) an entry stays unchained, and the first
            // backend to meet it after the transaction ends removes it.
            e->has_next = slot != nullptr && slot->has_first;
            if (slot != nullptr) {
                if (slot->has_first) e->next = slot->first;
                slot->first = h->key;
                slot->has_first = true;
            }
        }
        LWLockRelease(lock_of(part));
    });
    LWLockRelease(prep_lock());
    forget_all();
}

// Removes the entries of every prepared transaction that has ended, and
// wakes their waiters. Never raises.
void sweep_prepared() {
    if (ctl == nullptr || pg_atomic_read_u32(&ctl->nprep) == 0) return;
    LWLockAcquire(prep_lock(), LW_EXCLUSIVE);
    for (int i = 0; i < ctl->nslots; ++i) {
        Prep *slot = &ctl->prep[i];
        if (!TransactionIdIsValid(slot->xid) || TransactionIdIsInProgress(slot->xid)) continue;
        bool has = slot->has_first;
        Key k = slot->first;
        while (has) {
            uint32 hash = get_hash_value(shash.htab, &k);
            uint32 part = partition_of(hash);
            LWLockAcquire(lock_of(part), LW_EXCLUSIVE);
            bool found;
            Entry *e = (Entry *)hash_search_with_hash_value(shash.htab, &k, hash, HASH_FIND, &found);
            has = false;
            if (found && e->prepared && e->xid == slot->xid) {
                has = e->has_next;
                Key next = e->next;
                remove_entry(k, hash);
                k = next;
            }
            LWLockRelease(lock_of(part));
            wake(part);
        }
        if (slot->unknown) pg_atomic_fetch_sub_u32(&ctl->nunknown, 1);
        slot->xid = InvalidTransactionId;
        slot->has_first = false;
        slot->unknown = false;
        pg_atomic_fetch_sub_u32(&ctl->nprep, 1);
    }
    LWLockRelease(prep_lock());
}

void on_xact(XactEvent event, void *) {
    switch (event) {
        case XACT_EVENT_COMMIT:
        case XACT_EVENT_ABORT:
        case XACT_EVENT_PARALLEL_COMMIT:
        case XACT_EVENT_PARALLEL_ABORT:
            release_all();
            // COMMIT PREPARED and ROLLBACK PREPARED end here too.
            sweep_prepared();
            break;
        case XACT_EVENT_PRE_PREPARE:
            if (nheld > 0) preparing_xid = GetTopTransactionId();
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

void register_callbacks() {
    if (!callbacks_registered) {
        RegisterXactCallback(on_xact, nullptr);
        RegisterSubXactCallback(on_subxact, nullptr);
        callbacks_registered = true;
    }
}

void ensure_local() {
    register_callbacks();
    if (held == nullptr) {
        HASHCTL c;
        memset(&c, 0, sizeof(c));
        c.keysize = sizeof(Key);
        c.entrysize = sizeof(Held);
        c.hcxt = TopMemoryContext;
        held = hash_create("pg_claim held locks", 64, &c, HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
    }
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

// Transactions prepared by pg_claim 0.3.0 took a heavyweight lock per held
// key, which the prepared transaction keeps through a restart: after a
// restart the first caller puts their entries back (unchained: the first
// backend that meets one after its transaction ended removes it).
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
            if (t.locktag_type == LOCKTAG_TRANSACTION && li->pid == 0) {
                // A prepared transaction (it holds the lock on its own xid):
                // the keys of its items are not known after a restart, so
                // until it ends the claimers also look for claim rows that
                // open transactions inserted (xact_locks_prepared_unknown).
                TransactionId xid = t.locktag_field1;
                for (int j = 0; j < ctl->nslots; ++j) {
                    Prep *slot = &ctl->prep[j];
                    if (TransactionIdIsValid(slot->xid)) continue;
                    slot->xid = xid;
                    slot->has_first = false;
                    slot->unknown = true;
                    pg_atomic_fetch_add_u32(&ctl->nprep, 1);
                    pg_atomic_fetch_add_u32(&ctl->nunknown, 1);
                    break;
                }
                continue;
            }
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
            if (e == nullptr) {
                // Entered later by the next caller, or never: until then
                // every lock is refused, so that nothing a prepared
                // transaction holds is taken.
                LWLockRelease(lock_of(part));
                LWLockRelease(once);
                ereport(LOG, (errmsg("pg_claim: the lock table is too small for the locks of "
                                     "the prepared transactions (pg_claim.max_xact_locks = %d)",
                                     guc_max_xact_locks)));
                table_full();
            }
            if (!found) {
                pg_atomic_fetch_add_u64(&ctl->used, 1);
                e->prepared = true;
                e->has_next = false;
                e->xid = InvalidTransactionId;
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

enum class Try { Taken, Busy, BusyPrepared };

// One attempt under the partition's lock.
Try try_take(const Key &k, uint32 hash, VirtualTransactionId me, uint8 tag,
             VirtualTransactionId *owner, TransactionId *prepared_xid) {
    uint32 part = partition_of(hash);
    LWLockAcquire(lock_of(part), LW_EXCLUSIVE);
    bool found;
    Entry *e = (Entry *)hash_search_with_hash_value(shash.htab, &k, hash, HASH_FIND, &found);
    while (found && e->prepared) {
        TransactionId xid = e->xid;
        if (TransactionIdIsValid(xid) ? TransactionIdIsInProgress(xid) : !prepared_gone(k)) {
            *prepared_xid = xid;
            LWLockRelease(lock_of(part));
            return Try::BusyPrepared;
        }
        if (TransactionIdIsValid(xid) && e->has_next) {
            // Ended, and chained: its whole chain goes (not this entry
            // alone, which would cut the chain), then a look again.
            LWLockRelease(lock_of(part));
            sweep_prepared();
            LWLockAcquire(lock_of(part), LW_EXCLUSIVE);
            e = (Entry *)hash_search_with_hash_value(shash.htab, &k, hash, HASH_FIND, &found);
            if (found && e->prepared && e->xid == xid) {
                remove_entry(k, hash);  // not chained after all (the sweep ran first)
                found = false;
            }
            continue;
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
    e->has_next = false;
    e->xid = InvalidTransactionId;
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

namespace {
Size control_size() {
    return add_size(offsetof(Control, prep), mul_size(sizeof(Prep), Max(max_prepared_xacts, 0)));
}
}  // namespace

Size xact_locks_shmem_size() {
    Size s = MAXALIGN(control_size());
    return add_size(s, pg::shared_hash_size(shash));
}

void xact_locks_shmem_request() { pg::shared_hash_request(shash); }

void xact_locks_shmem_init() {
    bool found;
    ctl = (Control *)ShmemInitStruct("pg_claim xact locks control", control_size(), &found);
    if (!found) {
        pg_atomic_init_u64(&ctl->used, 0);
        pg_atomic_init_u32(&ctl->restored, 0);
        pg_atomic_init_u32(&ctl->nprep, 0);
        pg_atomic_init_u32(&ctl->nunknown, 0);
        ctl->nslots = Max(max_prepared_xacts, 0);
        for (int i = 0; i < ctl->nslots; ++i) {
            ctl->prep[i].xid = InvalidTransactionId;
            ctl->prep[i].has_first = false;
            ctl->prep[i].unknown = false;
        }
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
        TransactionId prepared_xid = InvalidTransactionId;
        r = try_take(k, hash, me, tag, &owner, &prepared_xid);
        if (r == Try::Taken || !wait) break;
        if (r == Try::BusyPrepared) {
            // Wait for the prepared transaction: on its xid (which the
            // deadlock detector sees), or for a lock restored from 0.3.0,
            // through its heavyweight lock.
            if (sleeping) {
                ConditionVariableCancelSleep();
                pg_atomic_fetch_sub_u32(&ctl->part[part].waiters, 1);
                sleeping = false;
            }
            if (TransactionIdIsValid(prepared_xid)) {
                XactLockTableWait(prepared_xid, nullptr, nullptr, XLTW_None);
                sweep_prepared();
            } else {
                LOCKTAG tag;
                set_tag(&tag, k);
                (void)LockAcquire(&tag, ExclusiveLock, false, false);
                (void)LockRelease(&tag, ExclusiveLock, false);
            }
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

void xact_locks_register() { register_callbacks(); }

bool xact_locks_prepared_unknown() {
    if (ctl == nullptr) return false;
    restore_prepared();
    return pg_atomic_read_u32(&ctl->nunknown) > 0;
}

int64 xact_locks_held() { return nheld; }

int64 xact_locks_in_use() { return ctl == nullptr ? 0 : (int64)pg_atomic_read_u64(&ctl->used); }

}  // namespace pgclaim::pg
