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
//
// Waiting: a waiter first sleeps on its partition's condition variable, which
// every release wakes. Past kShortWaitMs it waits on the holder's anchor, a
// heavyweight lock the holder takes with its first entry of a transaction
// (xact_locks_shared.hpp), so that PostgreSQL's deadlock detector sees the
// wait. The anchor goes when the holder's transaction ends; a holder that
// lets a waited-for key go earlier (a claimer that let a candidate go, a
// subtransaction that rolls back) moves its anchor on, so the waiter wakes
// then and not only when the holder's whole transaction ends.
#include "pg/xact_locks.hpp"

#include "pg/compat.hpp"
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
#include "utils/resowner.h"
#include "utils/wait_event.h"
}

namespace pgclaim::pg {

using namespace xact_table;

namespace {

// A waiter first sleeps on its partition's condition variable, which every
// release wakes (a claimer that tried an item and let it go at once); past
// this it waits on the holder's anchor, where deadlocks are detected.
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
// The generation of this backend's anchor held now (0: none).
uint64 anchor = 0;
// The partition whose waiters count this backend (-1: none): an error
// during the sleep leaves it to the abort callbacks.
int waiting_part = -1;
// Holds taken again by a subtransaction deeper than the one that took the
// lock first: its rollback gives them back.
struct Retake {
    Key key;
    int32 level;
};
List *retakes = NIL;  // of Retake *, in TopMemoryContext

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

// Removes this backend's entry of `k` from the shared table; returns whether
// someone waited for it on the anchor.
bool release_shared(const Key &k) {
    uint32 hash = get_hash_value(shash.htab, &k);
    uint32 part = partition_of(hash);
    LWLockAcquire(lock_of(part), LW_EXCLUSIVE);
    bool found;
    bool waited = false;
    Entry *e = (Entry *)hash_search_with_hash_value(shash.htab, &k, hash, HASH_FIND, &found);
    if (found && !e->prepared && VirtualTransactionIdEquals(e->owner, holder)) {
        waited = e->hw_wait;
        remove_entry(k, hash);
    }
    LWLockRelease(lock_of(part));
    wake(part);
    return waited;
}

void forget_all() {
    if (held != nullptr) {
        hash_destroy(held);
        held = nullptr;
    }
    nheld = 0;
    list_free_deep(retakes);
    retakes = NIL;
}

// The anchor (see the top of this file). It belongs to the top transaction,
// whichever subtransaction takes it, and PostgreSQL lets it go when the
// transaction ends (or keeps it with a prepared transaction).
bool anchors_on() { return anchors != nullptr && MyProc != nullptr && compat::my_procno() < nanchors; }

void take_anchor() {
    if (anchor != 0 || !anchors_on()) return;
    int p = compat::my_procno();
    uint64 g = pg_atomic_add_fetch_u64(&anchors[p].gen, 1);
    LOCKTAG tag;
    anchor_tag(&tag, p, g);
    ResourceOwner save = CurrentResourceOwner;
    CurrentResourceOwner = TopTransactionResourceOwner;
    bool got;
    PG_TRY();
    {
        // A new generation: nobody else can hold it.
        got = LockAcquire(&tag, ExclusiveLock, false, true) != LOCKACQUIRE_NOT_AVAIL;
    }
    PG_FINALLY();
    {
        CurrentResourceOwner = save;
    }
    PG_END_TRY();
    if (!got) return;
    anchor = g;
    pg_atomic_write_u64(&anchors[p].current, g);
}

// Lets generation `gen` of this backend's anchor go. Never raises.
void release_anchor_lock(uint64 gen) {
    LOCKTAG tag;
    anchor_tag(&tag, compat::my_procno(), gen);
    ResourceOwner save = CurrentResourceOwner;
    CurrentResourceOwner = TopTransactionResourceOwner;
    (void)LockRelease(&tag, ExclusiveLock, false);
    CurrentResourceOwner = save;
}

// Lets the anchor go now. Never raises.
void drop_anchor() {
    if (anchor == 0) return;
    pg_atomic_write_u64(&anchors[compat::my_procno()].current, 0);
    uint64 old = anchor;
    anchor = 0;
    release_anchor_lock(old);
}

// A waited-for key went before the end of the transaction: its waiters wake
// when the anchor they wait on goes; the next generation is taken first, so
// that the waiters of the keys still held find one to wait on.
void move_anchor() {
    if (anchor == 0) return;
    uint64 old = anchor;
    anchor = 0;
    take_anchor();
    release_anchor_lock(old);
}

// The transaction ended: PostgreSQL lets the anchor go (or a prepared
// transaction keeps it).
void forget_anchor() {
    if (anchor == 0) return;
    pg_atomic_write_u64(&anchors[compat::my_procno()].current, 0);
    anchor = 0;
}

void stop_counting_wait() {
    if (waiting_part < 0) return;
    pg_atomic_fetch_sub_u32(&ctl->part[waiting_part].waiters, 1);
    waiting_part = -1;
}

void push_retake(const Key &k, int32 level) {
    MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);
    Retake *r = (Retake *)palloc(sizeof(Retake));
    r->key = k;
    r->level = level;
    retakes = lappend(retakes, r);
    MemoryContextSwitchTo(old);
}

void forget_retakes(const Key &k) {
    ListCell *lc;
    foreach (lc, retakes) {
        Retake *r = (Retake *)lfirst(lc);
        if (memcmp(&r->key, &k, sizeof(Key)) == 0) {
            retakes = foreach_delete_current(retakes, lc);
            pfree(r);
        }
    }
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
            stop_counting_wait();
            release_all();
            forget_anchor();
            // COMMIT PREPARED and ROLLBACK PREPARED end here too.
            sweep_prepared();
            break;
        case XACT_EVENT_PRE_PREPARE:
            if (nheld > 0) preparing_xid = GetTopTransactionId();
            break;
        case XACT_EVENT_PREPARE:
            after_prepare();
            forget_anchor();
            break;
        default:
            break;
    }
}

