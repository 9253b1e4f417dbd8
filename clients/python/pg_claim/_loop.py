"""What the synchronous and asyncio workers share: their arguments, a slot's
state, and every decision of the loop that does not wait for the server.
The workers (:mod:`pg_claim.worker`, :mod:`pg_claim.aio`) only do the I/O
these decisions ask for, each in its own way (threads or tasks)."""
from __future__ import annotations

import json
import logging
import os
import random
import re
import socket
import time
from typing import Any, Dict, Optional, Tuple

import psycopg
from psycopg.conninfo import conninfo_to_dict

from ._common import Interval, Job, Retry, to_interval
from .errors import is_fatal
from ._deadline import Calls, cancel_in_background, cut

log = logging.getLogger("pg_claim.worker")

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


def _given_params(conninfo: str) -> Dict[str, Any]:
    try:
        return conninfo_to_dict(conninfo)
    except psycopg.Error:
        return {}


def interval_seconds(value: Any) -> float:
    """Seconds of an interval given as a number (seconds), a timedelta or a
    simple string ('10 s', '500 ms', '2 min'); an interval not read here
    gives an hour (a generous deadline)."""
    if value is None:
        return 0.0
    if isinstance(value, (int, float)):
        return float(value)
    seconds = getattr(value, "total_seconds", None)
    if seconds is not None:
        return float(seconds())
    m = re.match(r"^\s*([0-9.]+)\s*(ms|msec|millisecond|milliseconds|s|sec|secs|second|seconds|"
                 r"min|mins|minute|minutes|h|hour|hours)?\s*$", str(value), re.I)
    if not m:
        return 3600.0
    n, unit = float(m.group(1)), (m.group(2) or "s").lower()
    if unit.startswith("m") and unit not in ("min", "mins", "minute", "minutes"):
        return n / 1000
    if unit.startswith("min"):
        return n * 60
    if unit.startswith("h"):
        return n * 3600
    return n


def default_worker_name() -> str:
    """host:pid, recorded as the claims' worker unless a name is given."""
    return f"{socket.gethostname()}:{os.getpid()}"


def _sqlstate(exc: BaseException) -> Optional[str]:
    return getattr(exc, "sqlstate", None)


def _error_text(exc: BaseException) -> str:
    if isinstance(exc, psycopg.Error) and exc.diag.message_primary:
        return exc.diag.message_primary
    text = str(exc).strip()
    return text if text else type(exc).__name__


class HandlerExit(Exception):
    """A handler raised a BaseException that is not the worker's own stop
    (SystemExit, or a CancelledError it raised itself): the job fails with
    its text, and the slot goes on."""

    def __init__(self, exc: BaseException) -> None:
        text = str(exc).strip()
        super().__init__(f"the handler raised {type(exc).__name__}" + (f"({text})" if text else ""))
        self.original = exc


def unstorable(result: Any) -> Optional[str]:
    """Why ``result`` cannot be stored as a job's JSON result (None: it can)."""
    if result is None:
        return None
    try:
        json.dumps(result)
    except (TypeError, ValueError, RecursionError) as exc:
        return f"the handler's result cannot be stored as JSON: {exc}"
    return None


# A completion or failure that meets a transient error is sent again, with the
# same token, this many times in all (a stale answer then means another worker
# has the item, and the outcome is dropped).
OUTCOME_TRIES = 4


def jittered(seconds: float) -> float:
    """A backoff with jitter: between half of ``seconds`` and ``seconds``, so
    that workers that failed together do not retry together."""
    return seconds / 2 + random.random() * seconds / 2


def transient(exc: BaseException) -> bool:
    """An error that the same statement may not meet again (the errors
    module's Transient: a lost connection, a restart, a serialization
    failure, a deadlock, a lock timeout)."""
    from .errors import is_transient
    return is_transient(exc)


def _primary(exc: BaseException) -> Optional[str]:
    return exc.diag.message_primary if isinstance(exc, psycopg.Error) else str(exc)


def log_failure(label: str, job: Job, exc: BaseException) -> None:
    """A handler's failure: one WARNING line (the traceback at DEBUG)."""
    text = str(exc).strip()
    what = type(exc).__name__ + (": " + text.splitlines()[0] if text else "")
    log.warning("worker %s: job %d attempt %d failed: %s", label, job.id, job.attempt, what)
    log.debug("job %d: traceback", job.id, exc_info=exc)


