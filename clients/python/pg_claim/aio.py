"""The asyncio worker: the same loop as :class:`pg_claim.Worker` on psycopg's
AsyncConnection, with one task (and one connection) per concurrent job."""
from __future__ import annotations

import asyncio
import inspect
import logging
import signal
import threading
import time
from typing import Any, Awaitable, Callable, Dict, List, Optional, Tuple, Union

import psycopg

from ._common import Interval, Job, Retry, WorkerStats, to_interval
from ._features import FEATURES_SQL, Features
from .errors import is_fatal, map_error
from .worker import (ASSERT_SQL, BACKOFF_FIRST, BACKOFF_MAX, CANCELED, FATAL, _Fatal,
                     connect_kwargs_for, default_conninfo, default_worker_name, log_failure, COMPLETE_RESULT_SQL, LEASE_SECONDS_SQL, ClaimSQL, LeaseClock,
                     COMPLETE_SQL, EXTEND_SQL, FAIL_SQL, RELEASE_SQL, STALE, _error_text,
                     _sqlstate)
from psycopg.types.json import Jsonb

log = logging.getLogger("pg_claim.worker")

AsyncHandler = Callable[[Job], Union[Awaitable[Any], Any]]


class _Abandoned(Exception):
    pass


class _ASlot:
    def __init__(self, index: int) -> None:
        self.index = index
        self.conn: Optional[psycopg.AsyncConnection[Any]] = None
        self.cond = asyncio.Condition()
        self.state = "idle"
        self.job: Optional[Job] = None
        self.lost = False
        self.abandoned = False
        self.next_beat = 0.0
        self.beat_idle = False
        self.beat_wake_at = 0.0
        self.started = 0               # jobs started in this slot
        self.last_cancel = 0.0
        self.task: Optional["asyncio.Task[None]"] = None
        self.beat_task: Optional["asyncio.Task[None]"] = None
        self.closed = False
        self.leases = LeaseClock(None)
        self.released = 0              # token this slot released itself at shutdown
        self._cur: Optional[psycopg.AsyncCursor[Any]] = None

    def claim_cursor(self) -> "psycopg.AsyncCursor[Any]":
        """The slot task's cursor for its claims and outcomes, one per
        connection."""
        cur = self._cur
        if cur is None or cur.connection is not self.conn:
            assert self.conn is not None
            cur = self._cur = self.conn.cursor()
        return cur


