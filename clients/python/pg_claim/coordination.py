"""The coordination service of pg_claim from Python (docs/coordination.md).

- :class:`Session`: opens a session, keeps it alive from a background thread
  (every third of its ttl, on a connection of its own) and closes it on
  exit; ``lost`` is set (and ``on_lost`` called) when a keepalive is refused.
- :meth:`Session.elect` / :class:`Leadership`: leader election carried by the
  session, with its epoch (a fencing token) and ``resign()``.
- :meth:`Session.lock` / :meth:`Session.shared_lock`: context managers over
  a lease attached to the session (``claim.session_lease``, exclusive or
  shared mode), yielding its fencing token.
- :meth:`Session.barrier`, :meth:`Session.latch`, :meth:`Session.count_down`,
  :meth:`Session.latch_wait`.
- :func:`watch`: an iterator over the changes under a prefix that resumes
  after the last revision it returned; :class:`Compacted` (PC004) when the
  revision it resumes from is no longer retained.

Every call is one statement, so all of it works through PgBouncer in
transaction mode.
"""
from __future__ import annotations

import threading
from contextlib import contextmanager
from datetime import timedelta
from typing import Any, Callable, Iterator, List, NamedTuple, Optional

import psycopg

from .errors import PgClaimError, map_error


class Compacted(PgClaimError, sqlstate="PC004"):
    """PC004: the watch's revision is older than pg_claim.watch_retention.
    Read the state again, then watch from ``claim.revision()``."""


class Change(NamedTuple):
    revision: int
    kind: str
    name: str
    event: str
    token: Optional[int]
    holder: Optional[str]
    at: Any


def _secs(value: float) -> timedelta:
    return timedelta(seconds=value)


def _raise(exc: psycopg.Error) -> None:
    if exc.sqlstate == "PC004":
        err = Compacted(exc.diag.message_primary or str(exc), sqlstate="PC004",
                        detail=exc.diag.message_detail, hint=exc.diag.message_hint)
        err.__cause__ = exc
        raise err
    raise map_error(exc) from exc


def _connect(dsn: str) -> "psycopg.Connection[Any]":
    return psycopg.connect(dsn, autocommit=True, prepare_threshold=None)


class Leadership(NamedTuple):
    session: "Session"
    name: str
    epoch: int

    def resign(self) -> bool:
        return bool(self.session._one("SELECT claim.resign(%s, %s)", (self.name, self.epoch)))


class Session:
    """A pg_claim session kept alive in the background. Use as a context
    manager, or call :meth:`close`."""

    def __init__(self, dsn: str, ttl: float = 10.0, holder: Optional[str] = None,
                 lock_delay: float = 0.0,
                 on_lost: Optional[Callable[["Session"], None]] = None) -> None:
        self._dsn = dsn
        self._lock = threading.Lock()
        self._conn = _connect(dsn)
        self.ttl = ttl
        self.on_lost = on_lost
        self.lost = threading.Event()
        self._stop = threading.Event()
        self.id: int = self._one("SELECT claim.session_open(%s, %s, %s)",
                                 (_secs(ttl), holder, _secs(lock_delay)))
        self._thread = threading.Thread(target=self._keepalive, name="pg_claim-session",
                                        daemon=True)
        self._thread.start()

    def _one(self, query: str, params: Any) -> Any:
        with self._lock:
            try:
                row = self._conn.execute(query, params).fetchone()
            except psycopg.Error as exc:
                _raise(exc)
        return None if row is None else row[0]

    def _keepalive(self) -> None:
        conn: Optional["psycopg.Connection[Any]"] = None
        try:
            while not self._stop.wait(self.ttl / 3.0):
                try:
                    if conn is None or conn.closed:
                        conn = _connect(self._dsn)
                    conn.execute("SELECT claim.session_keepalive(%s)", (self.id,))
                except psycopg.Error as exc:
                    if exc.sqlstate == "PC001":  # ended: nothing it carried is held
                        self.lost.set()
                        if self.on_lost is not None:
                            self.on_lost(self)
                        return
                    if conn is not None:  # a broken connection: reconnect next time
                        conn.close()
                        conn = None
        finally:
            if conn is not None:
                conn.close()

    def elect(self, name: str, wait: float = 0.0,
              holder: Optional[str] = None) -> Optional[Leadership]:
        """Campaign for ``name`` (waiting up to ``wait`` seconds in the server):
        a :class:`Leadership` with its epoch, or None."""
        epoch = self._one("SELECT claim.elect(%s, NULL, %s, %s, %s)",
                          (name, self.id, holder, _secs(wait)))
        return None if epoch is None else Leadership(self, name, epoch)

    @contextmanager
    def lock(self, name: str, wait: float = 0.0) -> Iterator[Optional[int]]:
        """Hold lease ``name`` as long as the session (or until the block ends):
        yields its fencing token, or None when it was not granted in ``wait``."""
        with self._lease(name, wait, "exclusive") as token:
            yield token

    @contextmanager
    def shared_lock(self, name: str, wait: float = 0.0) -> Iterator[Optional[int]]:
        """Hold lease ``name`` in shared mode (with other shared holders; an
        exclusive :meth:`lock` waits for all of them): yields its fencing
        token, or None when it was not granted in ``wait``."""
        with self._lease(name, wait, "shared") as token:
            yield token

    @contextmanager
    def _lease(self, name: str, wait: float, mode: str) -> Iterator[Optional[int]]:
        token = self._one("SELECT claim.session_lease(%s, %s, NULL, 1, %s, %s)",
                          (self.id, name, _secs(wait), mode))
        try:
            yield token
        finally:
            if token is not None and not self.lost.is_set():
                self._one("SELECT claim.lease_release(%s, %s)", (name, token))

    def barrier(self, name: str, parties: int, wait: float) -> Optional[int]:
        return self._one("SELECT claim.barrier(%s, %s, %s)", (name, parties, _secs(wait)))

    def latch(self, name: str, count: int) -> None:
        self._one("SELECT claim.latch(%s, %s)", (name, count))

    def count_down(self, name: str) -> int:
        return self._one("SELECT claim.count_down(%s)", (name,))

    def latch_wait(self, name: str, wait: float = 0.0) -> bool:
        return bool(self._one("SELECT claim.latch_wait(%s, %s)", (name, _secs(wait))))

    def close(self) -> int:
        """Stop the keepalives and end the session (what it carried is released
        at once). Returns how many leaderships it carried; 0 when it had ended."""
        self._stop.set()
        self._thread.join()
        try:
            return 0 if self.lost.is_set() else self._one("SELECT claim.session_close(%s)", (self.id,))
        except PgClaimError as exc:
            if exc.sqlstate == "PC001":
                return 0
            raise
        finally:
            self._conn.close()

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def watch(dsn: str, prefix: str, after_revision: int = 0, wait: float = 30.0,
          stop: Optional[threading.Event] = None) -> Iterator[Change]:
    """Yield every change under ``prefix`` after ``after_revision``, in order,
    waiting up to ``wait`` seconds per statement for new ones, until ``stop``
    is set. Raises :class:`Compacted` when the revision is no longer kept."""
    conn = _connect(dsn)
    try:
        revision = after_revision
        while stop is None or not stop.is_set():
            try:
                rows: List[Any] = conn.execute(
                    "SELECT * FROM claim.watch(%s, %s, %s)",
                    (prefix, revision, _secs(wait))).fetchall()
            except psycopg.Error as exc:
                _raise(exc)
            for row in rows:
                change = Change(*row)
                revision = change.revision
                yield change
    finally:
        conn.close()


__all__ = ["Change", "Compacted", "Leadership", "Session", "watch"]