// A subtransaction that rolls back gives back what it took; one that
// commits hands its locks to its parent.
void on_subxact(SubXactEvent event, SubTransactionId, SubTransactionId, void *) {
    if (event == SUBXACT_EVENT_ABORT_SUB) stop_counting_wait();
    if (nheld == 0) return;
    if (event != SUBXACT_EVENT_ABORT_SUB && event != SUBXACT_EVENT_COMMIT_SUB) return;
    int level = GetCurrentTransactionNestLevel();
    bool waited = false;
    // Holds taken again at this level: handed to the parent, or given back.
    ListCell *lc;
    foreach (lc, retakes) {
        Retake *r = (Retake *)lfirst(lc);
        if (r->level < level) continue;
        if (event == SUBXACT_EVENT_COMMIT_SUB) {
            r->level = level - 1;
            continue;
        }
        Held *h = (Held *)hash_search(held, &r->key, HASH_FIND, nullptr);
        if (h != nullptr && h->level < level && --h->count <= 0) {
            waited |= release_shared(h->key);
            hash_search(held, &r->key, HASH_REMOVE, nullptr);
            --nheld;
        }
        retakes = foreach_delete_current(retakes, lc);
        pfree(r);
    }
    for_each_held([&](Held *h) {
        if (h->level < level) return;
        if (event == SUBXACT_EVENT_COMMIT_SUB) {
            h->level = level - 1;
            return;
        }
        waited |= release_shared(h->key);
        Key k = h->key;
        hash_search(held, &k, HASH_REMOVE, nullptr);
        --nheld;
    });
    // Their waiters wake when the anchor goes. No new one is taken here (a
    // rollback must not raise): the waiters of keys still held wait on the
    // holder's transaction until this backend takes its next lock.
    if (waited) drop_anchor();
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
// Busy: the holder, and its anchor's generation (0: none); with `long_wait`
// the entry is marked waited for.
struct Holder {
    VirtualTransactionId owner;
    int32 procno;
    uint64 anchor;
};

Try try_take(const Key &k, uint32 hash, VirtualTransactionId me, uint8 tag, bool long_wait,
             Holder *busy, TransactionId *prepared_xid) {
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
        busy->owner = e->owner;
        busy->procno = e->procno;
        // Read under the partition's lock while the entry exists: the
        // holder took this generation before the entry and lets it go only
        // after the entry is gone (or after moving on to the next one).
        busy->anchor = anchors != nullptr && e->procno >= 0 && e->procno < nanchors
                           ? pg_atomic_read_u64(&anchors[e->procno].current)
                           : 0;
        if (long_wait) e->hw_wait = true;
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
    e->hw_wait = false;
    e->procno = compat::my_procno();
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
        int level = GetCurrentTransactionNestLevel();
        if (level > h->level) push_retake(k, level);
        return true;
    }
    restore_prepared();
    // Before the first entry: waiters need it from the moment one exists.
    take_anchor();
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
        Holder busy;
        SetInvalidVirtualTransactionId(busy.owner);
        busy.procno = -1;
        busy.anchor = 0;
        TransactionId prepared_xid = InvalidTransactionId;
        bool long_wait =
            sleeping && TimestampDifferenceExceeds(since, GetCurrentTimestamp(), kShortWaitMs);
        r = try_take(k, hash, me, tag, long_wait, &busy, &prepared_xid);
        if (r == Try::Taken || !wait) break;
        if (r == Try::BusyPrepared || long_wait) {
            if (sleeping) {
                ConditionVariableCancelSleep();
                stop_counting_wait();
                sleeping = false;
            }
        }
        if (r == Try::BusyPrepared) {
            // Wait for the prepared transaction: on its xid (which the
            // deadlock detector sees), or for a lock restored from 0.3.0,
            // through its heavyweight lock.
            if (TransactionIdIsValid(prepared_xid)) {
                XactLockTableWait(prepared_xid, nullptr, nullptr, XLTW_None);
                sweep_prepared();
            } else {
                LOCKTAG t;
                set_tag(&t, k);
                (void)LockAcquire(&t, ExclusiveLock, false, false);
                (void)LockRelease(&t, ExclusiveLock, false);
            }
            continue;
        }
        if (long_wait) {
            // A longer wait: on the holder's anchor, which PostgreSQL's
            // deadlock detector sees (after deadlock_timeout), and which
            // goes when the holder lets this key go. A holder without one
            // (it let a waited-for key go in a rollback to a savepoint and
            // took nothing since) is waited for to the end of its
            // transaction.
            if (busy.anchor != 0) {
                LOCKTAG t;
                anchor_tag(&t, busy.procno, busy.anchor);
                (void)LockAcquire(&t, ShareLock, false, false);
                (void)LockRelease(&t, ShareLock, false);
            } else {
                (void)VirtualXactLock(busy.owner, true);
            }
            continue;
        }
        if (!sleeping) {
            // Registered before looking again, so a release in between
            // wakes this sleep.
            ConditionVariablePrepareToSleep(&ctl->part[part].cv);
            pg_atomic_fetch_add_u32(&ctl->part[part].waiters, 1);
            waiting_part = (int)part;
            sleeping = true;
            since = GetCurrentTimestamp();
            continue;
        }
        (void)ConditionVariableTimedSleep(&ctl->part[part].cv, kShortWaitMs, PG_WAIT_EXTENSION);
        CHECK_FOR_INTERRUPTS();
    }
    if (sleeping) {
        ConditionVariableCancelSleep();
        stop_counting_wait();
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
    if (retakes != NIL) forget_retakes(k);
    if (release_shared(k)) move_anchor();
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

bool xact_locks_in_shmem() { return shash.htab != nullptr; }

void xact_locks_at_xact_end(XactEvent event) { on_xact(event, nullptr); }

void xact_locks_at_subxact_end(SubXactEvent event) { on_subxact(event, 0, 0, nullptr); }

int64 xact_locks_held() { return nheld; }

}  // namespace pgclaim::pg
