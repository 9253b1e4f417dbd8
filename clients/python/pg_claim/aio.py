"""The asyncio worker: the same loop as :class:`pg_claim.Worker` on psycopg's
AsyncConnection, with one task (and one connection) per concurrent job.
What the two workers decide alike is in :mod:`pg_claim._loop`."""
from __future__ import annotations

import asyncio
import inspect
import signal
import threading
import time
from typing import Any, Awaitable, Callable, List, Optional, Tuple, Union

import psycopg

from ._common import Job, Retry, WorkerStats
from ._features import FEATURES_SQL, Features
from ._loop import (BACKOFF_FIRST, BACKOFF_MAX, CANCELED, SlotState, WorkerBase,
                    OUTCOME_TRIES, HandlerExit, _Abandoned, jittered, _error_text, _sqlstate, log,
                    transient, unstorable)
from ._deadline import TimedAsyncCursor, armed
from .errors import map_error
from .worker import (ASSERT_SQL, EXTEND_SQL, FAIL_SQL, LEASE_SECONDS_SQL, RELEASE_SQL, ClaimSQL,
                     LeaseClock, complete_statement, connect_kwargs_for)

AsyncHandler = Callable[[Job], Union[Awaitable[Any], Any]]


class _ASlot(SlotState):
    def __init__(self, index: int) -> None:
        super().__init__(index)
        self.conn: Optional[psycopg.AsyncConnection[Any]] = None
        self.cond = asyncio.Condition()
        self.task: Optional["asyncio.Task[None]"] = None
        self.beat_task: Optional["asyncio.Task[None]"] = None
        self.leases = LeaseClock(None)
        self.released = 0              # token this slot released itself at shutdown
        self.pending: List[int] = []   # a finished job's token, to complete on the next claim


async def _finish(task: "Optional[asyncio.Task[None]]") -> None:
    """Cancel ``task`` and wait for it to end, whatever it raises."""
    if task is None:
        return
    task.cancel()
    try:
        await task
    except BaseException:
        pass


