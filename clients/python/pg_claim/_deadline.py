"""Deadlines on the workers' own statements, and cancel requests that cannot
hang the worker.

A connection that stops answering without closing (a half-open TCP
connection, a proxy or firewall that drops the traffic) leaves a statement
waiting for an answer that never comes; TCP keepalives notice it only when
the peer's kernel is gone too. So each statement of the worker's own (a
claim: its wait and the deadline) is armed on :class:`Calls`, and a watchdog
thread shuts down the socket of a connection whose statement is past its
deadline: the statement fails at once as a lost connection, and the slot
takes a new one. The handler's own statements (in transactional mode, on
the slot's connection) are never timed.

libpq's cancel request (``PQcancel``) waits, without a timeout, for the
server to close the cancel connection; :func:`cancel_in_background` sends it
from a daemon thread.
"""
from __future__ import annotations

import logging
import os
import socket
import threading
import time
from typing import Any, Dict, Optional, Tuple

import psycopg

log = logging.getLogger("pg_claim.worker")

#: How often the watchdog looks (seconds).
WATCH_EVERY = 0.1


def cut(conn: Any) -> None:
    """Shuts the connection's socket down (both ways), from any thread: a
    statement waiting on it fails at once as a lost connection."""
    try:
        fd = conn.pgconn.socket
    except Exception:   # closed already
        return
    try:
        s = socket.socket(fileno=os.dup(fd))
    except OSError:
        return
    try:
        s.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    finally:
        s.close()


class Calls:
    """The connections on which a statement of the worker's own runs, each
    with its deadline (monotonic seconds), and the watchdog that cuts the
    ones past it. ``timeout`` None: no deadlines."""

    def __init__(self, timeout: Optional[float], label: str) -> None:
        self.timeout = timeout
        self.label = label
        self._lock = threading.Lock()
        self._armed: Dict[int, Tuple[Any, float]] = {}
        self._thread: Optional[threading.Thread] = None
        self._stop = threading.Event()
        self.cuts = 0

    def start(self) -> None:
        if self.timeout is None or self._thread is not None:
            return
        self._thread = threading.Thread(target=self._watch, name="pg_claim-deadlines", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()

    def arm(self, conn: Any, extra: float = 0.0) -> bool:
        """Gives the statement about to run on ``conn`` its deadline (the
        timeout plus ``extra``). False when the connection is armed already
        (the caller then leaves disarming to whoever armed it)."""
        if self.timeout is None or conn is None:
            return False
        with self._lock:
            if id(conn) in self._armed:
                return False
            self._armed[id(conn)] = (conn, time.monotonic() + self.timeout + extra)
            return True

    def disarm(self, conn: Any) -> None:
        with self._lock:
            self._armed.pop(id(conn), None)

    def _watch(self) -> None:
        while not self._stop.wait(WATCH_EVERY):
            now = time.monotonic()
            with self._lock:
                late = [c for c, deadline in self._armed.values() if deadline < now]
                for c in late:
                    self._armed.pop(id(c), None)
            for c in late:
                self.cuts += 1
                log.warning("worker %s: a statement got no answer within call_timeout (%.1f s); "
                            "its connection is closed", self.label, self.timeout)
                cut(c)


class _Armed:
    """``with armed(calls, conn, extra):`` around a statement of the worker's own."""

    __slots__ = ("calls", "conn", "extra", "mine")

    def __init__(self, calls: Optional[Calls], conn: Any, extra: float) -> None:
        self.calls, self.conn, self.extra, self.mine = calls, conn, extra, False

    def __enter__(self) -> None:
        if self.calls is not None:
            self.mine = self.calls.arm(self.conn, self.extra)

    def __exit__(self, *exc: Any) -> None:
        if self.mine and self.calls is not None:
            self.calls.disarm(self.conn)


def armed(calls: Optional[Calls], conn: Any, extra: float = 0.0) -> _Armed:
    return _Armed(calls, conn, extra)


class TimedCursor(psycopg.Cursor):  # type: ignore[type-arg]
    """A cursor whose statements have the worker's deadline, unless the
    handler owns the connection (``conn.pgc_handler`` true)."""

    def execute(self, *args: Any, **kwargs: Any) -> Any:
        conn = self.connection
        calls = getattr(conn, "pgc_calls", None)
        if calls is None or getattr(conn, "pgc_handler", False):
            return super().execute(*args, **kwargs)
        with armed(calls, conn):
            return super().execute(*args, **kwargs)


class TimedAsyncCursor(psycopg.AsyncCursor):  # type: ignore[type-arg]
    """The asyncio :class:`TimedCursor`."""

    async def execute(self, *args: Any, **kwargs: Any) -> Any:
        conn = self.connection
        calls = getattr(conn, "pgc_calls", None)
        if calls is None or getattr(conn, "pgc_handler", False):
            return await super().execute(*args, **kwargs)
        with armed(calls, conn):
            return await super().execute(*args, **kwargs)


def cancel_in_background(conn: Any) -> threading.Thread:
    """Sends the cancel request for ``conn``'s running statement from a
    daemon thread, and returns it (join it, with a timeout, before closing
    the connection: a pooler may take a connection closed under an open
    cancel request badly)."""

    def send() -> None:
        try:
            conn.cancel()
        except Exception as exc:
            log.debug("cancel failed: %s", exc)

    thread = threading.Thread(target=send, name="pg_claim-cancel", daemon=True)
    thread.start()
    return thread