class _Fatal(Exception):
    """A claim statement's error that no retry can fix."""

    def __init__(self, exc: BaseException) -> None:
        super().__init__(str(exc))
        self.exc = exc


class _Abandoned(Exception):
    """Raised inside a transactional job that shutdown gave up on."""


class SlotState:
    """What a slot (one concurrent job) knows, whatever runs it: the job, what
    the heartbeat and the shutdown said of it, and when the next beat is due."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.state = "idle"            # idle | claiming | busy | done
        self.job: Optional[Job] = None
        self.lost = False              # the heartbeat saw the token go stale
        self.abandoned = False         # shutdown released (or gave up on) the job
        self.next_beat = 0.0
        self.beat_idle = False         # the heartbeat waits for a job, untimed
        self.beat_wake_at = 0.0        # when its timed wait ends
        self.started = 0               # jobs started in this slot
        self.last_cancel = 0.0
        self.closed = False
        self.conn: Any = None          # the slot's connection (sync or async)
        self.beat_conn: Any = None     # the heartbeat's own, once the slot's broke mid-job
        self.cancel_thread: Any = None  # the last cancel request's sender
        self.first_cancel = 0.0         # when a stop first cancelled its claim
        self._cur: Any = None

    def claim_cursor(self) -> Any:
        """The slot's cursor for its claims and outcomes, one per connection
        (a new psycopg cursor per statement costs more client CPU than the
        rest of a no-op job)."""
        cur = self._cur
        if cur is None or cur.connection is not self.conn:
            assert self.conn is not None
            cur = self._cur = self.conn.cursor()
        return cur

    def begin(self, job: Job) -> bool:
        """The slot takes ``job``; True when the heartbeat must be woken (its
        wait would end too late; in a busy slot it is in a timed wait that
        ends before the new beat)."""
        self.job = job
        self.lost = False
        self.abandoned = False
        self.next_beat = time.monotonic() + job.lease_seconds / 3.0
        self.started += 1
        return self.beat_idle or self.next_beat < self.beat_wake_at

    def beat_plan(self, seen: int, period: float) -> Tuple[Optional[float], int, float]:
        """The heartbeat's next step, under the slot's lock: ``(wait, seen,
        period)``. ``wait`` is how long to wait for a change (0: wait untimed,
        with ``beat_idle`` set), or None: extend the job's lease now."""
        job = self.job
        if job is None or self.lost or self.abandoned:
            if self.started != seen:
                # Jobs ran since the last look: wait one beat period with a
                # timeout, so that short jobs do not each wake the heartbeat.
                self.beat_wake_at = time.monotonic() + period
                return period, self.started, period
            return 0.0, seen, period
        period = job.lease_seconds / 3.0
        delay = self.next_beat - time.monotonic()
        if delay > 0:
            self.beat_wake_at = time.monotonic() + delay
            return delay, seen, period
        self.next_beat = time.monotonic() + period
        return None, seen, period


