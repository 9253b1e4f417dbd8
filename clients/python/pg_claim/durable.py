"""Durable runs on pg_claim's durable steps (docs/steps.md in the repository).

A durable function takes a :class:`Context` and is replayed from its start on
every delivery of its item: each ``ctx.step`` that finished in an earlier
delivery returns its recorded output instead of running again.

    @durable
    def order(ctx):
        charge = ctx.transaction("charge", lambda conn: charge_card(conn, ctx.payload))
        ctx.sleep(3600)                                  # no worker waits
        ship = ctx.step("ship", lambda: call_shipper(ctx.payload))
        ctx.step("email", lambda: send_mail(ctx.payload, ship))
        return {"charge": charge, "ship": ship}

    order.run(None, "orders")                            # until SIGTERM / SIGINT

Determinism: between steps, the function must make the same calls, in the same
order, with the same names, on every delivery. Whatever can change between
deliveries (the time, random numbers, what a service answers) belongs inside
a step.

``ctx.transaction(name, fn)`` runs ``fn(conn)`` in the transaction that records
the step: its writes to this database happen exactly once. ``ctx.step(name,
fn)`` runs ``fn()`` outside any transaction (for calls to other services): at
least once, so give such calls an idempotency key (``ctx.key(name)``).

The runner is its own loop, one run at a time per :meth:`Durable.run` call
(start several threads or processes for more): it claims with a server-side
wait, runs the function, and completes the item with its return value, or
fails it with the exception's text. Runs that sleep or wait end their attempt
without counting it (:class:`Suspended` is raised inside the function to
unwind it; do not catch it).
"""
from __future__ import annotations

import datetime as _dt
import logging
import signal
import threading
from typing import Any, Callable, List, Optional, Sequence, Tuple, Union

import psycopg
from psycopg.types.json import Jsonb

from ._common import Delivery, Interval, Retry, to_interval
from ._loop import STALE, _error_text, _sqlstate, default_conninfo

__all__ = ["Context", "Durable", "Suspended", "durable"]

log = logging.getLogger("pg_claim.durable")

_CLAIM = ("SELECT id, token, payload, attempt FROM claim.claim_next("
          "%s::text, 1, %s::interval, %s::interval, %s::text)")
_STEP = "SELECT s IS NOT NULL, s FROM claim.step(%s::bigint, %s::text) AS s"
_STEP_DONE = "SELECT claim.step_done(%s::bigint, %s::text, %s::jsonb)"
_SLEEP = "SELECT claim.sleep(%s::bigint, %s::timestamptz)"
_AWAIT = "SELECT e IS NOT NULL, e FROM claim.await_event(%s::bigint, %s::text, %s::interval) AS e"
_CHILDREN = "SELECT r IS NOT NULL, r FROM claim.await_children(%s::bigint, %s::bigint[]) AS r"
_EXTEND = "SELECT claim.extend(%s::bigint, %s::interval)"
_COMPLETE = "SELECT claim.complete(%s::bigint, %s::jsonb)"
_FAIL = "SELECT claim.fail(%s::bigint, %s::text, %s::interval)"


class Suspended(Exception):
    """Raised inside a durable function when its run is parked (a sleep, an
    event not emitted yet, children not finished): the attempt has ended
    without counting, and the run is delivered again later. The runner
    catches it; a function must let it through."""


class Context(Delivery):
    """What a durable function gets: the run's item and the durable calls."""

    conn: "psycopg.Connection[Any]"

    def __init__(self, conn: "psycopg.Connection[Any]", queue: str, id: int, token: int,
                 payload: Any, attempt: int, lease: Optional[Any]) -> None:
        super().__init__(queue, id, token, payload, attempt, conn)
        self._lease = lease
        self._sleeps = 0
        self._children = 0

    def key(self, name: str) -> str:
        """An idempotency key for step ``name`` of this run (the same on every
        delivery): for the outside services a step calls."""
        return f"{self.queue}:{self.id}:{name}"

    def _recorded(self, name: str) -> Tuple[bool, Any]:
        row = self.conn.execute(_STEP, (self.token, name)).fetchone()
        assert row is not None
        return bool(row[0]), row[1]

    def _done(self, name: str, output: Any) -> None:
        self.conn.execute(_STEP_DONE, (self.token, name, Jsonb(output)))

    def step(self, name: str, fn: Callable[[], Any]) -> Any:
        """The recorded output of step ``name``; else runs ``fn()`` (outside a
        transaction), records what it returns (JSON) and returns it. At least
        once: ``fn`` may run again if the worker dies before the record."""
        done, out = self._recorded(name)
        if done:
            return out
        self.conn.execute(_EXTEND, (self.token, self._lease))
        out = fn()
        self._done(name, out)
        return out

    def transaction(self, name: str, fn: Callable[["psycopg.Connection[Any]"], Any]) -> Any:
        """The recorded output of step ``name``; else runs ``fn(conn)`` in the
        transaction that records it: what ``fn`` writes through ``conn`` and
        the record commit together, exactly once."""
        with self.conn.transaction():
            done, out = self._recorded(name)
            if done:
                return out
            out = fn(self.conn)
            self._done(name, out)
            return out

    def sleep(self, duration: Union[Interval, _dt.datetime], name: Optional[str] = None) -> None:
        """Sleeps without holding a worker: ``duration`` (seconds, a timedelta
        or an interval string) from the first time this sleep is reached, or
        until a datetime. The wake time is a step (``$sleep:N``, or ``name``),
        so a replay after waking does not sleep again."""
        self._sleeps += 1
        step = name or f"$sleep:{self._sleeps}"
        with self.conn.transaction():
            done, until = self._recorded(step)
            if not done:
                if isinstance(duration, _dt.datetime):
                    target = duration
                else:
                    target = self.conn.execute(
                        "SELECT pg_catalog.clock_timestamp() + %s::interval",
                        (to_interval(duration),)).fetchone()[0]
                self._done(step, target.isoformat())
                until = target.isoformat()
            due = self.conn.execute("SELECT %s::timestamptz <= pg_catalog.clock_timestamp()",
                                    (until,)).fetchone()[0]
            if due:
                return
            self.conn.execute(_SLEEP, (self.token, until))
        raise Suspended(f"sleeping until {until}")

    def await_event(self, event: str, timeout: Interval = "1 day") -> Any:
        """The payload of ``event`` (None for an event without one). Until it
        is emitted the run is parked; after ``timeout`` without it, the
        server's PC010 is raised here (as :class:`psycopg.Error`)."""
        with self.conn.transaction():
            row = self.conn.execute(_AWAIT, (self.token, event, to_interval(timeout))).fetchone()
            assert row is not None
        if row[0]:
            return row[1]
        raise Suspended(f"waiting for event {event!r}")

    def await_children(self, children: Sequence[int]) -> List[Any]:
        """The results of the items ``children`` (completed, in the queue of a
        queue that retains results), in the order given. Until all completed
        the run waits. The results are recorded as a step (``$children:N``)."""
        self._children += 1
        step = f"$children:{self._children}"
        with self.conn.transaction():
            done, out = self._recorded(step)
            if done:
                return out
            row = self.conn.execute(_CHILDREN, (self.token, [int(c) for c in children])).fetchone()
            assert row is not None
            if row[0]:
                self._done(step, row[1])
                return row[1]
        raise Suspended(f"waiting for {len(children)} children")


