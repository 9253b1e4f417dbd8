// Server layer: the insides of pg_claim's lock table (xact_locks.hpp), shared
// by xact_locks.cpp (a backend's locks: taking, waiting, giving back, the
// transaction callbacks) and xact_locks_shared.cpp (the table in shared
// memory: its layout, the prepared transactions' chains, the restore after
// a restart). Not for other files.
#pragma once

#include "pg/shared_hash.hpp"
#include "pg/xact_locks.hpp"

extern "C" {
#include "port/atomics.h"
#include "storage/condition_variable.h"
#include "storage/lock.h"
#include "storage/lwlock.h"
}

namespace pgclaim::pg::xact_table {

constexpr int kPartitions = 128;  // a power of two (dynahash's rule)
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
    // Someone waits for it on the holder's anchor (below): its release
    // before the holder's transaction ends moves the anchor on.
    bool hw_wait;
    int32 procno;  // the holder's PGPROC number
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


// A holder's anchor: one heavyweight lock that a backend holds while its
// transaction holds entries of the table, for waiters to wait on where
// PostgreSQL's deadlock detector sees them. `current` is the generation held
// now (0: none), `gen` the last one taken; one slot per PGPROC. A holder that
// lets a waited-for key go before its transaction ends takes the next
// generation and lets the old one go, which wakes that key's waiters.
struct Anchor {
    pg_atomic_uint64 gen;
    pg_atomic_uint64 current;
};
extern Anchor *anchors;
extern int nanchors;
void anchor_tag(LOCKTAG *tag, int procno, uint64 gen);

// One LWLock per partition, and one more for the prepared transactions'
// chains and restore_prepared().
extern pg::SharedHash shash;
extern Control *ctl;

// The heavyweight lock of the same name (0.3.0's prepared locks, and the
// locks without the preload).
void set_tag(LOCKTAG *tag, const Key &k);
uint32 partition_of(uint32 hash);
LWLock *lock_of(uint32 part);
// The lock of the prepared transactions' chains (taken after partition
// locks are released, never while one is held).
LWLock *prep_lock();
// Caller holds the partition's lock. Removes the entry and counts it.
void remove_entry(const Key &k, uint32 hash);
// Wakes the waiters of a partition.
void wake(uint32 part);
// 53400 with its hint.
[[noreturn]] void table_full();

// Removes the entries of every prepared transaction that has ended, and
// wakes their waiters. Never raises.
void sweep_prepared();
// After a restart: the first caller enters what the prepared transactions
// of before hold (see xact_locks_shared.cpp).
void restore_prepared();
// Is the prepared transaction behind a restored entry `k` gone?
bool prepared_gone(const Key &k);

}  // namespace pgclaim::pg::xact_table