class WorkerBase:
    """The arguments of a worker (see :class:`pg_claim.Worker`) and the
    decisions its loop makes."""

    def __init__(self, conninfo: Optional[str], queue: str, handler: Any, *,
                 concurrency: int = 1, lease: Optional[Interval] = None,
                 wait: Interval = "10 s", grace: float = 30.0, transactional: bool = False,
                 name: Optional[str] = None, heartbeat: bool = True, burst: bool = False,
                 max_jobs: Optional[int] = None, prepare: bool = False,
                 connect_kwargs: Optional[Dict[str, Any]] = None,
                 handle_signals: bool = True, cancel_on_stop: bool = True,
                 call_timeout: Optional[float] = 30.0) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        if grace < 0:
            raise ValueError("grace must not be negative")
        if call_timeout is not None and not call_timeout > 0:
            raise ValueError("call_timeout must be seconds > 0 (or None: no deadline)")
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
        self.call_timeout = None if call_timeout is None else float(call_timeout)
        # How much longer than call_timeout a claim may take: its wait.
        self._wait_seconds = interval_seconds(self.wait)
        self._calls = Calls(self.call_timeout, self._label())
        self._tickets = 0
        self._fatal: Optional[BaseException] = None
        self._init_runtime()

    def _init_runtime(self) -> None:
        """The state of the worker's own kind (events, locks, slots)."""

    def _label(self) -> str:
        return self.name or self.queue

    def _fresh_kwargs(self) -> Dict[str, Any]:
        """Connection arguments of a connection of its own (shutdown's release)."""
        kwargs = dict(self.connect_kwargs)
        kwargs.setdefault("prepare_threshold", None)
        return self._timed_kwargs(kwargs)

    def _timed_kwargs(self, kwargs: Dict[str, Any]) -> Dict[str, Any]:
        """``kwargs`` with a connect_timeout (call_timeout, at least 2 s)
        unless the caller or the connection string set one."""
        if self.call_timeout is not None and "connect_timeout" not in _given_params(self.conninfo):
            kwargs.setdefault("connect_timeout", max(2, int(self.call_timeout + 0.999)))
        return kwargs

    def _short(self) -> float:
        """How long a stop waits for one step of its own (a cancel request
        to be answered): at most 5 s, less with a shorter call_timeout."""
        return min(5.0, self.call_timeout) if self.call_timeout is not None else 5.0

    # -- tickets (max_jobs); the caller holds the worker's lock, if any -----
    def _ticket(self) -> bool:
        if self.max_jobs is None:
            return True
        if self._tickets >= self.max_jobs:
            return False
        self._tickets += 1
        return True

    def _unticket(self) -> None:
        if self.max_jobs is not None:
            self._tickets -= 1

    def _take_ticket(self) -> bool:
        return self._ticket()

    def _return_ticket(self) -> None:
        self._unticket()

    # -- the slot loop's decisions -------------------------------------------
    def _slot_ends(self, rows: Optional[list]) -> bool:
        """A claim gave no job (None: stopped while claiming): its ticket goes
        back; True when the slot ends (stopped, or ``burst``)."""
        self._return_ticket()
        return rows is None or self.burst

    def _slot_error(self, slot: SlotState, exc: BaseException, backoff: float) -> str:
        """What a slot does after ``exc``: "fatal" (the worker stops: recorded
        here), "reconnect" or "retry" (after ``backoff``, logged here)."""
        if isinstance(exc, _Fatal) or _sqlstate(exc) in FATAL:
            self._set_fatal(exc.exc if isinstance(exc, _Fatal) else exc)
            return "fatal"
        if not isinstance(exc, psycopg.Error):
            log.error("worker %s: slot %d: unexpected error", self._label(), slot.index,
                      exc_info=exc)
            return "retry"
        conn = getattr(slot, "conn", None)
        if conn is None or conn.closed or conn.broken:
            return "reconnect"
        log.warning("worker %s: slot %d: %s (SQLSTATE %s); retrying in %.1f s",
                    self._label(), slot.index, _error_text(exc), _sqlstate(exc), backoff)
        return "retry"

    def _set_fatal(self, exc: BaseException) -> None:
        raise NotImplementedError

    @staticmethod
    def _next_backoff(step: Optional[str], backoff: float) -> Optional[float]:
        """The backoff after a slot's error step (None: the slot ends)."""
        if step == "fatal":
            return None
        return min(backoff * 2, BACKOFF_MAX) if step == "retry" else backoff

    def _cancel(self, slot: SlotState) -> None:
        """Cancel the statement the slot's connection runs (a claim waiting in
        the server, or past the grace period a handler's), unless the worker
        was told not to."""
        conn = slot.conn
        if self.cancel_on_stop and conn is not None and not conn.closed:
            prior = slot.cancel_thread
            if prior is not None and prior.is_alive():
                return   # the last one is still on its way (no answer yet)
            # From a thread of its own: libpq's cancel request waits for the
            # server without a timeout.
            slot.cancel_thread = cancel_in_background(conn)
            if not slot.first_cancel:
                slot.first_cancel = time.monotonic()

    def _cut_stuck_claim(self, slot: SlotState, now: float) -> None:
        """A claim that its cancel did not end within twice _short() (the
        connection stopped answering, or the cancel went astray) is not
        waited for: its connection is shut down, and the server rolls the
        claim back."""
        if slot.first_cancel and now - slot.first_cancel > 2 * self._short() and slot.conn is not None:
            slot.first_cancel = now   # once per period
            log.warning("worker %s: slot %d: the cancelled claim did not end; closing its connection",
                        self._label(), slot.index)
            cut(slot.conn)

    def _cancels_sent(self) -> None:
        """Waits (at most _short() in all) for the cancel requests still on
        their way, before their connections are closed."""
        end = time.monotonic() + self._short()
        for slot in getattr(self, "_slots", []):
            t = slot.cancel_thread
            if t is not None:
                t.join(max(0.0, end - time.monotonic()))

    def _fatal_first(self, exc: BaseException) -> bool:
        """Records the first fatal error (True when ``exc`` is it, logged)."""
        if self._fatal is not None:
            return False
        self._fatal = exc
        log.error("worker %s: %s; stopping", self._label(), _error_text(exc))
        return True

    def _log_reconnect(self, slot: SlotState, exc: BaseException, failed: bool,
                       delay: float = 0.0) -> None:
        if failed:
            log.warning("worker %s: reconnect failed (%s); next try in %.1f s",
                        self._label(), _error_text(exc), delay)
        else:
            log.warning("worker %s: slot %d lost its connection (%s); reconnecting",
                        self._label(), slot.index, _error_text(exc))

    def _reconnect_failed(self, slot: SlotState, err: BaseException, delay: float) -> Optional[float]:
        """A reconnect attempt failed after ``delay`` (the backoff so far):
        None when no retry can fix it (the database was dropped, the password
        changed: the worker stops), else how long to wait before the next
        try (logged)."""
        if is_fatal(err):
            self._set_fatal(err)
            return None
        self._log_reconnect(slot, err, failed=True, delay=delay)
        return jittered(delay)

    def _log_pending_lost(self, token: int, exc: BaseException) -> None:
        log.warning("worker %s: could not complete job token %d (%s); it returns "
                    "when its lease ends", self._label(), token, _error_text(exc))

    @staticmethod
    def _done_counted(stats: Any, pending: list, rows: list) -> bool:
        """A claim completed the ``pending`` tokens: counted in ``stats``; True
        when it claimed a job too."""
        stats.completed += len(pending)
        if rows:
            stats.claimed += 1
        return bool(rows)

    def _done_error(self, exc: psycopg.Error) -> str:
        """A claim that completed earlier tokens failed: "stale" (the tokens'
        outcomes are dropped, logged here), "redo" (cancelled: complete them
        on their own) or "raise"."""
        if _sqlstate(exc) == STALE:
            log.warning("worker %s: stale token at completion (%s); outcome dropped",
                        self._label(), exc.diag.message_primary)
            return "stale"
        return "redo" if _sqlstate(exc) == CANCELED else "raise"

    def _claim_cancelled(self, exc: psycopg.Error, stopping: bool) -> bool:
        """A plain claim failed: True when it was cancelled (by a stop, or
        logged here), False when the error is to be raised."""
        if _sqlstate(exc) != CANCELED:
            return False
        if not stopping:
            log.warning("worker %s: claim cancelled (%s)", self._label(),
                        exc.diag.message_primary)
        return True

    def _claim_failed(self, exc: psycopg.Error) -> Optional[list]:
        """A plain claim failed: [] when it was cancelled (None: by a stop);
        else raises, as _Fatal when no retry can fix it."""
        stopping = bool(getattr(self, "stopping"))
        if self._claim_cancelled(exc, stopping):
            return None if stopping else []
        self._claim_fatal(exc)
        raise exc

    @staticmethod
    def _claim_fatal(exc: psycopg.Error) -> None:
        if is_fatal(exc):
            raise _Fatal(exc) from exc

    def _outcome(self, job: Job, abandoned: bool, lost: bool, stopping: bool,
                 outcome: Tuple[str, Any]) -> Tuple[str, Any, Any]:
        """What a finished handler's outcome becomes: ("drop", ...) nothing to
        send, ("stale", ...) the heartbeat saw the lease lost, ("defer", ...)
        complete inside the next claim, ("complete", result, None) or
        ("fail", error text, retry delay or None)."""
        if abandoned:
            log.info("worker %s: job %d finished after it was released; outcome dropped",
                     self._label(), job.id)
            return "drop", None, None
        if lost:   # the heartbeat said so; nothing to send
            return "stale", None, None
        kind, value = outcome
        if kind == "ok":
            why = unstorable(value)
            if why is not None:
                log.warning("worker %s: job %d attempt %d failed: %s", self._label(), job.id,
                            job.attempt, why)
                return "fail", why, None
            features = getattr(self, "features", None)
            if value is None and features is not None and features.claim_done and not stopping:
                return "defer", None, None
            return "complete", value, None
        if kind == "retry":
            return "fail", _error_text(value), value.after
        log_failure(self._label(), job, value)
        return "fail", _error_text(value), None

    def _tx_error(self, job: Job, exc: BaseException, lost: bool, abandoned: bool,
                  conn: Any) -> Tuple[str, Any]:
        """What a transactional job's error becomes: ("stale", None),
        ("release", None) after an abandon, ("raise", None) when the slot's
        connection is gone, or ("fail", retry delay or None)."""
        if not isinstance(exc, Retry) and (_sqlstate(exc) == STALE or lost):
            if not lost:   # else the heartbeat said so
                log.warning("worker %s: job %d attempt %d: token is stale, its writes were "
                            "rolled back (%s)", self._label(), job.id, job.attempt,
                            _error_text(exc))
            return "stale", None
        if abandoned:
            return "release", None
        if isinstance(exc, Retry):
            return "fail", exc.after
        if conn.closed or conn.broken:   # the slot's connection is gone
            return "raise", None
        log_failure(self._label(), job, exc)
        return "fail", None

    def _stale_outcome(self, what: str, job_or_token: Any, exc: psycopg.Error) -> None:
        """A completion or failure failed: raises ``exc`` unless it was refused
        with PC001 (logged here; the outcome is dropped)."""
        if _sqlstate(exc) != STALE:
            raise exc
        if what == "complete":
            log.warning("worker %s: stale token %d at completion (%s); outcome dropped",
                        self._label(), job_or_token, exc.diag.message_primary)
        else:
            log.warning("worker %s: stale token for job %d at fail (%s); outcome dropped",
                        self._label(), job_or_token.id, exc.diag.message_primary)

    # -- shutdown ------------------------------------------------------------
    def _abandon(self, slot: SlotState, cancel_idle: bool) -> Optional[Job]:
        """Past the grace period, a slot still running: its job, marked
        abandoned (a transactional job's statement is cancelled: the slot rolls
        back). None: no job; its claim is cancelled (with ``cancel_idle``,
        whatever the slot does)."""
        job = slot.job
        if job is None:
            if cancel_idle or slot.state == "claiming":
                self._cancel(slot)
            return None
        slot.abandoned = True
        if self.transactional:
            self._cancel(slot)
        return job

    def _log_release(self, job: Job, exc: Optional[BaseException], fresh: bool,
                     how: str = "closed") -> None:
        """Shutdown's release of a job still running after the grace period."""
        if exc is None:
            if fresh:
                log.warning("worker %s: job %d still running after the grace period: its "
                            "transaction was %s and the item released", self._label(), job.id,
                            how)
            else:
                log.warning("worker %s: job %d still running after the grace period: "
                            "released (its outcome will be dropped)", self._label(), job.id)
        elif not fresh or _sqlstate(exc) != STALE:
            log.warning("worker %s: could not release job %d (%s); it returns when its "
                        "lease ends", self._label(), job.id, _error_text(exc))

    def _log_abandon_release(self, job: Job, exc: Optional[BaseException]) -> None:
        """A transactional job rolled back at shutdown, then released."""
        if exc is None:
            log.warning("worker %s: job %d rolled back and released at shutdown",
                        self._label(), job.id)
        elif _sqlstate(exc) == STALE:   # its lease ran out meanwhile: ready anyway
            log.info("worker %s: job %d rolled back; its lease had already ended",
                     self._label(), job.id)
        else:
            log.warning("worker %s: job %d rolled back; release failed (%s)",
                        self._label(), job.id, _error_text(exc))

    def _beat_conn_needed(self, slot: SlotState) -> bool:
        """Whether the heartbeat must open a connection of its own now: in
        plain mode (a transactional job's lease can only be extended inside
        its transaction), when it has none that works (the slot's broke)."""
        conn = slot.beat_conn
        return not self.transactional and (conn is None or conn.closed or conn.broken)

    def _log_beat_conn(self, slot: SlotState, exc: Optional[BaseException]) -> None:
        """The heartbeat opened its own connection (``exc`` None), or could not."""
        if exc is None:
            log.warning("worker %s: slot %d lost its connection under a running job; "
                        "the heartbeat extends from a connection of its own", self._label(),
                        slot.index)
        else:
            log.warning("worker %s: heartbeat could not connect: %s", self._label(), exc)

    def _beat_failed(self, job: Job, exc: BaseException) -> bool:
        """The heartbeat's extend failed: True when the lease is lost (logged)."""
        if _sqlstate(exc) == STALE:
            log.warning("worker %s: job %d attempt %d lost its lease (%s); its "
                        "outcome will be dropped", self._label(), job.id,
                        job.attempt, _primary(exc))
            return True
        log.warning("worker %s: heartbeat of job %d failed (%s); trying again",
                    self._label(), job.id, _error_text(exc))
        return False