class AsyncWorker(WorkerBase):
    """asyncio version of :class:`pg_claim.Worker` (same arguments).

    ``handler`` is normally ``async def handler(job)``; a plain function's
    return value is used as is. ``await worker.run()`` runs until stopped:
    SIGTERM/SIGINT (when run in the main thread), :meth:`stop`, ``burst`` or
    ``max_jobs``. In transactional mode ``job.conn`` is the AsyncConnection of
    the handler's transaction.
    """

    def _init_runtime(self) -> None:
        self.stats = WorkerStats()
        self.features: Optional[Features] = None
        self._stop: Optional[asyncio.Event] = None
        self._hurry = False
        self._stop_requested = False
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._slots: List[_ASlot] = []
        self._sql: Optional[ClaimSQL] = None

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
        self._calls.start()
        try:
            try:
                await self._start()
            except psycopg.Error as exc:
                self._set_fatal(exc)   # raised below as its PgClaimError
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
        except asyncio.CancelledError:
            # run() itself was cancelled: stop at once (no grace period),
            # give back every claim, and let the cancellation through.
            await self._cancelled_shutdown()
            raise
        finally:
            for sig in installed:
                self._loop.remove_signal_handler(sig)
            await self._close()
            self._calls.close()
        if self._fatal is not None:
            raise map_error(self._fatal) from self._fatal
        return self.stats

    # -- set-up and shutdown -------------------------------------------------
    def _on_signal(self, signum: int) -> None:
        log.info("worker %s: signal %d, stopping", self._label(), signum)
        self.stop()

    async def _connect(self) -> "psycopg.AsyncConnection[Any]":
        kwargs = self._timed_kwargs(connect_kwargs_for(self.conninfo, self.connect_kwargs, self.prepare,
                                                       self._label()))
        kwargs.setdefault("cursor_factory", TimedAsyncCursor)
        conn: psycopg.AsyncConnection[Any] = await psycopg.AsyncConnection.connect(
            self.conninfo, autocommit=True, **kwargs)
        conn.pgc_calls = self._calls   # type: ignore[attr-defined]
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
        fixed = None
        if self.lease is not None:
            cur = await conn.execute(LEASE_SECONDS_SQL, (self.lease,))
            fixed = LeaseClock.seconds_of(await cur.fetchone())
        for slot in self._slots:
            slot.leases = LeaseClock(fixed)
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
                if slot.state == "claiming":
                    self._cut_stuck_claim(slot, now)
            await asyncio.wait([s.task for s in alive if s.task is not None], timeout=0.05)
        waiting: List[_ASlot] = []
        held_tx: List[Tuple[_ASlot, Job]] = []
        for slot in self._slots:
            if slot.task is None or slot.task.done():
                continue
            waiting.append(slot)
            job = self._abandon(slot, cancel_idle=True)
            if job is not None and self.transactional:
                held_tx.append((slot, job))   # the slot rolls back and releases it itself
            elif job is not None:
                await self._release(slot, job)
        if waiting:
            await asyncio.wait([s.task for s in waiting if s.task is not None], timeout=1.0)
        for slot in waiting:
            if slot.task is not None and not slot.task.done():
                await _finish(slot.task)
        for slot, job in held_tx:
            if slot.released != job.token:
                await self._release_fresh(slot, job)

    async def _cancelled_shutdown(self) -> None:
        """run() was cancelled: stop claiming, cancel every slot's task (its
        claim or handler), then release the jobs they held and complete the
        ones whose completion was waiting for the next claim, each from a
        connection of its own. Whatever happens, every slot has ended."""
        self._stop_requested = True
        self._hurry = True
        if self._stop is not None:
            self._stop.set()
        held = [(slot, slot.job) for slot in self._slots if slot.job is not None]
        for slot in self._slots:
            slot.abandoned = slot.job is not None
            if slot.state == "claiming" or (self.transactional and slot.job is not None):
                self._cancel(slot)   # the server stops the claim (or the statement)
        for slot in self._slots:
            await _finish(slot.task)
            await _finish(slot.beat_task)
        for slot, job in held:
            if job is not None and slot.released != job.token:
                await self._release_fresh(slot, job)
        for slot in self._slots:
            for token in slot.pending:
                try:
                    conn = await psycopg.AsyncConnection.connect(self.conninfo, autocommit=True,
                                                                 **self._fresh_kwargs())
                    try:
                        with armed(self._calls, conn):
                            await conn.execute(*complete_statement(self.features, token, None))
                        self.stats.completed += 1
                    finally:
                        await conn.close()
                except psycopg.Error as exc:
                    self._log_pending_lost(token, exc)
            slot.pending = []

    async def _release_fresh(self, slot: _ASlot, job: Job) -> None:
        """Release from a connection of our own, after the slot's
        transaction was rolled back (its task cancelled) or its connection
        closed."""
        if slot.conn is not None and not slot.conn.closed and slot.conn.info.transaction_status != 0:
            try:
                await slot.conn.close()
            except Exception as exc:
                log.debug("close failed: %s", exc)
        try:
            conn = await psycopg.AsyncConnection.connect(self.conninfo, autocommit=True,
                                                         **self._fresh_kwargs())
            try:
                with armed(self._calls, conn):
                    async with conn.transaction():
                        await conn.execute("SET LOCAL lock_timeout = '5s'")
                        await conn.execute(RELEASE_SQL, (job.token,))
            finally:
                await conn.close()
            self.stats.released += 1
            self._log_release(job, None, fresh=True, how="rolled back")
        except psycopg.Error as exc:
            self._log_release(job, exc, fresh=True)

    async def _release(self, slot: _ASlot, job: Job) -> None:
        try:
            assert slot.conn is not None
            await slot.conn.execute(RELEASE_SQL, (job.token,))
            self.stats.released += 1
            self._log_release(job, None, fresh=False)
        except psycopg.Error as exc:
            self._log_release(job, exc, fresh=False)

    async def _beat_conn(self, slot: _ASlot) -> "Optional[psycopg.AsyncConnection[Any]]":
        """The heartbeat's own connection, opened when the slot's broke (see
        WorkerBase._beat_conn_needed); None in transactional mode."""
        if self._beat_conn_needed(slot):
            try:
                slot.beat_conn = await self._connect()
            except psycopg.Error as exc:
                self._log_beat_conn(slot, exc)
                return None
            self._log_beat_conn(slot, None)
        return None if self.transactional else slot.beat_conn

    async def _close(self) -> None:
        # The cancel requests still on their way (at most _short() in all),
        # before their connections close.
        end = time.monotonic() + self._short()
        while time.monotonic() < end and any(
                s.cancel_thread is not None and s.cancel_thread.is_alive() for s in self._slots):
            await asyncio.sleep(0.05)
        for slot in self._slots:
            slot.closed = True
            await _finish(slot.beat_task)
            if slot.beat_conn is not None and not slot.beat_conn.closed:
                await slot.beat_conn.close()
            if slot.conn is not None and not slot.conn.closed:
                await slot.conn.close()

    # -- the slot loop -------------------------------------------------------
    def _set_fatal(self, exc: BaseException) -> None:
        self._fatal_first(exc)
        self.stop()

    async def _slot_main(self, slot: _ASlot) -> None:
        assert self._stop is not None
        pending: List[int]
        backoff, pending = BACKOFF_FIRST, []
        try:
            while not self._stop.is_set():
                try:
                    if not self._take_ticket():
                        break
                    slot.pending = pending
                    rows = await self._claim(slot, pending)
                    pending, backoff = [], BACKOFF_FIRST
                    slot.pending = []
                    if not rows and self._slot_ends(rows):
                        break
                    if rows:
                        job = slot.leases.job(self.queue, rows[0])
                        if await self._process(slot, job):
                            pending = [job.token]
                            slot.pending = pending
                except Exception as exc:  # what the slot does next is _slot_error's
                    lost, pending = pending, []
                    slot.pending = []
                    step = self._slot_error(slot, exc, backoff)
                    if step == "reconnect":
                        await self._reconnect(slot, exc)
                    elif step == "retry":
                        await self._sleep(jittered(backoff))
                    if lost and step != "fatal":
                        # The claim that carried a finished job's completion
                        # failed: complete it on its own.
                        try:
                            await self._complete_now(slot, lost[0], None)
                        except psycopg.Error as err:
                            self._log_pending_lost(lost[0], err)
                    after = self._next_backoff(step, backoff)
                    if after is None:
                        break
                    backoff = after
            if pending:
                try:
                    await self._complete_now(slot, pending[0], None)
                except psycopg.Error as exc:
                    self._log_pending_lost(pending[0], exc)
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
        self._log_reconnect(slot, exc, failed=False)
        delay = BACKOFF_FIRST
        while not self._stop.is_set():
            try:
                old = slot.conn
                slot.conn = await self._connect()
                if old is not None:
                    await old.close()
                return
            except psycopg.OperationalError as err:
                wait = self._reconnect_failed(slot, err, delay)
                if wait is None:
                    return
                await self._sleep(wait)
                delay = min(delay * 2, BACKOFF_MAX)

    async def _fetch(self, slot: _ASlot, query: str,
                     params: Optional[Tuple[Any, ...]]) -> List[Tuple[Any, ...]]:
        cur = slot.claim_cursor()
        # A claim's deadline: its wait in the server, then call_timeout.
        with armed(self._calls, slot.conn, self._wait_seconds):
            await cur.execute(query, params)
            return await cur.fetchall()

    async def _claim(self, slot: _ASlot, pending: List[int]) -> Optional[List[Tuple[Any, ...]]]:
        assert self._stop is not None
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
                    if self._done_counted(self.stats, pending, rows):
                        return rows
                except psycopg.Error as exc:
                    step = self._done_error(exc)
                    if step == "stale":
                        self.stats.stale += len(pending)
                    elif step == "redo":
                        await self._complete_now(slot, pending[0], None)
                    else:
                        raise
                if self._stop.is_set():
                    return None
            try:
                rows = await self._fetch(slot, slot.leases.pick(q).plain, None)
            except psycopg.Error as exc:
                return self._claim_failed(exc)
            self.stats.claimed += 1 if rows else 0
            return rows
        except psycopg.Error as exc:
            self._claim_fatal(exc)
            raise
        finally:
            if slot.state == "claiming":
                slot.state = "busy"

    async def _start_job(self, slot: _ASlot, job: Job) -> None:
        async with slot.cond:
            if slot.begin(job):
                slot.cond.notify()

    async def _end_job(self, slot: _ASlot) -> Tuple[bool, bool]:
        async with slot.cond:
            slot.job = None
            return slot.abandoned, slot.lost

    async def _call_handler(self, job: Job) -> Any:
        try:
            value = self.handler(job)
            if inspect.isawaitable(value):
                value = await value
            return value
        except (asyncio.CancelledError, SystemExit) as exc:
            if isinstance(exc, asyncio.CancelledError) and self._cancelled_from_outside():
                raise   # run() itself is being cancelled
            raise HandlerExit(exc) from exc

    def _cancelled_from_outside(self) -> bool:
        """True when this task is being cancelled (not a CancelledError that a
        handler raised of its own)."""
        if self._hurry:
            return True
        task = asyncio.current_task()
        cancelling = getattr(task, "cancelling", None)
        return bool(cancelling and cancelling())

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
        step, value, after = self._outcome(job, abandoned, lost, self._stop.is_set(), outcome)
        if step == "stale":
            self.stats.stale += 1
        elif step == "complete":
            await self._complete_now(slot, job.token, value)
        elif step == "fail":
            await self._fail_now(slot, job, value, after)
        return step == "defer"

    async def _process_tx(self, slot: _ASlot, job: Job) -> None:
        conn = slot.conn
        assert conn is not None
        calls = self._calls
        mine = calls.arm(conn)   # BEGIN and assert_token, then completion and COMMIT
        try:
            async with conn.transaction():
                await conn.execute(ASSERT_SQL, (job.token,))
                job.conn = conn
                await self._start_job(slot, job)
                # The handler's statements have no deadline of the worker's.
                calls.disarm(conn)
                conn.pgc_handler = True   # type: ignore[attr-defined]
                try:
                    result = await self._call_handler(job)
                finally:
                    conn.pgc_handler = False   # type: ignore[attr-defined]
                    mine = calls.arm(conn)
                    abandoned, _lost = await self._end_job(slot)
                if abandoned:
                    raise _Abandoned()
                why = unstorable(result)
                if why is not None:
                    raise ValueError(why)
                await slot.claim_cursor().execute(*complete_statement(self.features, job.token,
                                                                      result))
            self.stats.completed += 1
        except _Abandoned:
            await self._release_after_abandon(slot, job)
        except Exception as exc:
            step, after = self._tx_error(job, exc, slot.lost, slot.abandoned, conn)
            if step == "stale":
                self.stats.stale += 1
            elif step == "release":
                await self._release_after_abandon(slot, job)
            elif step == "raise":
                raise
            else:
                await self._fail_now(slot, job, _error_text(exc), after)
        finally:
            if mine:
                calls.disarm(conn)
            job.conn = None

    async def _release_after_abandon(self, slot: _ASlot, job: Job) -> None:
        try:
            assert slot.conn is not None
            await slot.conn.execute(RELEASE_SQL, (job.token,))
            self.stats.released += 1
            slot.released = job.token
            self._log_abandon_release(job, None)
        except psycopg.Error as exc:
            self._log_abandon_release(job, exc)

    async def _outcome_now(self, slot: _ASlot, query: str, params: Tuple[Any, ...],
                           attempt: int = 0) -> None:
        """Run a completion statement, again when a cancel meant for a claim
        hit it (at most three times in all)."""
        try:
            await self._execute_outcome(slot, query, params)
        except psycopg.Error as exc:
            last = attempt == OUTCOME_TRIES - 1
            if last or not (_sqlstate(exc) == CANCELED or transient(exc)):
                raise
            if transient(exc):
                if slot.conn is None or slot.conn.closed or slot.conn.broken:
                    await self._reconnect(slot, exc)
                else:
                    await self._sleep(0.2 * 2 ** attempt)
            await self._outcome_now(slot, query, params, attempt + 1)

    async def _execute_outcome(self, slot: _ASlot, query: str, params: Tuple[Any, ...]) -> None:
        await slot.claim_cursor().execute(query, params)

    async def _send_outcome(self, slot: _ASlot, query: str, params: Tuple[Any, ...],
                            counter: str, what: str, subject: Any) -> None:
        """Complete or fail (``what``) and count it; a stale token is counted
        and its outcome dropped."""
        try:
            await self._outcome_now(slot, query, params)
        except psycopg.Error as exc:
            self._stale_outcome(what, subject, exc)
            counter = "stale"
        setattr(self.stats, counter, getattr(self.stats, counter) + 1)

    async def _complete_now(self, slot: _ASlot, token: int, result: Any) -> None:
        query, params = complete_statement(self.features, token, result)
        await self._send_outcome(slot, query, params, "completed", "complete", token)

    async def _fail_now(self, slot: _ASlot, job: Job, error: str, retry_in: Any) -> None:
        await self._send_outcome(slot, FAIL_SQL, (job.token, error, retry_in),
                                 "failed" if retry_in is None else "retried", "fail", job)

    # -- heartbeat -----------------------------------------------------------
    async def _beat_main(self, slot: _ASlot) -> None:
        seen = 0
        period = 1.0
        async with slot.cond:
            while not slot.closed:
                job = slot.job
                wait, seen, period = slot.beat_plan(seen, period)
                if wait == 0.0:
                    slot.beat_idle = True
                    await slot.cond.wait()
                    slot.beat_idle = False
                    continue
                if wait is not None:
                    try:
                        await asyncio.wait_for(slot.cond.wait(), wait)
                    except asyncio.TimeoutError:
                        pass
                    continue
                try:
                    assert job is not None
                    conn = slot.conn
                    if conn is None or conn.closed or conn.broken:
                        conn = await self._beat_conn(slot)
                    assert conn is not None
                    try:
                        await conn.execute(EXTEND_SQL, (job.token, self.lease))
                    except psycopg.OperationalError as exc:
                        # The slot's connection died under a running handler:
                        # extend from the heartbeat's own, so that the lease
                        # does not run out and hand the job to another worker.
                        if not transient(exc) or conn is slot.beat_conn:
                            raise
                        beat = await self._beat_conn(slot)
                        if beat is None:
                            raise
                        await beat.execute(EXTEND_SQL, (job.token, self.lease))
                    self.stats.extended += 1
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    if job is not None and self._beat_failed(job, exc):
                        slot.lost = True


def _running_loop() -> Optional[asyncio.AbstractEventLoop]:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None
