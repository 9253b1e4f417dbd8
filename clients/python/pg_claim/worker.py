"""The synchronous worker: claim with a server-side wait, run up to
``concurrency`` handlers at once in threads, heartbeat their leases, complete
or fail them, and stop cleanly on SIGTERM/SIGINT.

Each slot owns one connection and one thread and claims for itself, so a
slot's loop is the hand-written loop (claim, handle, complete) with the
worker's extras around it. When the server's ``claim_next`` takes ``done``,
a slot that finished a job with no result completes it inside its next claim:
one round trip per job.
"""
from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict
from psycopg.types.json import Jsonb

from ._common import Interval, Job, Retry, WorkerStats, sum_stats, to_interval
from ._features import FEATURES_SQL, Features
from .errors import is_fatal, map_error

log = logging.getLogger("pg_claim.worker")

Handler = Callable[[Job], Any]

# What a claim returns per job: the item's columns a handler uses, nothing
# more (every column costs output on the server and a pure-Python loader in
# psycopg). The lease's length comes with a claim only when the worker does
# not know it: its lease is the queue's default, read again every
# LEASE_RECHECK seconds in case the queue was altered.
_COLUMNS = "id, token, payload, group_key, attempt"
_MEASURE = ", pg_catalog.date_part('epoch', lease_until - pg_catalog.clock_timestamp())"
LEASE_RECHECK = 30.0


class ClaimSQL:
    """The claim statements of a worker, their constant arguments written in
    as literals (nothing to adapt per job): ``plain`` waits; ``done``
    completes earlier tokens (``%s``) and does not wait. ``measure`` holds
    the same two that also return the lease's length."""

    def __init__(self, ctx: Any, queue: str, lease: Any, wait: Any, name: Optional[str],
                 measure: bool = False) -> None:
        def lit(v: Any) -> str:
            return sql.Literal(v).as_string(ctx)

        cols = _COLUMNS + (_MEASURE if measure else "")
        head = f"SELECT {cols} FROM claim.claim_next({lit(queue)}, 1, {lit(lease)}::interval, "
        tail = f"::interval, {lit(name)}"
        self.plain = f"{head}{lit(wait)}{tail})"
        self.done = f"{head}'0'{tail}".replace("%", "%%") + ", done => %s::bigint[])"
        self.measure: Optional[ClaimSQL] = (
            None if measure else ClaimSQL(ctx, queue, lease, wait, name, measure=True))


LEASE_SECONDS_SQL = "SELECT pg_catalog.date_part('epoch', %s::interval)"
COMPLETE_SQL = "SELECT claim.complete(%s::bigint)"
COMPLETE_RESULT_SQL = "SELECT claim.complete(%s::bigint, %s::jsonb)"
COMPLETE_MANY_SQL = "SELECT claim.complete_many(%s::bigint[], true)"
FAIL_SQL = "SELECT claim.fail(%s::bigint, %s, %s::interval)"
EXTEND_SQL = "SELECT claim.extend(%s::bigint, %s::interval)"
RELEASE_SQL = "SELECT claim.release(%s::bigint)"
ASSERT_SQL = "SELECT claim.assert_token(%s::bigint)"

STALE = "PC001"
CANCELED = "57014"
# Errors no retry can fix, wherever they come from: the worker stops and
# run() raises them (mapped). Unknown queue, no privilege, no such function
# or schema (extension missing). A claim statement's errors are judged by
# errors.is_fatal, which adds the classes of a bad argument.
FATAL = frozenset({"42704", "42501", "42883", "3F000"})
# Backoff of a slot after an error that a retry may fix (seconds).
BACKOFF_FIRST = 0.5
BACKOFF_MAX = 30.0


def default_conninfo(conninfo: Optional[str] = None) -> str:
    """The connection string to use: the one given, else $PG_CLAIM_DSN, else
    "" (libpq's PG* environment variables and defaults)."""
    if conninfo:
        return conninfo
    return os.environ.get("PG_CLAIM_DSN", "")


def default_worker_name() -> str:
    """host:pid, recorded as the claims' worker unless a name is given."""
    return f"{socket.gethostname()}:{os.getpid()}"


class _Fatal(Exception):
    """A claim statement's error that no retry can fix."""

    def __init__(self, exc: BaseException) -> None:
        super().__init__(str(exc))
        self.exc = exc