class AsyncWorker:
    """asyncio version of :class:`pg_claim.Worker` (same arguments).

    ``handler`` is normally ``async def handler(job)``; a plain function's
    return value is used as is. ``await worker.run()`` runs until stopped:
    SIGTERM/SIGINT (when run in the main thread), :meth:`stop`, ``burst`` or
    ``max_jobs``. In transactional mode ``job.conn`` is the AsyncConnection of
    the handler's transaction.
    """

    def __init__(self, conninfo: Optional[str], queue: str, handler: AsyncHandler, *,
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
        self.stats = WorkerStats()
        self.features: Optional[Features] = None
        self._stop: Optional[asyncio.Event] = None
        self._hurry = False
        self._stop_requested = False
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._tickets = 0
        self._slots: List[_ASlot] = []
        self._sql: Optional[ClaimSQL] = None
        self._fatal: Optional[BaseException] = None

    # -- public ------------------------------------------------------------
    def stop(self) -> None:
        """Stop claiming; running handlers get ``grace`` seconds. Safe to call
        from any thread; a second call ends the grace period at once."""
        if self._stop_requested:
            self._hurry = True
        self._stop_requested = True
        loop, ev = self._loop, self._stop
        if loop is not None and ev is not None:
            if threading.current_thread() is threading.main_thread() and _running_loop() is loop:
                ev.set()
            else:
                loop.call_soon_threadsafe(ev.set)

    @property
    def stopping(self) -> bool:
        return self._stop_requested

    async def run(self) -> WorkerStats:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        if self._stop_requested:
            self._stop.set()
        installed: List[signal.Signals] = []
        if self.handle_signals and threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                try:
                    self._loop.add_signal_handler(sig, self._on_signal, sig)
                    installed.append(sig)
                except (NotImplementedError, RuntimeError):
                    pass
        try:
            await self._start()
            tasks = [s.task for s in self._slots if s.task is not None]
            stop_wait = asyncio.ensure_future(self._stop.wait())
            try:
                await asyncio.wait([*tasks, stop_wait], return_when=asyncio.FIRST_COMPLETED)
                while not self._stop.is_set() and not all(t.done() for t in tasks):
                    await asyncio.wait([*tasks, stop_wait], return_when=asyncio.FIRST_COMPLETED)
            finally:
                stop_wait.cancel()
            self._stop_requested = True
            self._stop.set()
            await self._shutdown()
        finally:
            for sig in installed:
                self._loop.remove_signal_handler(sig)
            await self._close()
        if self._fatal is not None:
            raise map_error(self._fatal) from self._fatal
        return self.stats

    # -- set-up and shutdown -------------------------------------------------
    def _on_signal(self, signum: int) -> None:
        log.info("worker %s: signal %d, stopping", self._label(), signum)
        self.stop()

    def _label(self) -> str:
        return self.name or self.queue

    async def _connect(self) -> "psycopg.AsyncConnection[Any]":
        kwargs = connect_kwargs_for(self.conninfo, self.connect_kwargs, self.prepare, self._label())
        conn: psycopg.AsyncConnection[Any] = await psycopg.AsyncConnection.connect(
            self.conninfo, autocommit=True, **kwargs)
        return conn

    async def _start(self) -> None:
        for i in range(self.concurrency):
            slot = _ASlot(i)
            slot.conn = await self._connect()
            self._slots.append(slot)
        conn = self._slots[0].conn
        assert conn is not None
        cur = await conn.execute(FEATURES_SQL)
        self.features = Features.from_rows(await cur.fetchall())
        self._sql = ClaimSQL(conn, self.queue, self.lease, self.wait, self.name)
        fixed: Optional[float] = None
        if self.lease is not None:
            cur = await conn.execute(LEASE_SECONDS_SQL, (self.lease,))
            row = await cur.fetchone()
            fixed = max(float(row[0]), 0.001) if row is not None else None
        for slot in self._slots:
            slot.leases = LeaseClock(fixed)
        for slot in self._slots:
            if self.heartbeat:
                slot.beat_task = asyncio.ensure_future(self._beat_main(slot))
            slot.task = asyncio.ensure_future(self._slot_main(slot))

    async def _shutdown(self) -> None:
        assert self._stop is not None
        deadline = time.monotonic() + self.grace
        while time.monotonic() < deadline and not self._hurry:
            alive = [s for s in self._slots if s.task is not None and not s.task.done()]
            if not alive:
                break
            now = time.monotonic()
            for slot in alive:
                if slot.state == "claiming" and now - slot.last_cancel > 0.25:
                    slot.last_cancel = now
                    self._cancel(slot)
            await asyncio.wait([s.task for s in alive if s.task is not None], timeout=0.05)
        waiting: List[_ASlot] = []
        held_tx: List[Tuple[_ASlot, Job]] = []
        for slot in self._slots:
            if slot.task is None or slot.task.done():
                continue
            job = slot.job
            if job is None:
                self._cancel(slot)
                waiting.append(slot)
                continue
            slot.abandoned = True
            if self.transactional:
                # The slot rolls back and releases the item itself.
                self._cancel(slot)
                held_tx.append((slot, job))
            else:
                await self._release(slot, job)
            waiting.append(slot)
        if waiting:
            await asyncio.wait([s.task for s in waiting if s.task is not None], timeout=1.0)
        for slot in waiting:
            if slot.task is not None and not slot.task.done():
                slot.task.cancel()
                try:
                    await slot.task
                except BaseException:
                    pass
        for slot, job in held_tx:
            if slot.released != job.token:
                await self._release_fresh(slot, job)

    async def _release_fresh(self, slot: _ASlot, job: Job) -> None:
        """Release from a connection of our own, after the slot's
        transaction was rolled back (its task cancelled) or its connection
        closed."""
        if slot.conn is not None and not slot.conn.closed and slot.conn.info.transaction_status != 0:
            try:
                await slot.conn.close()
            except Exception as exc:
                log.debug("close failed: %s", exc)
        kwargs = dict(self.connect_kwargs)
        kwargs.setdefault("prepare_threshold", None)
        try:
            conn = await psycopg.AsyncConnection.connect(self.conninfo, autocommit=True, **kwargs)
            try:
                async with conn.transaction():
                    await conn.execute("SET LOCAL lock_timeout = '5s'")
                    await conn.execute(RELEASE_SQL, (job.token,))
            finally:
                await conn.close()
            self.stats.released += 1
            log.warning("worker %s: job %d still running after the grace period: its "
                        "transaction was rolled back and the item released", self._label(), job.id)
        except psycopg.Error as exc:
            if _sqlstate(exc) != STALE:
                log.warning("worker %s: could not release job %d (%s); it returns when its "
                            "lease ends", self._label(), job.id, _error_text(exc))

    def _cancel(self, slot: _ASlot) -> None:
        if not self.cancel_on_stop:
            return
        conn = slot.conn
        if conn is not None and not conn.closed:
            try:
                conn.cancel()
            except psycopg.Error as exc:
                log.debug("cancel failed: %s", exc)

    async def _release(self, slot: _ASlot, job: Job) -> None:
        conn = slot.conn
        try:
            assert conn is not None
            await conn.execute(RELEASE_SQL, (job.token,))
            self.stats.released += 1
            log.warning("worker %s: job %d still running after the grace period: released "
                        "(its outcome will be dropped)", self._label(), job.id)
        except psycopg.Error as exc:
            log.warning("worker %s: could not release job %d (%s); it returns when its lease ends",
                        self._label(), job.id, exc)

    async def _close(self) -> None:
        for slot in self._slots:
            slot.closed = True
            if slot.beat_task is not None:
                slot.beat_task.cancel()
                try:
                    await slot.beat_task
                except BaseException:
                    pass
            if slot.conn is not None and not slot.conn.closed:
                await slot.conn.close()

    # -- the slot loop -------------------------------------------------------
    def _take_ticket(self) -> bool:
        if self.max_jobs is None:
            return True
        if self._tickets >= self.max_jobs:
            return False
        self._tickets += 1
        return True

    def _return_ticket(self) -> None:
        if self.max_jobs is not None:
            self._tickets -= 1

    def _set_fatal(self, exc: BaseException) -> None:
        if self._fatal is None:
            log.error("worker %s: %s; stopping", self._label(), _error_text(exc))
            self._fatal = exc
        self.stop()

    async def _slot_main(self, slot: _ASlot) -> None:
        assert self._stop is not None
        pending: List[int] = []
        backoff = BACKOFF_FIRST
        try:
            while not self._stop.is_set():
                try:
                    if not self._take_ticket():
                        break
                    rows = await self._claim(slot, pending)
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
                    if await self._process(slot, job):
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
                        await self._reconnect(slot, exc)
                    else:
                        log.warning("worker %s: slot %d: %s (SQLSTATE %s); retrying in %.1f s",
                                    self._label(), slot.index, _error_text(exc), _sqlstate(exc),
                                    backoff)
                        await self._sleep(backoff)
                        backoff = min(backoff * 2, BACKOFF_MAX)
                except Exception:
                    log.exception("worker %s: slot %d: unexpected error", self._label(), slot.index)
                    pending = []
                    await self._sleep(backoff)
                    backoff = min(backoff * 2, BACKOFF_MAX)
            if pending:
                try:
                    await self._complete_now(slot, pending[0], None)
                except psycopg.Error as exc:
                    log.warning("worker %s: could not complete job token %d (%s); it returns "
                                "when its lease ends", self._label(), pending[0], _error_text(exc))
        finally:
            slot.state = "done"

    async def _sleep(self, seconds: float) -> None:
        """Sleep, or less when the worker is stopped meanwhile."""
        assert self._stop is not None
        try:
            await asyncio.wait_for(self._stop.wait(), seconds)
        except asyncio.TimeoutError:
            pass

    async def _reconnect(self, slot: _ASlot, exc: BaseException) -> None:
        assert self._stop is not None
        log.warning("worker %s: slot %d lost its connection (%s); reconnecting",
                    self._label(), slot.index, _error_text(exc))
        delay = BACKOFF_FIRST
        while not self._stop.is_set():
            try:
                old = slot.conn
                slot.conn = await self._connect()
                if old is not None:
                    await old.close()
                return
            except psycopg.OperationalError as err:
                log.warning("worker %s: reconnect failed (%s); next try in %.1f s",
                            self._label(), _error_text(err), delay)
                await self._sleep(delay)
                delay = min(delay * 2, BACKOFF_MAX)

    async def _fetch(self, slot: _ASlot, query: str,
                     params: Optional[Tuple[Any, ...]]) -> List[Tuple[Any, ...]]:
        cur = slot.claim_cursor()
        await cur.execute(query, params)
        return await cur.fetchall()

    async def _claim(self, slot: _ASlot, pending: List[int]) -> Optional[List[Tuple[Any, ...]]]:
        assert self._stop is not None
        conn = slot.conn
        assert conn is not None
        if self._stop.is_set():
            if pending:
                await self._complete_now(slot, pending[0], None)
            return None
        q = self._sql
        assert q is not None
        slot.state = "claiming"
        try:
            if pending:
                try:
                    rows = await self._fetch(slot, slot.leases.pick(q).done, (pending,))
                    self.stats.completed += len(pending)
                    if rows:
                        self.stats.claimed += 1
                        return rows
                except psycopg.Error as exc:
                    if _sqlstate(exc) == STALE:
                        self.stats.stale += len(pending)
                        log.warning("worker %s: stale token at completion (%s); outcome dropped",
                                    self._label(), exc.diag.message_primary)
                    elif _sqlstate(exc) == CANCELED:
                        await self._complete_now(slot, pending[0], None)
                        if self._stop.is_set():
                            return None
                    else:
                        raise
                if self._stop.is_set():
                    return None
            try:
                rows = await self._fetch(slot, slot.leases.pick(q).plain, None)
            except psycopg.Error as exc:
                if _sqlstate(exc) == CANCELED:
                    if self._stop.is_set():
                        return None
                    log.warning("worker %s: claim cancelled (%s)", self._label(),
                                exc.diag.message_primary)
                    return []
                raise
            if rows:
                self.stats.claimed += 1
            return rows
        except psycopg.Error as exc:
            if is_fatal(exc):
                raise _Fatal(exc) from exc
            raise
        finally:
            if slot.state == "claiming":
                slot.state = "busy"

    async def _start_job(self, slot: _ASlot, job: Job) -> None:
        async with slot.cond:
            slot.job = job
            slot.lost = False
            slot.abandoned = False
            slot.next_beat = time.monotonic() + job.lease_seconds / 3.0
            slot.started += 1
            if slot.beat_idle or slot.next_beat < slot.beat_wake_at:
                slot.cond.notify()

    async def _end_job(self, slot: _ASlot) -> Tuple[bool, bool]:
        async with slot.cond:
            slot.job = None
            return slot.abandoned, slot.lost

    async def _call_handler(self, job: Job) -> Any:
        value = self.handler(job)
        if inspect.isawaitable(value):
            value = await value
        return value

    async def _process(self, slot: _ASlot, job: Job) -> bool:
        assert self._stop is not None
        if self.transactional:
            await self._process_tx(slot, job)
            return False
        await self._start_job(slot, job)
        outcome: Tuple[str, Any]
        try:
            outcome = ("ok", await self._call_handler(job))
        except Retry as exc:
            outcome = ("retry", exc)
        except Exception as exc:
            outcome = ("fail", exc)
        abandoned, lost = await self._end_job(slot)
        if abandoned:
            log.info("worker %s: job %d finished after it was released; outcome dropped",
                     self._label(), job.id)
            return False
        if lost:   # the heartbeat said so; nothing to send
            self.stats.stale += 1
            return False
        kind, value = outcome
        if kind == "ok":
            if (value is None and self.features is not None and self.features.claim_done
                    and not self._stop.is_set()):
                return True
            await self._complete_now(slot, job.token, value)
        elif kind == "retry":
            await self._fail_now(slot, job, _error_text(value), value.after)
        else:
            log_failure(self._label(), job, value)
            await self._fail_now(slot, job, _error_text(value), None)
        return False

    async def _process_tx(self, slot: _ASlot, job: Job) -> None:
        conn = slot.conn
        assert conn is not None
        try:
            async with conn.transaction():
                await conn.execute(ASSERT_SQL, (job.token,))
                job.conn = conn
                await self._start_job(slot, job)
                try:
                    result = await self._call_handler(job)
                finally:
                    abandoned, _lost = await self._end_job(slot)
                if abandoned:
                    raise _Abandoned()
                await self._execute_complete(slot.claim_cursor(), job.token, result)
            self.stats.completed += 1
        except _Abandoned:
            await self._release_after_abandon(slot, job)
        except Retry as exc:
            if slot.abandoned:
                await self._release_after_abandon(slot, job)
            else:
                await self._fail_now(slot, job, _error_text(exc), exc.after)
        except Exception as exc:
            if _sqlstate(exc) == STALE or slot.lost:
                self.stats.stale += 1
                if not slot.lost:   # else the heartbeat said so
                    log.warning("worker %s: job %d attempt %d: token is stale, its writes were "
                                "rolled back (%s)", self._label(), job.id, job.attempt,
                                _error_text(exc))
            elif slot.abandoned:
                await self._release_after_abandon(slot, job)
            elif conn.closed or conn.broken:   # the slot's connection is gone
                raise
            else:
                log_failure(self._label(), job, exc)
                await self._fail_now(slot, job, _error_text(exc), None)
        finally:
            job.conn = None

    async def _release_after_abandon(self, slot: _ASlot, job: Job) -> None:
        conn = slot.conn
        assert conn is not None
        try:
            await conn.execute(RELEASE_SQL, (job.token,))
            self.stats.released += 1
            slot.released = job.token
            log.warning("worker %s: job %d rolled back and released at shutdown",
                        self._label(), job.id)
        except psycopg.Error as exc:
            if _sqlstate(exc) == STALE:   # its lease ran out meanwhile: ready anyway
                log.info("worker %s: job %d rolled back; its lease had already ended",
                         self._label(), job.id)
            else:
                log.warning("worker %s: job %d rolled back; release failed (%s)",
                            self._label(), job.id, _error_text(exc))

    async def _execute_complete(self, cur: "psycopg.AsyncCursor[Any]", token: int,
                                result: Any) -> None:
        if result is not None and self.features is not None and self.features.complete_result:
            await cur.execute(COMPLETE_RESULT_SQL, (token, Jsonb(result)))
        else:
            await cur.execute(COMPLETE_SQL, (token,))

    async def _complete_now(self, slot: _ASlot, token: int, result: Any) -> None:
        for attempt in range(3):
            try:
                await self._execute_complete(slot.claim_cursor(), token, result)
                self.stats.completed += 1
                return
            except psycopg.Error as exc:
                if _sqlstate(exc) == STALE:
                    self.stats.stale += 1
                    log.warning("worker %s: stale token %d at completion (%s); outcome dropped",
                                self._label(), token, exc.diag.message_primary)
                    return
                if _sqlstate(exc) != CANCELED or attempt == 2:
                    raise

    async def _fail_now(self, slot: _ASlot, job: Job, error: str, retry_in: Any) -> None:
        for attempt in range(3):
            try:
                await slot.claim_cursor().execute(FAIL_SQL, (job.token, error, retry_in))
                if retry_in is not None:
                    self.stats.retried += 1
                else:
                    self.stats.failed += 1
                return
            except psycopg.Error as exc:
                if _sqlstate(exc) == STALE:
                    self.stats.stale += 1
                    log.warning("worker %s: stale token for job %d at fail (%s); outcome dropped",
                                self._label(), job.id, exc.diag.message_primary)
                    return
                if _sqlstate(exc) != CANCELED or attempt == 2:
                    raise

    # -- heartbeat -----------------------------------------------------------
    async def _beat_main(self, slot: _ASlot) -> None:
        seen = 0
        period = 1.0
        async with slot.cond:
            while not slot.closed:
                job = slot.job
                if job is None or slot.lost or slot.abandoned:
                    if slot.started != seen:
                        # Jobs ran since the last look: wait one beat period
                        # with a timeout, so that short jobs do not each have
                        # to wake this thread.
                        seen = slot.started
                        slot.beat_wake_at = time.monotonic() + period
                        try:
                            await asyncio.wait_for(slot.cond.wait(), period)
                        except asyncio.TimeoutError:
                            pass
                    else:
                        slot.beat_idle = True
                        await slot.cond.wait()
                        slot.beat_idle = False
                    continue
                period = job.lease_seconds / 3.0
                delay = slot.next_beat - time.monotonic()
                if delay > 0:
                    slot.beat_wake_at = time.monotonic() + delay
                    try:
                        await asyncio.wait_for(slot.cond.wait(), delay)
                    except asyncio.TimeoutError:
                        pass
                    continue
                slot.next_beat = time.monotonic() + job.lease_seconds / 3.0
                conn = slot.conn
                try:
                    assert conn is not None
                    await conn.execute(EXTEND_SQL, (job.token, self.lease))
                    self.stats.extended += 1
                except psycopg.Error as exc:
                    if _sqlstate(exc) == STALE:
                        slot.lost = True
                        log.warning("worker %s: job %d attempt %d lost its lease (%s); its "
                                    "outcome will be dropped", self._label(), job.id,
                                    job.attempt, exc.diag.message_primary)
                    else:
                        log.debug("heartbeat of job %d: %s", job.id, exc)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    log.debug("heartbeat of job %d: %s", job.id, exc)


def _running_loop() -> Optional[asyncio.AbstractEventLoop]:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None
