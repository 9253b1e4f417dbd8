#!/usr/bin/python3
"""The fault soak's load, chaos and checker (driven by test/hardening/soak.sh).

Clients (one connection each, every one of them reconnects after losing it):
  producers   single enqueue, enqueue_many, and rows inserted into a table with
              a row-level claim.enqueue_trigger; each records what it enqueued
              (a unique key k) in soak_enqueued in the same transaction.
  workers     claim_next (some waiting) and group_claim; each records its
              effect in soak_effects in the same transaction as assert_token
              and complete. Now and then one stalls past its lease.
  lease       holders of two mutex leases protecting a fenced counter: in one
  holders     transaction lease_assert, then the counter's UPDATE, then a row
              in soak_fence with the token and the counter value. Now and then
              one stalls past its TTL before writing.
  once        callers of claim.once racing on the same keys; the caller that
              gets true writes soak_once_effects in the same transaction.
  rw holders  holders of one lease in shared (claim.lease_acquire_shared) or
              exclusive mode: in one transaction lease_assert, a counter's
              UPDATE (its value is the commit order) and a row in soak_rw with
              the token and the mode. Now and then one stalls past its TTL.
  electors    candidates of one election (claim.elect with a ttl), each new
              epoch recorded in soak_epochs with the time, in the same
              statement; a leader renews a few times, then resigns or lapses.
  watcher     follows claim.watch('soak/') from a revision, resuming after the
              last one it saw (also across lost connections and restarts).
  durable     a producer of three-step durable runs (soak_runs) and workers
              that run them with claim.step / step_done, each step's effect in
              soak_step_effects in the step's transaction; some runs sleep
              (claim.sleep_for) between steps 2 and 3, and some workers stall
              past the lease between steps (the next step_done must refuse).
  chaos       terminates random client backends, cancels running statements
              (waits first), and crash-restarts the server (immediate stop,
              start) several times.

After the run, producers stop, workers drain the queues, and the checker counts
(each must be 0): lost, duplicated, unexpected, out of order, fencing
violations, once violations, shared/exclusive violations (a write committed
under a token below an earlier exclusive write's, or an exclusive write below
any earlier write's: two exclusive holders, or a shared and an exclusive
holder, at once), epochs out of order (a later leader with a lower epoch),
watch gaps (a change under the prefix committed within the watched range and
never delivered, or delivered twice or out of order). It prints the faults injected and the stale
holders refused (PC001), which must not be 0 either: a soak in which no fault
hit proves nothing.

Lines starting with "ok: " or "FAILED: " are the checks; test/hardening/soak.sh counts them.
"""
import logging
import os
import random
import subprocess
import sys
import threading
import time
from collections import Counter

import psycopg
from psycopg.types.json import Jsonb

CONNINFO = os.environ["SOAK_CONNINFO"]
SECONDS = float(os.environ.get("SOAK_SECONDS", "60"))
DRAIN_SECONDS = float(os.environ.get("SOAK_DRAIN_SECONDS", "90"))
CRASHES = int(os.environ.get("SOAK_CRASHES", "-1"))
PGDATA = os.environ["SOAK_PGDATA"]
PGLOG = os.environ["SOAK_PGLOG"]
RUN_USER = os.environ.get("SOAK_USER", "pgclaim")
PG_BIN = os.environ.get("PG_BIN", "/usr/lib/postgresql/%s/bin" % os.environ.get("PG_MAJOR", "15"))
SEED = int(os.environ.get("SOAK_SEED", str(random.randrange(1 << 30))))
LEASE = "2 seconds"          # queue lease: a terminated worker's items return quickly
FENCE_TTL = 1.0              # lease TTL of the fenced counter's holders (seconds)
STALL_P = 0.03               # how often a worker or holder stalls past its lease
MAX_BACKLOG = int(os.environ.get("SOAK_BACKLOG", "2000"))  # producers pause above this

# psycopg warns about rollbacks it could not send on a lost connection: expected here
logging.getLogger("psycopg").setLevel(logging.ERROR)