def connect_kwargs_for(conninfo: str, given: Dict[str, Any], prepare: bool,
                       label: str) -> Dict[str, Any]:
    """psycopg.connect arguments: statements unprepared unless asked (see
    README, PgBouncer), and an application_name unless the caller set one."""
    kwargs = dict(given)
    kwargs.setdefault("prepare_threshold", 5 if prepare else None)
    if "application_name" not in kwargs:
        try:
            named = "application_name" in conninfo_to_dict(conninfo)
        except psycopg.Error:
            named = False
        if not named:
            kwargs["application_name"] = f"pg_claim worker {label}"[:63]
    return kwargs


def _sqlstate(exc: BaseException) -> Optional[str]:
    return getattr(exc, "sqlstate", None)


def _error_text(exc: BaseException) -> str:
    if isinstance(exc, psycopg.Error) and exc.diag.message_primary:
        return exc.diag.message_primary
    text = str(exc).strip()
    return text if text else type(exc).__name__


def log_failure(label: str, job: Job, exc: BaseException) -> None:
    """A handler's failure: one WARNING line (the traceback at DEBUG)."""
    text = str(exc).strip()
    what = type(exc).__name__ + (": " + text.splitlines()[0] if text else "")
    log.warning("worker %s: job %d attempt %d failed: %s", label, job.id, job.attempt, what)
    log.debug("job %d: traceback", job.id, exc_info=exc)


class LeaseClock:
    """How long a slot's leases are: fixed when the worker names its lease,
    else measured on a claim every LEASE_RECHECK seconds."""

    __slots__ = ("fixed", "seconds", "at")

    def __init__(self, fixed: Optional[float]) -> None:
        self.fixed = fixed
        self.seconds = fixed if fixed is not None else 30.0
        self.at = -LEASE_RECHECK

    def pick(self, q: ClaimSQL) -> ClaimSQL:
        if self.fixed is not None or time.monotonic() - self.at < LEASE_RECHECK:
            return q
        assert q.measure is not None
        return q.measure

    def job(self, queue: str, row: Sequence[Any]) -> Job:
        if len(row) > 5 and row[5] is not None:
            self.seconds = max(float(row[5]), 0.001)
            self.at = time.monotonic()
        return Job(queue, row[0], row[1], row[2], row[4], row[3], self.seconds)


class _Abandoned(Exception):
    """Raised inside a transactional job that shutdown gave up on."""


