// Server layer: pg_claim's lock table in shared memory; see
// xact_locks_shared.hpp and xact_locks.hpp.
#include "pg/xact_locks_shared.hpp"

extern "C" {
#include "access/twophase.h"
#include "access/transam.h"
#include "miscadmin.h"
#include "storage/lmgr.h"
#include "storage/proc.h"
#include "storage/procarray.h"
#include "storage/shmem.h"
#include "utils/hsearch.h"
}

namespace pgclaim::pg {

int guc_max_xact_locks = 65536;

namespace xact_table {

pg::SharedHash shash = {"pg_claim xact locks", "transaction locks", "pg_claim.max_xact_locks",
                        sizeof(Key), sizeof(Entry), &guc_max_xact_locks, kPartitions, 1,
                        nullptr, nullptr, nullptr};
Control *ctl = nullptr;
Anchor *anchors = nullptr;
int nanchors = 0;

// The advisory space of anchors: field4 apart from the keys' spaces.
constexpr uint16 kAnchorSpace = 0x5041;

void anchor_tag(LOCKTAG *tag, int procno, uint64 gen) {
    SET_LOCKTAG_ADVISORY(*tag, (uint32)procno, (uint32)(gen >> 32), (uint32)gen, kAnchorSpace);
}

void set_tag(LOCKTAG *tag, const Key &k) {
    SET_LOCKTAG_ADVISORY(*tag, k.db, (uint32)(k.key >> 32), (uint32)k.key, k.space);
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

// The lock taken by restore_prepared() and by the changes to the chains of
// prepared transactions (after the partitions' locks: never the other way).
LWLock *prep_lock() { return lock_of(kPartitions); }

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

}  // namespace xact_table

using namespace xact_table;

namespace {
Size control_size() {
    return add_size(offsetof(Control, prep), mul_size(sizeof(Prep), Max(max_prepared_xacts, 0)));
}
// Every PGPROC may hold entries (a prepared transaction's dummy one holds
// an anchor, never takes one).
int anchor_count() { return MaxBackends + NUM_AUXILIARY_PROCS + Max(max_prepared_xacts, 0); }
Size anchors_size() { return mul_size(sizeof(Anchor), anchor_count()); }
}  // namespace

Size xact_locks_shmem_size() {
    Size s = add_size(MAXALIGN(control_size()), MAXALIGN(anchors_size()));
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
    nanchors = anchor_count();
    anchors = (Anchor *)ShmemInitStruct("pg_claim xact lock anchors", anchors_size(), &found);
    if (!found)
        for (int i = 0; i < nanchors; ++i) {
            pg_atomic_init_u64(&anchors[i].gen, 0);
            pg_atomic_init_u64(&anchors[i].current, 0);
        }
    pg::shared_hash_init(shash);
}

bool xact_locks_prepared_unknown() {
    if (ctl == nullptr) return false;
    restore_prepared();
    return pg_atomic_read_u32(&ctl->nunknown) > 0;
}


int64 xact_locks_in_use() { return ctl == nullptr ? 0 : (int64)pg_atomic_read_u64(&ctl->used); }

}  // namespace pgclaim::pg