if CRASHES < 0:
    CRASHES = 0 if SECONDS < 20 else max(2, min(10, int(SECONDS // 20)))

stats = Counter()
stats_lock = threading.Lock()
stop_load = threading.Event()      # producers, once callers and chaos stop
stop_all = threading.Event()       # everyone stops
server_down = threading.Event()    # chaos is restarting the server


def count(key, n=1):
    with stats_lock:
        stats[key] += n


def backlog():
    with stats_lock:
        return (stats["enqueued single"] + stats["enqueued batch"] + stats["enqueued trigger"]
                - stats["completed"])


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def connect(name):
    """A connection, retried until it works or everything stops."""
    delay = 0.05
    while True:
        try:
            return psycopg.connect(CONNINFO, autocommit=True, application_name=name,
                                   connect_timeout=3,
                                   options="-c statement_timeout=15s -c lock_timeout=10s")
        except psycopg.OperationalError:
            count("connect retries")
            if stop_all.is_set():
                raise
            time.sleep(delay)
            delay = min(delay * 2, 1.0)


class Client(threading.Thread):
    """A loop of steps on one connection; every error is counted by SQLSTATE,
    a lost connection is replaced."""

    stopper = stop_all

    def __init__(self, name):
        super().__init__(name=name, daemon=True)
        self.conn = None
        self.rng = random.Random(f"{SEED}-{name}")

    def run(self):
        while not self.stopper.is_set():
            try:
                if self.conn is None or self.conn.closed or self.conn.broken:
                    if self.conn is not None:
                        try:
                            self.conn.close()
                        except Exception:
                            pass
                    self.conn = connect(self.name)
                self.step(self.conn)
            except psycopg.Error as e:
                state = getattr(e, "sqlstate", None)
                broken = self.conn is None or self.conn.closed or self.conn.broken
                if state == "PC001":
                    count("stale refused: " + self.kind)
                elif broken:
                    count("connection lost")
                else:
                    count(f"error {state or type(e).__name__}")
                    if state not in ("57014", "40P01", "55P03", "40001"):
                        with stats_lock:
                            if stats[f"error {state}"] <= 3:
                                log(f"{self.name}: {state}: {str(e).strip()}")
                if broken:
                    time.sleep(0.05 if not server_down.is_set() else 0.3)
            except Exception as e:  # a bug in this script: say it, keep going
                count("script error")
                log(f"{self.name}: script error {type(e).__name__}: {e}")
                time.sleep(0.2)
        if self.conn is not None:
            try:
                self.conn.close()
            except Exception:
                pass


# --- producers ----------------------------------------------------------------

class Producer(Client):
    kind = "producer"
    stopper = stop_load

    def __init__(self, name, mode):
        super().__init__(name)
        self.mode = mode
        self.n = 0

    def group(self):
        # Each producer has groups of its own: the order checked is enqueue
        # order, which is item id order only when one producer feeds a group
        # (two producers racing into one group can commit in the other order
        # than their ids, and a group delivers what is committed).
        r = self.rng.random()
        return None if r < 0.3 else f"{self.name[10:]}:g{self.rng.randrange(6)}"

    def step(self, conn):
        # keep the backlog bounded, so the final drain is short
        while backlog() > MAX_BACKLOG and not stop_load.is_set():
            time.sleep(0.05)
        self.n += 1
        if self.mode == "single":
            k = f"{self.name}-{self.n}"
            g = self.group()
            with conn.transaction():
                item_id = conn.execute(
                    "SELECT claim.enqueue('soak_q', %s, group_key => %s::text)",
                    (Jsonb({"k": k}), g)).fetchone()[0]
                conn.execute("INSERT INTO soak_enqueued (k, item_id, queue, group_key, kind)"
                             " VALUES (%s, %s, 'soak_q', %s, 'single')", (k, item_id, g))
            count("enqueued single")
        elif self.mode == "batch":
            size = self.rng.randrange(1, 20)
            ks = [f"{self.name}-{self.n}-{i}" for i in range(size)]
            gs = [self.group() for _ in range(size)]
            with conn.transaction():
                ids = [r[0] for r in conn.execute(
                    "SELECT claim.enqueue_many('soak_q', %s::jsonb[], %s::text[])",
                    ([Jsonb({"k": k}) for k in ks], gs)).fetchall()]
                if len(ids) != size:
                    raise RuntimeError(f"enqueue_many returned {len(ids)} ids for {size}")
                with conn.cursor() as cur:
                    cur.executemany("INSERT INTO soak_enqueued (k, item_id, queue, group_key, kind)"
                                    " VALUES (%s, %s, 'soak_q', %s, 'batch')",
                                    list(zip(ks, ids, gs)))
            count("enqueued batch", size)
        else:  # trigger-fed: the row insert enqueues through claim.enqueue_trigger
            size = self.rng.randrange(1, 5)
            ks = [f"{self.name}-{self.n}-{i}" for i in range(size)]
            gs = [f"t{self.rng.randrange(6)}" if self.rng.random() < 0.8 else None for _ in range(size)]
            with conn.transaction():
                with conn.cursor() as cur:
                    cur.executemany("INSERT INTO soak_orders (k, grp) VALUES (%s, %s)", list(zip(ks, gs)))
                    cur.executemany("INSERT INTO soak_enqueued (k, item_id, queue, group_key, kind)"
                                    " VALUES (%s, NULL, 'soak_trig', %s, 'trigger')", list(zip(ks, gs)))
            count("enqueued trigger", size)
        time.sleep(self.rng.uniform(0.0, 0.01))


# --- workers ------------------------------------------------------------------

def item_key(payload):
    if "k" in payload:
        return payload["k"]
    new = payload.get("new") or {}
    return new.get("k")


class Worker(Client):
    kind = "worker"

    def __init__(self, name, mode, queues):
        super().__init__(name)
        self.mode = mode
        self.queues = queues

    def step(self, conn):
        queue = self.rng.choice(self.queues)
        wait = "0.5 seconds" if self.rng.random() < 0.5 else "0"
        if self.mode == "claim_next":
            n = self.rng.choice([1, 1, 1, 4, 16])
            rows = conn.execute(
                "SELECT id, token, group_key, payload FROM claim.claim_next(%s, %s, lease => %s::interval,"
                " wait => %s::interval, worker => %s)", (queue, n, LEASE, wait, self.name)).fetchall()
        else:
            rows = conn.execute(
                "SELECT id, token, group_key, payload FROM claim.group_claim(%s, %s, lease => %s::interval,"
                " wait => %s::interval, worker => %s)",
                (queue, self.rng.choice([1, 5, 50]), LEASE, wait, self.name)).fetchall()
        if not rows:
            count("empty claims")
            if stop_load.is_set():
                time.sleep(0.05)
            return
        count("claimed", len(rows))
        stalled = False
        if self.rng.random() < STALL_P and not stop_load.is_set():
            count("stalls")
            stalled = True
            time.sleep(2.3)          # past the 2 s lease: assert_token must refuse
        tokens = sorted({r[1] for r in rows})
        with conn.transaction():
            for t in tokens:
                conn.execute("SELECT claim.assert_token(%s::bigint)", (t,))
            with conn.cursor() as cur:
                cur.executemany(
                    "INSERT INTO soak_effects (item_id, k, queue, group_key, token, worker)"
                    " VALUES (%s, %s, %s, %s, %s, %s)",
                    [(r[0], item_key(r[3]), queue, r[2], r[1], self.name) for r in rows])
            done = conn.execute("SELECT claim.complete_many(%s::bigint[])", (tokens,)).fetchone()[0]
            if done != len(rows):
                raise RuntimeError(f"complete of {tokens} finished {done} items, expected {len(rows)}")
        count("completed", len(rows))
        if stalled:
            count("stale committed")   # the lease had run out: this commit must not happen


# --- fenced writes under a lease ---------------------------------------------

def acquire(client, conn, fn, name, label):
    """claim.<fn> (lease_acquire or lease_acquire_shared) of lease `name` for FENCE_TTL,
    waiting at most 0.3 s: the token, or None when the lease stayed busy. Counts
    "<label> busy" or "<label> granted"."""
    token = conn.execute(
        f"SELECT claim.{fn}(%s, %s::interval, holder => %s, wait => '0.3 seconds')",
        (name, f"{FENCE_TTL} seconds", client.name)).fetchone()[0]
    count(label + (" busy" if token is None else " granted"))
    return token


def fenced_writes(client, conn, name, token, counter, pause, record):
    """One to three writes under lease `name` held with `token`: each in one transaction
    lease_assert, the counter's UPDATE (its value is the commit order) and the row that
    record(value) returns as (sql, args). Now and then one stalls past the TTL first (then
    lease_assert must refuse). Releases the lease at the end four times out of five."""
    for _ in range(client.rng.randrange(1, 4)):
        stalled = client.rng.random() < STALL_P * 2
        if stalled:
            count("stalls")
            time.sleep(FENCE_TTL + 0.3)   # the TTL runs out: lease_assert must refuse
        with conn.transaction():
            conn.execute("SELECT claim.lease_assert(%s, %s::bigint)", (name, token))
            value = conn.execute("UPDATE soak_counter SET value = value + 1 WHERE name = %s"
                                 " RETURNING value", (name,)).fetchone()[0]
            conn.execute(*record(value))
        count(counter)
        if stalled:
            count("stale committed")
        time.sleep(client.rng.uniform(0, pause))
    if client.rng.random() < 0.8:
        conn.execute("SELECT claim.lease_release(%s, %s::bigint)", (name, token))


# --- lease holders: a fenced counter -----------------------------------------

class LeaseHolder(Client):
    kind = "lease"

    def step(self, conn):
        name = self.rng.choice(["fence:a", "fence:b"])
        token = acquire(self, conn, "lease_acquire", name, "lease")
        if token is None:
            return
        fenced_writes(self, conn, name, token, "fenced writes", 0.02,
                      lambda value: ("INSERT INTO soak_fence (name, value, token, holder) VALUES (%s, %s, %s, %s)",
                                     (name, value, token, self.name)))


# --- shared and exclusive holders of one lease -------------------------------

class RWHolder(Client):
    kind = "lease"

    def step(self, conn):
        name = "rw:c"
        shared = self.rng.random() < 0.7
        fn = "lease_acquire_shared" if shared else "lease_acquire"
        token = acquire(self, conn, fn, name, "rw " + ("shared" if shared else "exclusive"))
        if token is None:
            return
        if shared and conn.execute("SELECT count(*) FROM claim.leases WHERE name = %s",
                                   (name,)).fetchone()[0] > 1:
            count("rw shared together")
        fenced_writes(self, conn, name, token, "rw writes", 0.05,
                      lambda value: ("INSERT INTO soak_rw (value, token, shared, holder) VALUES (%s, %s, %s, %s)",
                                     (value, token, shared, self.name)))


# --- leader election and the watch ---------------------------------------------

class Elector(Client):
    kind = "leader"
    stopper = stop_load

    def step(self, conn):
        row = conn.execute(
            "WITH e AS (SELECT claim.elect('soak/leader', '1 second', NULL, %s, '0.5 seconds') AS epoch)"
            " INSERT INTO soak_epochs (epoch, holder, at) SELECT epoch, %s, clock_timestamp() FROM e"
            " WHERE epoch IS NOT NULL RETURNING epoch", (self.name, self.name)).fetchone()
        if row is None:
            count("elect refused")
            return
        epoch = row[0]
        count("elected")
        for _ in range(self.rng.randrange(0, 3)):   # renew: the same epoch
            time.sleep(self.rng.uniform(0.1, 0.4))
            conn.execute("SELECT claim.elect('soak/leader', '1 second', NULL, %s)", (self.name,))
        if self.rng.random() < 0.6:
            conn.execute("SELECT claim.resign('soak/leader', %s)", (epoch,))
        else:
            time.sleep(1.1)   # the ttl lapses; the worker records the expiry


class Watcher(Client):
    kind = "watch"

    def __init__(self, name):
        super().__init__(name)
        self.first = None      # the revision it started after
        self.after = None      # the last revision it saw
        self.seen = []

    def step(self, conn):
        if self.first is None:
            self.first = self.after = conn.execute("SELECT claim.revision()").fetchone()[0]
        for (rev,) in conn.execute("SELECT revision FROM claim.watch('soak/', %s, '1 second')",
                                   (self.after,)).fetchall():
            self.seen.append(rev)
            self.after = rev
        count("watch calls")


# --- once guards ---------------------------------------------------------------

class GiveUp(Exception):
    """Raised inside a transaction block to roll it back on purpose."""


class OnceCaller(Client):
    kind = "once"
    stopper = stop_load

    def step(self, conn):
        # keys move on over time, so many keys are raced for by every caller
        base = int(time.monotonic() * 4)
        key = f"soak-once:{base + self.rng.randrange(3)}"
        try:
            with conn.transaction():
                got = conn.execute("SELECT claim.once(%s)", (key,)).fetchone()[0]
                if got:
                    conn.execute("INSERT INTO soak_once_effects (key, who) VALUES (%s, %s)", (key, self.name))
                    if self.rng.random() < 0.1:
                        raise GiveUp()   # the block rolls back: the key is free again
                    count("once taken")
                else:
                    count("once refused")
        except GiveUp:
            count("once rolled back")
        time.sleep(self.rng.uniform(0, 0.01))


# --- durable runs (docs/steps.md) ---------------------------------------------------

class DurableProducer(Client):
    kind = "producer"
    stopper = stop_load

    def step(self, conn):
        while backlog() > MAX_BACKLOG and not stop_load.is_set():
            time.sleep(0.05)
        with conn.transaction():
            item_id = conn.execute("SELECT claim.enqueue('soak_durable')").fetchone()[0]
            conn.execute("INSERT INTO soak_runs (item_id) VALUES (%s)", (item_id,))
        count("enqueued durable")
        time.sleep(self.rng.uniform(0.0, 0.02))


class DurableWorker(Client):
    kind = "durable"

    def step(self, conn):
        rows = conn.execute(
            "SELECT id, token FROM claim.claim_next('soak_durable', 1, lease => %s::interval,"
            " wait => '0.5 seconds', worker => %s)", (LEASE, self.name)).fetchall()
        if not rows:
            count("empty claims")
            return
        item_id, token = rows[0]
        stalled = False
        for n in (1, 2, 3):
            if n == 3:
                # Some runs sleep once between steps 2 and 3 (the nap is a step).
                with conn.transaction():
                    napped = conn.execute("SELECT claim.step(%s::bigint, 'nap') IS NOT NULL",
                                          (token,)).fetchone()[0]
                    if not napped and self.rng.random() < 0.2:
                        conn.execute("SELECT claim.step_done(%s::bigint, 'nap')", (token,))
                        conn.execute("SELECT claim.sleep_for(%s::bigint, '0.2 seconds')", (token,))
                        count("durable sleeps")
                        return
            if self.rng.random() < STALL_P and not stop_load.is_set():
                count("stalls")
                stalled = True
                time.sleep(2.3)      # past the 2 s lease: step / step_done must refuse
            with conn.transaction():
                done = conn.execute("SELECT claim.step(%s::bigint, %s) IS NOT NULL",
                                    (token, f"s{n}")).fetchone()[0]
                if not done:
                    conn.execute("INSERT INTO soak_step_effects (item_id, step, token)"
                                 " VALUES (%s, %s, %s)", (item_id, n, token))
                    conn.execute("SELECT claim.step_done(%s::bigint, %s, to_jsonb(%s::int))",
                                 (token, f"s{n}", n))
                    count("durable steps")
            if stalled:
                count("stale committed")   # the lease had run out: this commit must not happen
                stalled = False
        with conn.transaction():
            conn.execute("SELECT claim.assert_token(%s::bigint)", (token,))
            conn.execute("INSERT INTO soak_runs_done (item_id) VALUES (%s)", (item_id,))
            conn.execute("SELECT claim.complete(%s::bigint)", (token,))
        count("durable runs completed")


# --- chaos ---------------------------------------------------------------------

def pg_ctl(*args):
    return subprocess.run(["runuser", "-u", RUN_USER, "--", f"{PG_BIN}/pg_ctl", "-D", PGDATA, *args],
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


class Chaos(Client):
    kind = "chaos"
    stopper = stop_load

    def __init__(self, name):
        super().__init__(name)
        self.t0 = time.monotonic()
        # crash times spread over the run, away from its ends
        self.crash_at = sorted(self.t0 + SECONDS * (i + 1) / (CRASHES + 1) + self.rng.uniform(-1, 1)
                               for i in range(CRASHES))

    def crash_restart(self):
        if self.conn is not None:
            try:
                self.conn.close()
            except Exception:
                pass
            self.conn = None
        server_down.set()
        log("chaos: immediate stop (crash), then start")
        r = pg_ctl("-w", "stop", "-m", "immediate")
        if r.returncode != 0:
            log(f"chaos: immediate stop failed: {r.stderr.strip()}")
        time.sleep(self.rng.uniform(0.1, 1.0))
        for _ in range(5):
            r = pg_ctl("-w", "-t", "120", "-l", PGLOG, "start")
            if r.returncode == 0:
                break
            log(f"chaos: start failed: {r.stderr.strip()}")
            time.sleep(1)
        server_down.clear()
        count("fault: crash-restart")

    def step(self, conn):
        time.sleep(self.rng.uniform(0.1, 0.5))
        if self.crash_at and time.monotonic() >= self.crash_at[0]:
            self.crash_at.pop(0)
            self.crash_restart()
            return
        if self.rng.random() < 0.5:
            # terminate a random client backend, in whatever it is doing
            r = conn.execute(
                "SELECT pid, application_name, pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE application_name LIKE 'soak-%%' AND application_name <> 'soak-chaos'"
                " AND pid <> pg_backend_pid() ORDER BY random() LIMIT 1").fetchone()
            if r and r[2]:
                count("fault: backend terminated")
        else:
            # cancel a running statement; a waiting claim or lease_acquire if there is one
            r = conn.execute(
                "SELECT pid, pg_cancel_backend(pid) FROM pg_stat_activity"
                " WHERE application_name LIKE 'soak-%%' AND application_name <> 'soak-chaos'"
                " AND state = 'active' AND pid <> pg_backend_pid()"
                " ORDER BY (wait_event_type IS NOT NULL AND query ~ 'wait') DESC, random() LIMIT 1").fetchone()
            if r and r[1]:
                count("fault: statement cancelled")


# --- the run -------------------------------------------------------------------

def sql(query, params=None):
    with connect("soak-checker") as c:
        return c.execute(query, params).fetchall()


def one(query, params=None):
    """The first column of the query's first row."""
    return sql(query, params)[0][0]


def copies(table, by):
    """The rows of table beyond the first of each group of the same values in the columns by
    (0 when no two rows agree)."""
    return one(f"SELECT coalesce(sum(n - 1), 0) FROM (SELECT count(*) AS n FROM {table}"
               f" GROUP BY {by} HAVING count(*) > 1) d")


def missing(rows, match):
    """How many of rows have no row in match (a FROM ... WHERE that may name rows' alias)."""
    return one(f"SELECT count(*) FROM {rows} WHERE NOT EXISTS (SELECT FROM {match})")


def remaining():
    return sql("SELECT count(*) FILTER (WHERE i.state = 'r'), count(*) FILTER (WHERE i.state = 'd')"
               " FROM claim.items i JOIN claim.queues q USING (queue_id)"
               " WHERE q.name IN ('soak_q', 'soak_trig', 'soak_durable')")[0]


def main():
    log(f"soak: {SECONDS:.0f}s of load and faults ({CRASHES} crash-restarts), seed {SEED}")
    producers = [Producer("soak-prod-single-1", "single"), Producer("soak-prod-single-2", "single"),
                 Producer("soak-prod-batch", "batch"), Producer("soak-prod-trigger", "trigger")]
    workers = [Worker("soak-work-next-1", "claim_next", ["soak_q", "soak_trig"]),
               Worker("soak-work-next-2", "claim_next", ["soak_q", "soak_trig"]),
               Worker("soak-work-next-3", "claim_next", ["soak_q"]),
               Worker("soak-work-group-1", "group_claim", ["soak_q", "soak_trig"]),
               Worker("soak-work-group-2", "group_claim", ["soak_trig", "soak_q"])]
    holders = [LeaseHolder(f"soak-lease-{i}") for i in range(1, 4)]
    oncers = [OnceCaller(f"soak-once-{i}") for i in range(1, 4)]
    holders += [RWHolder(f"soak-rw-{i}") for i in range(1, 4)]
    electors = [Elector(f"soak-elect-{i}") for i in range(1, 3)]
    watcher = Watcher("soak-watch")
    producers.append(DurableProducer("soak-prod-durable"))
    workers += [DurableWorker(f"soak-durable-{i}") for i in range(1, 3)]
    chaos = Chaos("soak-chaos")
    everyone = producers + workers + holders + oncers + electors + [watcher, chaos]
    t0 = time.monotonic()
    for t in everyone:
        t.start()
    next_report = t0 + 10
    while time.monotonic() - t0 < SECONDS:
        time.sleep(0.5)
        if time.monotonic() >= next_report:
            next_report += 10
            with stats_lock:
                log("progress: " + ", ".join(f"{k} {v}" for k, v in sorted(stats.items())
                                              if k.startswith(("enqueued", "completed", "fault", "stale"))))
    log("load and faults stop; draining")
    stop_load.set()
    for t in producers + oncers + electors + [chaos]:
        t.join(30)
    drained = False
    deadline = time.monotonic() + DRAIN_SECONDS
    while time.monotonic() < deadline:
        try:
            ready, dead = remaining()
        except psycopg.Error:
            time.sleep(1)
            continue
        if ready == 0:
            drained = True
            break
        time.sleep(0.5)
    stop_all.set()
    for t in workers + holders + [watcher]:
        t.join(30)
    log(f"drained: {drained} after {time.monotonic() - t0 - SECONDS:.1f}s")

    # --- the checks ---------------------------------------------------------------
    failed = 0

    def check(name, value, must_be_zero=True):
        nonlocal failed
        ok = (value == 0) if must_be_zero else (value > 0)
        print(f"{'ok' if ok else 'FAILED'}: {name}: {value}", flush=True)
        if not ok:
            failed += 1

    ready, dead = remaining()
    for row in sql(
            "SELECT s.queue, s.group_key, s.prev, s.item_id, s.seq, e.kind FROM (SELECT *, lag(item_id) OVER"
            " (PARTITION BY queue, group_key ORDER BY seq) AS prev FROM soak_effects WHERE group_key IS NOT NULL) s"
            " LEFT JOIN soak_enqueued e USING (k) WHERE s.prev > s.item_id LIMIT 10"):
        print(f"out of order: queue {row[0]} group {row[1]}: item {row[3]} after {row[2]} (effect {row[4]}, {row[5]})")
    (enqueued, effects, distinct_effects) = sql(
        "SELECT (SELECT count(*) FROM soak_enqueued), count(*), count(DISTINCT k) FROM soak_effects")[0]
    by_kind = dict(sql("SELECT kind, count(*) FROM soak_enqueued GROUP BY kind"))
    trig_rows = one("SELECT count(*) FROM soak_orders")
    lost = missing("soak_enqueued e", "soak_effects f WHERE f.k = e.k")
    duplicated = copies("soak_effects", "k")
    dup_items = copies("soak_effects", "item_id")
    unexpected = one("SELECT count(*) FROM soak_effects f WHERE f.k IS NULL OR NOT EXISTS"
                     " (SELECT FROM soak_enqueued e WHERE e.k = f.k)")
    # recorded item ids must match the items that were delivered for those keys
    wrong_id = one("SELECT count(*) FROM soak_effects f JOIN soak_enqueued e USING (k)"
                   " WHERE e.item_id IS NOT NULL AND e.item_id <> f.item_id")
    # within a group, effects commit in enqueue (item id) order
    out_of_order = sql(
        "SELECT count(*) FROM (SELECT item_id, lag(item_id) OVER w AS prev FROM soak_effects"
        " WHERE group_key IS NOT NULL WINDOW w AS (PARTITION BY queue, group_key ORDER BY seq)) s"
        " WHERE prev > item_id")[0][0]
    # a write committed under a token lower than an earlier committed write's token
    fencing = sql(
        "SELECT count(*) FROM (SELECT token, max(token) OVER (PARTITION BY name ORDER BY value"
        " ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS before FROM soak_fence) s"
        " WHERE token < before")[0][0]
    counter_gaps = sql(
        "SELECT count(*) FROM soak_counter c WHERE c.name LIKE 'fence:%%' AND c.value <>"
        " (SELECT count(*) FROM soak_fence f WHERE f.name = c.name)")[0][0]
    fenced = one("SELECT count(*) FROM soak_fence")
    once_dup = copies("soak_once_effects", "key")
    once_unmatched = sql(
        "SELECT count(*) FROM (SELECT key FROM claim.once_keys WHERE key LIKE 'soak-once:%%'"
        " EXCEPT SELECT key FROM soak_once_effects) d")[0][0] + sql(
        "SELECT count(*) FROM (SELECT key FROM soak_once_effects EXCEPT"
        " SELECT key FROM claim.once_keys) d")[0][0]
    once_effects = one("SELECT count(*) FROM soak_once_effects")
    # shared and exclusive: in commit order, no write under a token below an
    # earlier exclusive write's, no exclusive write below any earlier write's
    rw_violations = sql(
        "SELECT count(*) FROM (SELECT shared, token,"
        " max(token) FILTER (WHERE NOT shared) OVER w AS excl_before, max(token) OVER w AS any_before"
        " FROM soak_rw WINDOW w AS (ORDER BY value ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)) s"
        " WHERE token < excl_before OR (NOT shared AND token < any_before)")[0][0]
    rw_counter_gaps = sql("SELECT (SELECT value FROM soak_counter WHERE name = 'rw:c')"
                          " - (SELECT count(*) FROM soak_rw)")[0][0]
    rw_writes = sql("SELECT count(*) FILTER (WHERE shared), count(*) FILTER (WHERE NOT shared)"
                    " FROM soak_rw")[0]
    # epochs: a leader elected later never has a lower epoch
    epochs_out_of_order = sql(
        "SELECT count(*) FROM (SELECT at, lag(at) OVER (ORDER BY epoch) AS prev_at FROM"
        " (SELECT epoch, min(at) AS at FROM soak_epochs GROUP BY epoch) e) s WHERE prev_at > at")[0][0]
    epochs = one("SELECT count(DISTINCT epoch) FROM soak_epochs")
    # the watch: every change under the prefix committed in the watched range
    # was delivered, once, in order
    watch_gaps = 0
    if watcher.first is not None:
        logged = [r[0] for r in sql(
            "SELECT revision FROM claim.coord_changes WHERE name LIKE 'soak/%%'"
            " AND revision > %s AND revision <= %s ORDER BY revision", (watcher.first, watcher.after))]
        watch_gaps = len(set(logged) - set(watcher.seen)) + len(set(watcher.seen) - set(logged))
        watch_gaps += sum(1 for a, b in zip(watcher.seen, watcher.seen[1:]) if b <= a)
    # durable runs: no step ran twice, no run lost, no run completed without its steps
    steps_twice = copies("soak_step_effects", "item_id, step")
    runs_lost = missing("soak_runs r", "soak_runs_done d WHERE d.item_id = r.item_id")
    runs_twice = copies("soak_runs_done", "item_id")
    runs_short = one("SELECT count(*) FROM soak_runs_done d WHERE (SELECT count(DISTINCT step)"
                     " FROM soak_step_effects e WHERE e.item_id = d.item_id) <> 3")
    runs_done = one("SELECT count(*) FROM soak_runs_done")

    print(f"enqueued: {enqueued} (single {by_kind.get('single', 0)}, batch {by_kind.get('batch', 0)},"
          f" trigger {by_kind.get('trigger', 0)} from {trig_rows} rows); effects: {effects}"
          f" ({distinct_effects} distinct); left ready: {ready}; dead: {dead}")
    print(f"fenced writes: {fenced}; once effects: {once_effects}; durable runs completed: {runs_done}")
    print(f"shared/exclusive writes: {rw_writes[0]} shared, {rw_writes[1]} exclusive"
          f" (shared grants while another shared holder held: {stats.get('rw shared together', 0)});"
          f" epochs: {epochs}; watch: {len(watcher.seen)} changes delivered")
    with stats_lock:
        s = dict(stats)
    stale_claims = s.get("stale refused: worker", 0) + s.get("stale refused: durable", 0)
    stale_leases = s.get("stale refused: lease", 0)
    faults = {k[len('fault: '):]: v for k, v in s.items() if k.startswith("fault: ")}
    print(f"stale holders refused (PC001): {stale_claims + stale_leases}"
          f" (claims {stale_claims}, leases {stale_leases}); stalls {s.get('stalls', 0)}")
    print("faults injected: " + ", ".join(f"{k} {v}" for k, v in sorted(faults.items()))
          + f"; connections lost by clients {s.get('connection lost', 0)}")
    print("errors seen by clients: " + (", ".join(f"{k[6:]} {v}" for k, v in sorted(s.items())
                                                  if k.startswith("error ")) or "none"))
    print("Jepsen-style counts (each must be 0):")
    check("lost", lost)
    check("duplicated", duplicated + dup_items)
    check("unexpected", unexpected + wrong_id)
    check("out of order", out_of_order)
    # a holder that stalled past its lease or TTL and still committed
    check("fencing violations", fencing + counter_gaps + s.get("stale committed", 0))
    check("once violations", once_dup + once_unmatched)
    check("shared/exclusive violations", rw_violations + rw_counter_gaps)
    check("epochs out of order", epochs_out_of_order)
    check("watch gaps", watch_gaps)
    check("durable steps run twice", steps_twice)
    check("durable runs lost", runs_lost)
    check("durable runs completed twice or without their steps", runs_twice + runs_short)
    check("dead items", dead)
    check("script errors", s.get("script error", 0))
    print("the faults bit (each must be above 0):")
    check("items enqueued", enqueued, must_be_zero=False)
    check("fenced writes", fenced, must_be_zero=False)
    check("durable runs completed", runs_done, must_be_zero=False)
    check("shared writes", rw_writes[0], must_be_zero=False)
    check("exclusive writes", rw_writes[1], must_be_zero=False)
    check("epochs", epochs, must_be_zero=False)
    check("watch changes delivered", len(watcher.seen), must_be_zero=False)
    check("stale holders refused", stale_claims + stale_leases, must_be_zero=False)
    check("backends terminated", faults.get("backend terminated", 0), must_be_zero=False)
    check("statements cancelled", faults.get("statement cancelled", 0), must_be_zero=False)
    if CRASHES > 0:
        check("crash-restarts", faults.get("crash-restart", 0), must_be_zero=False)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