class _Slot:
    """One concurrent job: its connection, thread, heartbeat and state."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.conn: Optional[psycopg.Connection[Any]] = None
        self.lock = threading.Lock()
        self.cond = threading.Condition(self.lock)
        self.beat_lock = threading.Lock()   # held by the heartbeat during an extend
        self.state = "idle"            # idle | claiming | busy | done
        self.job: Optional[Job] = None
        self.lost = False              # the heartbeat saw the token go stale
        self.abandoned = False         # shutdown released (or gave up on) the job
        self.next_beat = 0.0
        self.beat_idle = False         # the heartbeat waits for a job, untimed
        self.beat_wake_at = 0.0
        self.started = 0               # jobs started in this slot        # when its timed wait ends
        self.last_cancel = 0.0
        self.stats = WorkerStats()     # written by this slot's threads only
        self.leases = LeaseClock(None)
        self.thread: Optional[threading.Thread] = None
        self.beat_thread: Optional[threading.Thread] = None
        self.closed = False
        self._cur: Optional[psycopg.Cursor[Any]] = None

    def claim_cursor(self) -> "psycopg.Cursor[Any]":
        """The slot thread's cursor for its claims and outcomes, one per
        connection (a new psycopg cursor per statement costs more client
        CPU than the rest of a no-op job)."""
        cur = self._cur
        if cur is None or cur.connection is not self.conn:
            assert self.conn is not None
            cur = self._cur = self.conn.cursor()
        return cur


class Worker:
    """Runs ``handler(job)`` for items of ``queue``.

    - ``concurrency``: jobs at once (one thread and one connection each).
    - ``lease``: lease of each claim (None: the queue's default); the
      heartbeat extends it at a third of its length while the handler runs.
    - ``wait``: how long one claim waits inside the server for work.
    - ``grace``: seconds that running handlers get after a stop before their
      items are released.
    - ``transactional``: the handler runs inside a transaction on
      ``job.conn`` that has already called ``claim.assert_token``; its
      writes and the completion commit together or not at all.
    - ``burst``: return once a claim finds no work (after ``wait``).
    - ``max_jobs``: return after claiming this many jobs.
    - ``prepare``: let psycopg prepare statements on the server. Leave it off
      behind a transaction-mode pooler that does not track prepared
      statements (PgBouncer before 1.21).
    - ``cancel_on_stop``: a stop cancels the claims waiting in the server
      (and, past the grace period, a transactional handler's statement).
      With False, a stop waits for waiting claims to end (at most ``wait``).

    The handler's return value (JSON-serializable) is the item's result. An
    exception fails the attempt with its text; :class:`Retry` fails it with a
    retry delay. A stale token (PC001) is logged and the outcome dropped.
    """

    def __init__(self, conninfo: Optional[str], queue: str, handler: Handler, *,
                 concurrency: int = 1, lease: Optional[Interval] = None,
                 wait: Interval = "10 s", grace: float = 30.0, transactional: bool = False,
                 name: Optional[str] = None, heartbeat: bool = True, burst: bool = False,
                 max_jobs: Optional[int] = None, prepare: bool = False,
                 connect_kwargs: Optional[Dict[str, Any]] = None,
                 handle_signals: bool = True, cancel_on_stop: bool = True) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        if grace < 0:
            raise ValueError("grace must not be negative")
        self.conninfo = default_conninfo(conninfo)
        self.queue = queue
        self.handler = handler
        self.concurrency = concurrency
        self.lease = to_interval(lease)
        self.wait = to_interval(wait)
        self.grace = float(grace)
        self.transactional = transactional
        self.name = name or default_worker_name()
        self.heartbeat = heartbeat
        self.burst = burst
        self.max_jobs = max_jobs
        self.prepare = prepare
        self.connect_kwargs = dict(connect_kwargs or {})
        self.handle_signals = handle_signals
        self.cancel_on_stop = cancel_on_stop
        self.features: Optional[Features] = None
        self._stop = threading.Event()
        self._hurry = threading.Event()
        self._stats_lock = threading.Lock()
        self._tickets = 0
        self._slots: List[_Slot] = []
        self._sql: Optional[ClaimSQL] = None
        self._fatal: Optional[BaseException] = None

    # -- public ------------------------------------------------------------
    def stop(self) -> None:
        """Stop claiming; running handlers get ``grace`` seconds. Thread-safe;
        a second call ends the grace period at once."""
        if self._stop.is_set():
            self._hurry.set()
        self._stop.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    @property
    def stats(self) -> WorkerStats:
        """Counters summed over the slots."""
        return sum_stats(s.stats for s in self._slots)

    def run(self) -> WorkerStats:
        """Run until stopped (signal, :meth:`stop`, ``burst``, ``max_jobs``)."""
        old_handlers: Dict[signal.Signals, Any] = {}
        if self.handle_signals and threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                old_handlers[sig] = signal.signal(sig, self._on_signal)
        try:
            self._start()
            while not self._stop.is_set():
                if not any(s.thread is not None and s.thread.is_alive() for s in self._slots):
                    break
                self._stop.wait(0.2)
            self._stop.set()
            self._shutdown()
        finally:
            for sig, old in old_handlers.items():
                signal.signal(sig, old)
            self._close()
        if self._fatal is not None:
            raise map_error(self._fatal) from self._fatal
        return self.stats

    # -- set-up and shutdown -------------------------------------------------
    def _on_signal(self, signum: int, frame: Any) -> None:
        log.info("worker %s: signal %d, stopping", self._label(), signum)
        self.stop()

    def _label(self) -> str:
        return self.name or self.queue

    def _connect(self) -> "psycopg.Connection[Any]":
        kwargs = connect_kwargs_for(self.conninfo, self.connect_kwargs, self.prepare, self._label())
        return psycopg.connect(self.conninfo, autocommit=True, **kwargs)

    def _start(self) -> None:
        for i in range(self.concurrency):
            slot = _Slot(i)
            slot.conn = self._connect()
            self._slots.append(slot)
        conn = self._slots[0].conn
        assert conn is not None
        self.features = Features.from_rows(conn.execute(FEATURES_SQL).fetchall())
        self._sql = ClaimSQL(conn, self.queue, self.lease, self.wait, self.name)
        fixed: Optional[float] = None
        if self.lease is not None:
            row = conn.execute(LEASE_SECONDS_SQL, (self.lease,)).fetchone()
            fixed = max(float(row[0]), 0.001) if row is not None else None
        for slot in self._slots:
            slot.leases = LeaseClock(fixed)
        for slot in self._slots:
            slot.thread = threading.Thread(target=self._slot_main, args=(slot,),
                                           name=f"pg_claim-slot-{slot.index}", daemon=True)
            if self.heartbeat:
                slot.beat_thread = threading.Thread(target=self._beat_main, args=(slot,),
                                                    name=f"pg_claim-beat-{slot.index}", daemon=True)
                slot.beat_thread.start()
            slot.thread.start()

    def _shutdown(self) -> None:
        deadline = time.monotonic() + self.grace
        # Stop the claims that wait in the server, then let handlers finish.
        while time.monotonic() < deadline and not self._hurry.is_set():
            alive = [s for s in self._slots if s.thread is not None and s.thread.is_alive()]
            if not alive:
                break
            now = time.monotonic()
            for slot in alive:
                with slot.lock:
                    if slot.state == "claiming" and now - slot.last_cancel > 0.25:
                        slot.last_cancel = now
                        self._cancel(slot)
            alive[0].thread.join(0.05)  # type: ignore[union-attr]
        # Past the grace period: give back what is still held.
        waiting_tx: List[Tuple[_Slot, Job]] = []
        for slot in self._slots:
            if slot.thread is None or not slot.thread.is_alive():
                continue
            with slot.lock:
                job = slot.job
                if job is None:
                    if slot.state == "claiming":
                        self._cancel(slot)
                    continue
                slot.abandoned = True
            if self.transactional:
                # The handler's transaction holds the item: cancel its current
                # statement; the slot then rolls back and releases the item.
                self._cancel(slot)
                waiting_tx.append((slot, job))
            else:
                self._release(slot, job)
        end = time.monotonic() + 1.0
        for slot, job in waiting_tx:
            assert slot.thread is not None
            slot.thread.join(max(0.0, end - time.monotonic()))
            if slot.thread.is_alive():
                # The handler does not return. Close its connection, so that
                # the server rolls its transaction back, and give the item
                # back from a connection of our own.
                if slot.conn is not None:
                    try:
                        slot.conn.close()
                    except Exception as exc:
                        log.debug("close failed: %s", exc)
                self._release_fresh(slot, job)
        for slot in self._slots:
            if slot.thread is not None and slot.thread.is_alive():
                slot.thread.join(0.2)

    def _release_fresh(self, slot: _Slot, job: Job) -> None:
        kwargs = dict(self.connect_kwargs)
        kwargs.setdefault("prepare_threshold", None)
        try:
            with psycopg.connect(self.conninfo, autocommit=True, **kwargs) as conn:
                with conn.transaction():
                    conn.execute("SET LOCAL lock_timeout = '5s'")
                    conn.execute(RELEASE_SQL, (job.token,))
            self._count(slot, "released")
            log.warning("worker %s: job %d still running after the grace period: its "
                        "transaction was closed and the item released", self._label(), job.id)
        except psycopg.Error as exc:
            if _sqlstate(exc) != STALE:
                log.warning("worker %s: could not release job %d (%s); it returns when its "
                            "lease ends", self._label(), job.id, _error_text(exc))

    def _cancel(self, slot: _Slot) -> None:
        if not self.cancel_on_stop:
            return
        conn = slot.conn
        if conn is not None and not conn.closed:
            try:
                conn.cancel()
            except psycopg.Error as exc:
                log.debug("cancel failed: %s", exc)

    def _release(self, slot: _Slot, job: Job) -> None:
        conn = slot.conn
        try:
            if conn is None or conn.closed:
                raise psycopg.OperationalError("connection closed")
            conn.execute(RELEASE_SQL, (job.token,))
            self._count(slot, "released")
            log.warning("worker %s: job %d still running after the grace period: released "
                        "(its outcome will be dropped)", self._label(), job.id)
        except psycopg.Error as exc:
            log.warning("worker %s: could not release job %d (%s); it returns when its lease ends",
                        self._label(), job.id, exc)

    def _close(self) -> None:
        for slot in self._slots:
            with slot.lock:
                slot.closed = True
                slot.cond.notify_all()
            alive = slot.thread is not None and slot.thread.is_alive()
            if slot.conn is not None and not alive:
                slot.conn.close()

    @staticmethod
    def _count(slot: _Slot, what: str, n: int = 1) -> None:
        st = slot.stats
        setattr(st, what, getattr(st, what) + n)

    # -- the slot loop -------------------------------------------------------
    def _take_ticket(self) -> bool:
        if self.max_jobs is None:
            return True
        with self._stats_lock:
            if self._tickets >= self.max_jobs:
                return False
            self._tickets += 1
            return True

    def _return_ticket(self) -> None:
        if self.max_jobs is not None:
            with self._stats_lock:
                self._tickets -= 1

    def _set_fatal(self, exc: BaseException) -> None:
        with self._stats_lock:
            first = self._fatal is None
            if first:
                self._fatal = exc
        if first:
            log.error("worker %s: %s; stopping", self._label(), _error_text(exc))
        self._stop.set()

    def _slot_main(self, slot: _Slot) -> None:
        pending: List[int] = []
        backoff = BACKOFF_FIRST
        try:
            while not self._stop.is_set():
                try:
                    if not self._take_ticket():
                        break
                    rows = self._claim(slot, pending)
                    pending = []
                    if rows is None:
                        self._return_ticket()
                        break
                    if not rows:
                        self._return_ticket()
                        if self.burst:
                            break
                        continue
                    backoff = BACKOFF_FIRST
                    job = slot.leases.job(self.queue, rows[0])
                    if self._process(slot, job):
                        pending = [job.token]
                except _Fatal as fatal:
                    self._set_fatal(fatal.exc)
                    pending = []
                    break
                except psycopg.Error as exc:
                    pending = []
                    if _sqlstate(exc) in FATAL:
                        self._set_fatal(exc)
                        break
                    conn = slot.conn
                    if conn is None or conn.closed or conn.broken:
                        self._reconnect(slot, exc)
                    else:
                        log.warning("worker %s: slot %d: %s (SQLSTATE %s); retrying in %.1f s",
                                    self._label(), slot.index, _error_text(exc), _sqlstate(exc),
                                    backoff)
                        self._stop.wait(backoff)
                        backoff = min(backoff * 2, BACKOFF_MAX)
                except Exception:
                    log.exception("worker %s: slot %d: unexpected error", self._label(), slot.index)
                    pending = []
                    self._stop.wait(backoff)
                    backoff = min(backoff * 2, BACKOFF_MAX)
            if pending:
                try:
                    self._complete_now(slot, pending[0], None)
                except psycopg.Error as exc:
                    log.warning("worker %s: could not complete job token %d (%s); it returns "
                                "when its lease ends", self._label(), pending[0], _error_text(exc))
        finally:
            with slot.lock:
                slot.state = "done"

    def _reconnect(self, slot: _Slot, exc: BaseException) -> None:
        log.warning("worker %s: slot %d lost its connection (%s); reconnecting",
                    self._label(), slot.index, _error_text(exc))
        delay = BACKOFF_FIRST
        while not self._stop.is_set():
            try:
                old = slot.conn
                new = self._connect()
                with slot.lock:
                    slot.conn = new
                if old is not None:
                    old.close()
                return
            except psycopg.OperationalError as err:
                log.warning("worker %s: reconnect failed (%s); next try in %.1f s",
                            self._label(), _error_text(err), delay)
                self._stop.wait(delay)
                delay = min(delay * 2, BACKOFF_MAX)

    def _claim(self, slot: _Slot, pending: List[int]) -> Optional[List[Tuple[Any, ...]]]:
        """Claim one job (completing ``pending`` in the same statement when
        possible). None: stopped while claiming."""
        with slot.lock:
            if self._stop.is_set():
                if pending:
                    slot.state = "busy"
                else:
                    return None
            else:
                slot.state = "claiming"
        conn = slot.conn
        assert conn is not None
        q = self._sql
        assert q is not None
        try:
            if pending:
                if slot.state == "busy":          # stopping: complete only
                    self._complete_now(slot, pending[0], None)
                    return None
                try:
                    cur = slot.claim_cursor()
                    cur.execute(slot.leases.pick(q).done, (pending,))
                    rows = cur.fetchall()
                    slot.stats.completed += len(pending)
                    if rows:
                        slot.stats.claimed += 1
                        return rows
                except psycopg.Error as exc:
                    if _sqlstate(exc) == STALE:
                        self._count(slot, "stale", len(pending))
                        log.warning("worker %s: stale token at completion (%s); outcome dropped",
                                    self._label(), exc.diag.message_primary)
                    elif _sqlstate(exc) == CANCELED:
                        # The completion rolled back with the claim: redo it.
                        self._complete_now(slot, pending[0], None)
                        if self._stop.is_set():
                            return None
                    else:
                        raise
                if self._stop.is_set():
                    return None
            try:
                cur = slot.claim_cursor()
                cur.execute(slot.leases.pick(q).plain)
                rows = cur.fetchall()
            except psycopg.Error as exc:
                if _sqlstate(exc) == CANCELED:
                    if self._stop.is_set():
                        return None
                    log.warning("worker %s: claim cancelled (%s)", self._label(),
                                exc.diag.message_primary)
                    return []
                raise
            if rows:
                slot.stats.claimed += 1
            return rows
        except psycopg.Error as exc:
            if is_fatal(exc):
                raise _Fatal(exc) from exc
            raise
        finally:
            with slot.lock:
                if slot.state == "claiming":
                    slot.state = "busy"

    def _start_job(self, slot: _Slot, job: Job) -> None:
        with slot.lock:
            slot.job = job
            slot.lost = False
            slot.abandoned = False
            slot.next_beat = time.monotonic() + job.lease_seconds / 3.0
            slot.started += 1
            # Wake the heartbeat only when its wait would end too late; in a
            # busy slot it is in a timed wait that ends before the new beat.
            if slot.beat_idle or slot.next_beat < slot.beat_wake_at:
                slot.cond.notify()

    def _end_job(self, slot: _Slot) -> Tuple[bool, bool]:
        with slot.beat_lock, slot.lock:
            slot.job = None
            return slot.abandoned, slot.lost

    def _process(self, slot: _Slot, job: Job) -> bool:
        """Run one job. True: completion deferred to the next claim."""
        if self.transactional:
            self._process_tx(slot, job)
            return False
        self._start_job(slot, job)
        outcome: Tuple[str, Any]
        try:
            outcome = ("ok", self.handler(job))
        except Retry as exc:
            outcome = ("retry", exc)
        except Exception as exc:  # the handler's failure is the job's outcome
            outcome = ("fail", exc)
        abandoned, lost = self._end_job(slot)
        if abandoned:
            log.info("worker %s: job %d finished after it was released; outcome dropped",
                     self._label(), job.id)
            return False
        if lost:   # the heartbeat said so; nothing to send
            self._count(slot, "stale")
            return False
        kind, value = outcome
        if kind == "ok":
            if (value is None and self.features is not None and self.features.claim_done
                    and not self._stop.is_set()):
                return True
            self._complete_now(slot, job.token, value)
        elif kind == "retry":
            self._fail_now(slot, job, _error_text(value), value.after)
        else:
            log_failure(self._label(), job, value)
            self._fail_now(slot, job, _error_text(value), None)
        return False

    def _process_tx(self, slot: _Slot, job: Job) -> None:
        conn = slot.conn
        assert conn is not None
        try:
            with conn.transaction():
                conn.execute(ASSERT_SQL, (job.token,))
                job.conn = conn
                self._start_job(slot, job)
                try:
                    result = self.handler(job)
                finally:
                    abandoned, lost = self._end_job(slot)
                if abandoned:
                    raise _Abandoned()
                self._execute_complete(slot.claim_cursor(), job.token, result)
            slot.stats.completed += 1
        except _Abandoned:
            self._release_after_abandon(slot, job)
        except Retry as exc:
            if self._abandoned(slot):
                self._release_after_abandon(slot, job)
            else:
                self._fail_now(slot, job, _error_text(exc), exc.after)
        except Exception as exc:
            if _sqlstate(exc) == STALE or slot.lost:
                self._count(slot, "stale")
                if not slot.lost:   # else the heartbeat said so
                    log.warning("worker %s: job %d attempt %d: token is stale, its writes were "
                                "rolled back (%s)", self._label(), job.id, job.attempt,
                                _error_text(exc))
            elif self._abandoned(slot):
                self._release_after_abandon(slot, job)
            elif conn.closed or conn.broken:   # the slot's connection is gone
                raise
            else:
                log_failure(self._label(), job, exc)
                self._fail_now(slot, job, _error_text(exc), None)
        finally:
            job.conn = None

    def _abandoned(self, slot: _Slot) -> bool:
        with slot.lock:
            return slot.abandoned

    def _release_after_abandon(self, slot: _Slot, job: Job) -> None:
        conn = slot.conn
        assert conn is not None
        try:
            conn.execute(RELEASE_SQL, (job.token,))
            self._count(slot, "released")
            log.warning("worker %s: job %d rolled back and released at shutdown",
                        self._label(), job.id)
        except psycopg.Error as exc:
            if _sqlstate(exc) == STALE:   # its lease ran out meanwhile: ready anyway
                log.info("worker %s: job %d rolled back; its lease had already ended",
                         self._label(), job.id)
            else:
                log.warning("worker %s: job %d rolled back; release failed (%s)",
                            self._label(), job.id, _error_text(exc))

    def _execute_complete(self, cur: "psycopg.Cursor[Any]", token: int, result: Any) -> None:
        if result is not None and self.features is not None and self.features.complete_result:
            cur.execute(COMPLETE_RESULT_SQL, (token, Jsonb(result)))
        else:
            cur.execute(COMPLETE_SQL, (token,))

    def _retrying(self, fn: Callable[[], None]) -> None:
        """Run a completion statement; a cancel meant for a claim may hit it."""
        for attempt in range(3):
            try:
                fn()
                return
            except psycopg.Error as exc:
                if _sqlstate(exc) != CANCELED or attempt == 2:
                    raise

    def _complete_now(self, slot: _Slot, token: int, result: Any) -> None:
        def run() -> None:
            self._execute_complete(slot.claim_cursor(), token, result)

        try:
            self._retrying(run)
            slot.stats.completed += 1
        except psycopg.Error as exc:
            if _sqlstate(exc) != STALE:
                raise
            self._count(slot, "stale")
            log.warning("worker %s: stale token %d at completion (%s); outcome dropped",
                        self._label(), token, exc.diag.message_primary)

    def _fail_now(self, slot: _Slot, job: Job, error: str, retry_in: Any) -> None:
        def run() -> None:
            slot.claim_cursor().execute(FAIL_SQL, (job.token, error, retry_in))

        try:
            self._retrying(run)
            self._count(slot, "retried" if retry_in is not None else "failed")
        except psycopg.Error as exc:
            if _sqlstate(exc) != STALE:
                raise
            self._count(slot, "stale")
            log.warning("worker %s: stale token for job %d at fail (%s); outcome dropped",
                        self._label(), job.id, exc.diag.message_primary)

    # -- heartbeat -----------------------------------------------------------
    def _beat_main(self, slot: _Slot) -> None:
        seen = 0
        period = 1.0
        while True:
            with slot.cond:
                if slot.closed:
                    return
                job = slot.job
                if job is None or slot.lost or slot.abandoned:
                    if slot.started != seen:
                        # Jobs ran since the last look: wait one beat period
                        # with a timeout, so that short jobs do not each have
                        # to wake this thread.
                        seen = slot.started
                        slot.beat_wake_at = time.monotonic() + period
                        slot.cond.wait(period)
                    else:
                        slot.beat_idle = True
                        slot.cond.wait()
                        slot.beat_idle = False
                    continue
                period = job.lease_seconds / 3.0
                delay = slot.next_beat - time.monotonic()
                if delay > 0:
                    slot.beat_wake_at = time.monotonic() + delay
                    slot.cond.wait(delay)
                    continue
                slot.next_beat = time.monotonic() + period
            # Due. The beat lock keeps the job from ending (and, in
            # transactional mode, the next job's transaction from starting)
            # under the extend; the slot lock is not held while the extend
            # waits for the connection, so a stop is never blocked by it.
            with slot.beat_lock:
                with slot.lock:
                    if slot.job is not job or slot.abandoned:
                        continue
                conn = slot.conn
                try:
                    assert conn is not None
                    conn.execute(EXTEND_SQL, (job.token, self.lease))
                    slot.stats.extended += 1
                except psycopg.Error as exc:
                    if _sqlstate(exc) == STALE:
                        with slot.lock:
                            slot.lost = True
                        log.warning("worker %s: job %d attempt %d lost its lease (%s); its "
                                    "outcome will be dropped", self._label(), job.id,
                                    job.attempt, exc.diag.message_primary)
                    else:
                        log.debug("heartbeat of job %d: %s", job.id, exc)
                except Exception as exc:  # never let the heartbeat thread die
                    log.debug("heartbeat of job %d: %s", job.id, exc)
