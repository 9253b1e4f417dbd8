// Shared-memory hash tables whose entries belong to open transactions, the
// shape of the in-flight tables (claim_slots, lease_grants) and of the rate
// table: pg_claim's shared hash (pg/shared_hash.hpp) under one LWLock, a
// size set by a GUC and a clear error when it is full; and per backend the
// records of what the current transaction added, each with the nesting
// level that added it, so that a subtransaction's rollback gives back
// exactly its own part (TxnRecords). Header-only.
#pragma once

#include "pg/shared_hash.hpp"

extern "C" {
#include "access/xact.h"
#include "storage/lwlock.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
}

namespace pgclaim::shmem {

// A table of in-flight state: unpartitioned (partitions 1), one lock
// (t.lock); pg::shared_hash_find and shared_hash_remove under it.
using TxnTable = pg::SharedHash;

// What this backend's current transaction added to a TxnTable: plain
// records (`Rec` has an `int level`, the nesting level that added it) in
// TopMemoryContext. Header-only (a template); the owner of the table calls
// drop_from and at_subxact_end from its at_xact_end and at_subxact_end
// (which the module's transaction callbacks call, src/module.cpp), with `give_back(const Rec &)` undoing one
// record's part of the table (called under t.lock; must not raise).
template <class Rec>
class TxnRecords {
public:
    int size() const { return n_; }
    Rec &operator[](int i) { return recs_[i]; }

    // Makes room for one more record (may raise): a caller that changes the
    // table first and adds after calls it before, so that add cannot fail.
    void reserve_one() {
        if (n_ < cap_) return;
        int cap = cap_ == 0 ? 8 : cap_ * 2;
        recs_ = recs_ == nullptr ? (Rec *)MemoryContextAlloc(TopMemoryContext, sizeof(Rec) * cap)
                                 : (Rec *)repalloc(recs_, sizeof(Rec) * cap);
        cap_ = cap;
    }
    // Appends `r` at the current nesting level; returns it.
    Rec *add(Rec r) {
        reserve_one();
        r.level = GetCurrentTransactionNestLevel();
        recs_[n_] = r;
        return &recs_[n_++];
    }
    // Removes record i (order is not kept).
    void remove(int i) { recs_[i] = recs_[--n_]; }

    // Gives back the records made at nesting level `level` or deeper (0:
    // all, at the end of the transaction).
    template <class F>
    void drop_from(TxnTable &t, int level, F give_back) {
        if (n_ == 0 || t.htab == nullptr) return;
        LWLockAcquire(t.lock, LW_EXCLUSIVE);
        int keep = 0;
        for (int i = 0; i < n_; ++i) {
            if (recs_[i].level >= level) give_back(recs_[i]);
            else recs_[keep++] = recs_[i];
        }
        LWLockRelease(t.lock);
        n_ = keep;
    }

    // A subtransaction that rolls back gives back its records; one that
    // commits hands them to its parent.
    template <class F>
    void at_subxact_end(TxnTable &t, SubXactEvent event, F give_back) {
        if (n_ == 0) return;
        int level = GetCurrentTransactionNestLevel();
        if (event == SUBXACT_EVENT_ABORT_SUB) drop_from(t, level, give_back);
        if (event == SUBXACT_EVENT_COMMIT_SUB)
            for (int i = 0; i < n_; ++i)
                if (recs_[i].level >= level) recs_[i].level = level - 1;
    }

private:
    Rec *recs_ = nullptr;
    int n_ = 0;
    int cap_ = 0;
};

}  // namespace pgclaim::shmem
