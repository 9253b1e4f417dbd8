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

#include "pg/xact_locks_shared.hpp"

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

using namespace xact_table;

namespace {

// A waiter first sleeps on its partition's condition variable, which every
// release wakes (a claimer that tried an item and let it go at once); past
// this it waits on the holder's transaction, where deadlocks are detected.
constexpr int kShortWaitMs = 20;

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
Key make_key(LockSpace space, uint64 key) {
    Key k;
    memset(&k, 0, sizeof(k));
    k.db = MyDatabaseId;
    k.space = (uint16)space;
    k.key = key;
    return k;
}

VirtualTransactionId my_vxid() {
    VirtualTransactionId v;
    GET_VXID_FROM_PGPROC(v, *MyProc);
    return v;
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

void ensure_local() {
    if (held == nullptr) {
        HASHCTL c;
        memset(&c, 0, sizeof(c));
        c.keysize = sizeof(Key);
        c.entrysize = sizeof(Held);
        c.hcxt = TopMemoryContext;
        held = hash_create("pg_claim held locks", 64, &c, HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
    }
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

void xact_locks_at_xact_end(XactEvent event) { on_xact(event, nullptr); }

void xact_locks_at_subxact_end(SubXactEvent event) { on_subxact(event, 0, 0, nullptr); }

int64 xact_locks_held() { return nheld; }

}  // namespace pgclaim::pg
