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

import asyncio
import concurrent.futures
import logging
import signal
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict
from psycopg.types.json import Jsonb

from ._common import Job, Retry, WorkerStats, sum_stats
from ._features import FEATURES_SQL, Features
from ._loop import (OUTCOME_TRIES, HandlerExit, jittered, transient, unstorable, BACKOFF_FIRST, BACKOFF_MAX, CANCELED, FATAL, STALE, SlotState, WorkerBase,
                    _Abandoned, _error_text, _sqlstate, default_conninfo,
                    default_worker_name, log_failure)
from ._deadline import TimedCursor, armed, cut
from .errors import map_error

__all__ = ["Worker", "default_conninfo", "default_worker_name", "ClaimSQL", "LeaseClock",
           "connect_kwargs_for", "log_failure", "STALE", "CANCELED", "FATAL",
           "BACKOFF_FIRST", "BACKOFF_MAX"]

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


def complete_statement(features: Optional[Features], token: int,
                       result: Any) -> Tuple[str, Tuple[Any, ...]]:
    """The completion of ``token``: with its result where the server keeps
    results (and there is one)."""
    if result is not None and features is not None and features.complete_result:
        return COMPLETE_RESULT_SQL, (token, Jsonb(result))
    return COMPLETE_SQL, (token,)


KEEPALIVES = {"keepalives": 1, "keepalives_idle": 10, "keepalives_interval": 5,
              "keepalives_count": 3}


def connect_kwargs_for(conninfo: str, given: Dict[str, Any], prepare: bool,
                       label: str) -> Dict[str, Any]:
    """psycopg.connect arguments: statements unprepared unless asked (see
    README, PgBouncer), and an application_name unless the caller set one."""
    kwargs = dict(given)
    kwargs.setdefault("prepare_threshold", 5 if prepare else None)
    # TCP keepalives from 10 s of silence on (libpq's keepalives_*), unless
    # the connection string or the caller sets them: a peer that vanished
    # (a half-open connection) is noticed in about half a minute, not two hours.
    try:
        given_params = conninfo_to_dict(conninfo)
    except psycopg.Error:
        given_params = {}
    for key, value in KEEPALIVES.items():
        if key not in given_params:
            kwargs.setdefault(key, value)
    if "application_name" not in kwargs:
        try:
            named = "application_name" in conninfo_to_dict(conninfo)
        except psycopg.Error:
            named = False
        if not named:
            kwargs["application_name"] = f"pg_claim worker {label}"[:63]
    return kwargs


class LeaseClock:
    """How long a slot's leases are: fixed when the worker names its lease,
    else measured on a claim every LEASE_RECHECK seconds."""

    __slots__ = ("fixed", "seconds", "at")

    def __init__(self, fixed: Optional[float]) -> None:
        self.fixed = fixed
        self.seconds = fixed if fixed is not None else 30.0
        self.at = -LEASE_RECHECK

    @staticmethod
    def seconds_of(row: Optional[Sequence[Any]]) -> Optional[float]:
        """A fixed lease's length from LEASE_SECONDS_SQL's row."""
        return max(float(row[0]), 0.001) if row is not None else None

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


class _Slot(SlotState):
    """One concurrent job: its connection, thread, heartbeat and state."""

    def __init__(self, index: int) -> None:
        super().__init__(index)
        self.conn: Optional[psycopg.Connection[Any]] = None
        self.lock = threading.Lock()
        self.cond = threading.Condition(self.lock)
        self.beat_lock = threading.Lock()   # held by the heartbeat during an extend
        self.stats = WorkerStats()     # written by this slot's threads only
        self.leases = LeaseClock(None)
        self.thread: Optional[threading.Thread] = None
        self.beat_thread: Optional[threading.Thread] = None