class Durable:
    """A durable function and its runner (made by :func:`durable`)."""

    def __init__(self, fn: Callable[[Context], Any]) -> None:
        self.fn = fn
        self._stop = threading.Event()
        self.__doc__ = fn.__doc__
        self.__name__ = getattr(fn, "__name__", "durable")

    def __call__(self, ctx: Context) -> Any:
        return self.fn(ctx)

    def stop(self) -> None:
        """Ends :meth:`run` after the run in progress (or the current wait)."""
        self._stop.set()

    def run_one(self, conn: "psycopg.Connection[Any]", queue: str, *, wait: Interval = "10 s",
                lease: Optional[Interval] = None, worker: Optional[str] = None) -> Optional[str]:
        """Claims one run of ``queue`` (waiting up to ``wait``) and runs it on
        ``conn`` (autocommit). Returns what happened: None (nothing to
        claim), ``"completed"``, ``"suspended"``, ``"failed"`` or ``"stale"``
        (the claim was lost; another delivery goes on)."""
        row = conn.execute(_CLAIM, (queue, to_interval(lease), to_interval(wait), worker)).fetchone()
        if row is None:
            return None
        ctx = Context(conn, queue, row[0], row[1], row[2], row[3], to_interval(lease))
        try:
            result = self.fn(ctx)
        except Suspended:
            return "suspended"
        except Exception as exc:   # the function's failure is the run's outcome
            if _sqlstate(exc) == STALE:
                log.warning("durable %s: run %d attempt %d: token is stale (%s)",
                            self.__name__, ctx.id, ctx.attempt, _error_text(exc))
                return "stale"
            after = to_interval(exc.after) if isinstance(exc, Retry) else None
            if not isinstance(exc, Retry):
                log.warning("durable %s: run %d attempt %d failed: %s",
                            self.__name__, ctx.id, ctx.attempt, _error_text(exc))
            return self._finish(conn, _FAIL, (ctx.token, _error_text(exc), after), "failed")
        return self._finish(conn, _COMPLETE, (ctx.token, Jsonb(result)), "completed")

    @staticmethod
    def _finish(conn: "psycopg.Connection[Any]", sql: str, params: Tuple[Any, ...],
                outcome: str) -> str:
        try:
            conn.execute(sql, params)
            return outcome
        except psycopg.Error as exc:
            if _sqlstate(exc) != STALE:
                raise
            return "stale"

    def run(self, conninfo: Optional[str], queue: str, *, wait: Interval = "10 s",
            lease: Optional[Interval] = None, worker: Optional[str] = None,
            max_runs: Optional[int] = None, handle_signals: bool = True) -> int:
        """Runs ``queue``'s items one after another until :meth:`stop`,
        SIGTERM/SIGINT (with ``handle_signals``, in the main thread) or
        ``max_runs`` deliveries; returns how many deliveries it handled."""
        if handle_signals and threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                signal.signal(sig, lambda *_: self._stop.set())
        handled = 0
        with psycopg.connect(default_conninfo(conninfo), autocommit=True) as conn:
            while not self._stop.is_set() and (max_runs is None or handled < max_runs):
                if self.run_one(conn, queue, wait=wait, lease=lease, worker=worker) is not None:
                    handled += 1
        return handled


def durable(fn: Callable[[Context], Any]) -> Durable:
    """Makes ``fn(ctx)`` a durable function: ``durable(fn).run(dsn, queue)``
    runs the items of ``queue`` through it (also usable as ``@durable``)."""
    return Durable(fn)