class Worker(WorkerBase):
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
    - ``call_timeout``: seconds (default 30; None: none) that each statement
      of the worker's own may take (a claim: its ``wait`` and this), and
      connecting: a connection that stops answering without closing has its
      socket shut down, and the slot takes a new one. The handler's own
      statements are never timed.

    The handler's return value (JSON-serializable) is the item's result. An
    exception fails the attempt with its text; :class:`Retry` fails it with a
    retry delay. A stale token (PC001) is logged and the outcome dropped.
    """

    def _init_runtime(self) -> None:
        self.features: Optional[Features] = None
        self._stop = threading.Event()
        self._hurry = threading.Event()
        self._signals: List[int] = []   # signals received, for run() to act on
        self._stats_lock = threading.Lock()
        self._slots: List[_Slot] = []
        self._sql: Optional[ClaimSQL] = None

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
        self._calls.start()
        try:
            try:
                self._start()
            except psycopg.Error as exc:
                self._set_fatal(exc)   # raised below as its PgClaimError
            while not self._stop.is_set():
                if not any(s.thread is not None and s.thread.is_alive() for s in self._slots):
                    break
                self._stop.wait(0.2)
                self._take_signals()
            self._stop.set()
            self._shutdown()
        finally:
            for sig, old in old_handlers.items():
                signal.signal(sig, old)
            self._close()
            self._calls.close()
        if self._fatal is not None:
            raise map_error(self._fatal) from self._fatal
        return self.stats

    # -- set-up and shutdown -------------------------------------------------
    def _on_signal(self, signum: int, frame: Any) -> None:
        # Only a counter: the handler runs between two bytecodes of the main
        # thread, which may hold the stop Event's lock or a logging lock at
        # that moment; taking either here could deadlock. The main thread
        # acts on it within 0.2 s (run()'s loop, the grace period's loop).
        self._signals.append(signum)

    def _take_signals(self) -> None:
        """Act on the signals _on_signal recorded: each stops (a second one
        ends the grace period)."""
        while self._signals:
            signum = self._signals.pop(0)
            log.info("worker %s: signal %d, stopping", self._label(), signum)
            self.stop()

    def _connect(self) -> "psycopg.Connection[Any]":
        kwargs = self._timed_kwargs(connect_kwargs_for(self.conninfo, self.connect_kwargs, self.prepare,
                                                       self._label()))
        kwargs.setdefault("cursor_factory", TimedCursor)
        conn = psycopg.connect(self.conninfo, autocommit=True, **kwargs)
        conn.pgc_calls = self._calls   # type: ignore[attr-defined]
        return conn

    def _start(self) -> None:
        for i in range(self.concurrency):
            slot = _Slot(i)
            slot.conn = self._connect()
            self._slots.append(slot)
        conn = self._slots[0].conn
        assert conn is not None
        self.features = Features.from_rows(conn.execute(FEATURES_SQL).fetchall())
        self._sql = ClaimSQL(conn, self.queue, self.lease, self.wait, self.name)
        fixed = None
        if self.lease is not None:
            fixed = LeaseClock.seconds_of(conn.execute(LEASE_SECONDS_SQL, (self.lease,)).fetchone())
        for slot in self._slots:
            slot.leases = LeaseClock(fixed)
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
            self._take_signals()
            if self._hurry.is_set():
                break
            alive = [s for s in self._slots if s.thread is not None and s.thread.is_alive()]
            if not alive:
                break
            now = time.monotonic()
            for slot in alive:
                with slot.lock:
                    if slot.state == "claiming" and now - slot.last_cancel > 0.25:
                        slot.last_cancel = now
                        self._cancel(slot)
                    if slot.state == "claiming":
                        self._cut_stuck_claim(slot, now)
            alive[0].thread.join(0.05)  # type: ignore[union-attr]
        # Past the grace period: give back what is still held.
        waiting_tx: List[Tuple[_Slot, Job]] = []
        for slot in self._slots:
            if slot.thread is None or not slot.thread.is_alive():
                continue
            with slot.lock:
                job = self._abandon(slot, cancel_idle=False)
            if job is None:
                continue
            if self.transactional:
                # The handler's transaction holds the item: its statement is
                # cancelled; the slot then rolls back and releases the item.
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
        try:
            with psycopg.connect(self.conninfo, autocommit=True, **self._fresh_kwargs()) as conn:
                with armed(self._calls, conn), conn.transaction():
                    conn.execute("SET LOCAL lock_timeout = '5s'")
                    conn.execute(RELEASE_SQL, (job.token,))
            self._count(slot, "released")
            self._log_release(job, None, fresh=True)
        except psycopg.Error as exc:
            self._log_release(job, exc, fresh=True)

    def _release(self, slot: _Slot, job: Job) -> None:
        conn = slot.conn
        try:
            if conn is None or conn.closed:
                raise psycopg.OperationalError("connection closed")
            conn.execute(RELEASE_SQL, (job.token,))
            self._count(slot, "released")
            self._log_release(job, None, fresh=False)
        except psycopg.Error as exc:
            self._log_release(job, exc, fresh=False)

    def _beat_conn(self, slot: _Slot) -> "Optional[psycopg.Connection[Any]]":
        """The heartbeat's own connection, opened when the slot's broke (see
        WorkerBase._beat_conn_needed); None in transactional mode."""
        if self._beat_conn_needed(slot):
            try:
                slot.beat_conn = self._connect()
            except psycopg.Error as exc:
                self._log_beat_conn(slot, exc)
                return None
            self._log_beat_conn(slot, None)
        return None if self.transactional else slot.beat_conn

    def _close(self) -> None:
        self._cancels_sent()
        for slot in self._slots:
            # A claim still waiting on a connection that does not answer
            # (its cancel did not end it): shut the connection down, so that
            # the slot's thread ends too.
            if slot.thread is not None and slot.thread.is_alive() and slot.state == "claiming":
                cut(slot.conn)
                slot.thread.join(0.5)
        for slot in self._slots:
            if slot.beat_conn is not None:
                try:
                    slot.beat_conn.close()
                except psycopg.Error:
                    pass
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
        with self._stats_lock:
            return self._ticket()

    def _return_ticket(self) -> None:
        with self._stats_lock:
            self._unticket()

    def _set_fatal(self, exc: BaseException) -> None:
        with self._stats_lock:
            self._fatal_first(exc)
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
                    pending, backoff = [], BACKOFF_FIRST
                    if not rows:
                        if self._slot_ends(rows):
                            break
                        continue
                    job = slot.leases.job(self.queue, rows[0])
                    if self._process(slot, job):
                        pending = [job.token]
                except Exception as exc:  # what the slot does next is _slot_error's
                    lost, pending = pending, []
                    after = self._recover(slot, exc, backoff)
                    if lost and after is not None:
                        # The claim that carried a finished job's completion
                        # failed: complete it on its own (a stale answer: it
                        # was completed after all, or another worker has it).
                        try:
                            self._complete_now(slot, lost[0], None)
                        except psycopg.Error as err:
                            self._log_pending_lost(lost[0], err)
                    if after is None:
                        break
                    backoff = after
            if pending:
                try:
                    self._complete_now(slot, pending[0], None)
                except psycopg.Error as exc:
                    self._log_pending_lost(pending[0], exc)
        finally:
            with slot.lock:
                slot.state = "done"

    def _recover(self, slot: _Slot, exc: BaseException, backoff: float) -> Optional[float]:
        step = self._slot_error(slot, exc, backoff)
        if step == "reconnect":
            self._reconnect(slot, exc)
        elif step == "retry":
            self._stop.wait(jittered(backoff))
        return self._next_backoff(step, backoff)

    def _reconnect(self, slot: _Slot, exc: BaseException) -> None:
        self._log_reconnect(slot, exc, failed=False)
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
                wait = self._reconnect_failed(slot, err, delay)
                if wait is None:
                    return
                self._stop.wait(wait)
                delay = min(delay * 2, BACKOFF_MAX)

    def _fetch(self, slot: _Slot, query: str, params: Any = None) -> List[Tuple[Any, ...]]:
        cur = slot.claim_cursor()
        # A claim's deadline: its wait in the server, then call_timeout.
        with armed(self._calls, slot.conn, self._wait_seconds):
            cur.execute(query, params)
            return cur.fetchall()

    def _claim(self, slot: _Slot, pending: List[int]) -> Optional[List[Tuple[Any, ...]]]:
        """Claim one job (completing ``pending`` in the same statement when
        possible). None: stopped while claiming."""
        with slot.lock:
            if self._stop.is_set():
                if not pending:
                    return None
                slot.state = "busy"
            else:
                slot.state = "claiming"
        q = self._sql
        assert q is not None
        try:
            if pending and slot.state == "busy":    # stopping: complete only
                self._complete_now(slot, pending[0], None)
                return None
            if pending:
                try:
                    rows = self._fetch(slot, slot.leases.pick(q).done, (pending,))
                    if self._done_counted(slot.stats, pending, rows):
                        return rows
                except psycopg.Error as exc:
                    step = self._done_error(exc)
                    if step == "stale":
                        self._count(slot, "stale", len(pending))
                    elif step == "redo":
                        # The completion rolled back with the claim: redo it.
                        self._complete_now(slot, pending[0], None)
                    else:
                        raise
                if self._stop.is_set():
                    return None
            try:
                rows = self._fetch(slot, slot.leases.pick(q).plain)
            except psycopg.Error as exc:
                return self._claim_failed(exc)
            if rows:
                self._count(slot, "claimed")
            return rows
        except psycopg.Error as exc:
            self._claim_fatal(exc)
            raise
        finally:
            with slot.lock:
                if slot.state == "claiming":
                    slot.state = "busy"

    def _start_job(self, slot: _Slot, job: Job) -> None:
        with slot.lock:
            if slot.begin(job):
                slot.cond.notify()

    def _end_job(self, slot: _Slot) -> Tuple[bool, bool]:
        with slot.beat_lock, slot.lock:
            slot.job = None
            return slot.abandoned, slot.lost

    def _call_handler(self, job: Job) -> Any:
        """The handler's result; a SystemExit or CancelledError it raises
        fails the job (HandlerExit) rather than end the slot's thread."""
        try:
            return self.handler(job)
        except (SystemExit, asyncio.CancelledError, concurrent.futures.CancelledError) as exc:
            raise HandlerExit(exc) from exc

    def _process(self, slot: _Slot, job: Job) -> bool:
        """Run one job. True: completion deferred to the next claim."""
        if self.transactional:
            self._process_tx(slot, job)
            return False
        self._start_job(slot, job)
        outcome: Tuple[str, Any]
        try:
            outcome = ("ok", self._call_handler(job))
        except Retry as exc:
            outcome = ("retry", exc)
        except Exception as exc:  # the handler's failure is the job's outcome
            outcome = ("fail", exc)
        abandoned, lost = self._end_job(slot)
        step, value, after = self._outcome(job, abandoned, lost, self._stop.is_set(), outcome)
        if step == "stale":
            self._count(slot, "stale")
        elif step == "complete":
            self._complete_now(slot, job.token, value)
        elif step == "fail":
            self._fail_now(slot, job, value, after)
        return step == "defer"

    def _process_tx(self, slot: _Slot, job: Job) -> None:
        conn = slot.conn
        assert conn is not None
        calls = self._calls
        mine = calls.arm(conn)   # BEGIN and assert_token, then completion and COMMIT
        try:
            with conn.transaction():
                conn.execute(ASSERT_SQL, (job.token,))
                job.conn = conn
                self._start_job(slot, job)
                # The handler's statements have no deadline of the worker's.
                calls.disarm(conn)
                conn.pgc_handler = True   # type: ignore[attr-defined]
                try:
                    result = self._call_handler(job)
                finally:
                    conn.pgc_handler = False   # type: ignore[attr-defined]
                    mine = calls.arm(conn)
                    abandoned, lost = self._end_job(slot)
                if abandoned:
                    raise _Abandoned()
                why = unstorable(result)
                if why is not None:
                    raise ValueError(why)
                self._execute_complete(slot.claim_cursor(), job.token, result)
            slot.stats.completed += 1
        except _Abandoned:
            self._release_after_abandon(slot, job)
        except Exception as exc:
            step, after = self._tx_error(job, exc, slot.lost, self._abandoned(slot), conn)
            if step == "stale":
                self._count(slot, "stale")
            elif step == "release":
                self._release_after_abandon(slot, job)
            elif step == "raise":
                raise
            else:
                self._fail_now(slot, job, _error_text(exc), after)
        finally:
            if mine:
                calls.disarm(conn)
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
            self._log_abandon_release(job, None)
        except psycopg.Error as exc:
            self._log_abandon_release(job, exc)

    def _execute_complete(self, cur: "psycopg.Cursor[Any]", token: int, result: Any) -> None:
        cur.execute(*complete_statement(self.features, token, result))

    def _retrying(self, slot: _Slot, fn: Callable[[], None]) -> None:
        """Run a completion statement: again when a cancel meant for a claim
        hit it, or after a transient error (on a new connection when the
        slot's is gone), with the same token; OUTCOME_TRIES times in all."""
        for attempt in range(OUTCOME_TRIES):
            try:
                fn()
                return
            except psycopg.Error as exc:
                last = attempt == OUTCOME_TRIES - 1
                if last or not (_sqlstate(exc) == CANCELED or transient(exc)):
                    raise
                if transient(exc):
                    conn = slot.conn
                    if conn is None or conn.closed or conn.broken:
                        self._reconnect(slot, exc)
                    else:
                        self._stop.wait(0.2 * 2 ** attempt)

    def _complete_now(self, slot: _Slot, token: int, result: Any) -> None:
        def run() -> None:
            self._execute_complete(slot.claim_cursor(), token, result)

        try:
            self._retrying(slot, run)
            slot.stats.completed += 1
        except psycopg.Error as exc:
            self._stale_outcome("complete", token, exc)
            self._count(slot, "stale")

    def _fail_now(self, slot: _Slot, job: Job, error: str, retry_in: Any) -> None:
        def run() -> None:
            slot.claim_cursor().execute(FAIL_SQL, (job.token, error, retry_in))

        try:
            self._retrying(slot, run)
            self._count(slot, "retried" if retry_in is not None else "failed")
        except psycopg.Error as exc:
            self._stale_outcome("fail", job, exc)
            self._count(slot, "stale")

    # -- heartbeat -----------------------------------------------------------
    def _beat_main(self, slot: _Slot) -> None:
        seen = 0
        period = 1.0
        while True:
            with slot.cond:
                if slot.closed:
                    return
                job = slot.job
                wait, seen, period = slot.beat_plan(seen, period)
                if wait is not None:
                    slot.beat_idle = wait == 0.0
                    slot.cond.wait(wait or None)
                    slot.beat_idle = False
                    continue
            # Due. The beat lock keeps the job from ending (and, in
            # transactional mode, the next job's transaction from starting)
            # under the extend; the slot lock is not held while the extend
            # waits for the connection, so a stop is never blocked by it.
            with slot.beat_lock:
                with slot.lock:
                    if slot.job is not job or slot.abandoned:
                        continue
                conn = slot.conn
                if conn is None or conn.closed or conn.broken:
                    conn = self._beat_conn(slot)
                try:
                    assert conn is not None and job is not None
                    try:
                        conn.execute(EXTEND_SQL, (job.token, self.lease))
                    except psycopg.OperationalError as exc:
                        # The slot's connection died under a running handler:
                        # extend from the heartbeat's own, so that the lease
                        # does not run out and hand the job to another worker.
                        if not transient(exc) or conn is slot.beat_conn:
                            raise
                        beat = self._beat_conn(slot)
                        if beat is None:
                            raise
                        beat.execute(EXTEND_SQL, (job.token, self.lease))
                    slot.stats.extended += 1
                except Exception as exc:  # never let the heartbeat thread die
                    if job is not None and self._beat_failed(job, exc):
                        with slot.lock:
                            slot.lost = True
