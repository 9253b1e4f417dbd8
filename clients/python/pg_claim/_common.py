"""Types shared by the synchronous and asyncio workers."""
from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass
from typing import Any, Optional, Union

Interval = Union[str, float, int, _dt.timedelta]
"""An interval: a PostgreSQL interval string ('10 s'), seconds, or a timedelta."""


def to_interval(value: Optional[Interval]) -> Optional[Union[str, _dt.timedelta]]:
    """Normalize an interval for a ``%s::interval`` parameter (None stays None)."""
    if value is None or isinstance(value, (str, _dt.timedelta)):
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"an interval must be a str, a number of seconds or a timedelta, not {value!r}")
    return _dt.timedelta(seconds=float(value))


def to_seconds(value: Interval) -> float:
    """Seconds of a number or timedelta; strings must be plain numbers or 'N s'."""
    if isinstance(value, _dt.timedelta):
        return value.total_seconds()
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    text = str(value).strip().lower()
    for unit, mult in (("milliseconds", 0.001), ("millisecond", 0.001), ("ms", 0.001),
                       ("seconds", 1.0), ("second", 1.0), ("secs", 1.0), ("sec", 1.0), ("s", 1.0),
                       ("minutes", 60.0), ("minute", 60.0), ("min", 60.0),
                       ("hours", 3600.0), ("hour", 3600.0), ("h", 3600.0)):
        if text.endswith(unit):
            num = text[: -len(unit)].strip()
            try:
                return float(num) * mult
            except ValueError:
                break
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"cannot read {value!r} as a duration; pass seconds or a timedelta") from None


class Retry(Exception):
    """Raise from a handler to fail the attempt and make the item ready again
    after ``after`` (seconds or a timedelta) instead of the queue's backoff.
    The attempt still counts towards ``max_attempts``."""

    def __init__(self, after: Union[float, int, _dt.timedelta] = 0, message: str = "") -> None:
        super().__init__(message or "retry requested")
        if isinstance(after, _dt.timedelta):
            self.after = after
        else:
            self.after = _dt.timedelta(seconds=float(after))
        if self.after.total_seconds() < 0:
            raise ValueError("Retry(after=...) must not be negative")


def from_epoch(value: Union[float, _dt.datetime]) -> _dt.datetime:
    """A timezone-aware UTC datetime from epoch seconds."""
    if isinstance(value, _dt.datetime):
        return value
    return _dt.datetime.fromtimestamp(value, _dt.timezone.utc)


class Job:
    """One claimed item, as the handler sees it.

    ``conn`` is the connection of the handler's transaction in transactional
    mode (already fenced with ``claim.assert_token``), else None.
    ``enqueued_at`` and ``lease_until`` (server clock) are parsed on first use.
    """

    __slots__ = ("queue", "id", "token", "payload", "attempt", "group_key", "lease_seconds",
                 "conn", "_enqueued_at", "_lease_until")

    def __init__(self, queue: str, id: int, token: int, payload: Any, attempt: int,
                 group_key: Optional[str], enqueued_at: Union[float, _dt.datetime],
                 lease_until: Union[float, _dt.datetime], lease_seconds: float,
                 conn: Any = None) -> None:
        self.queue = queue
        self.id = id
        self.token = token
        self.payload = payload
        self.attempt = attempt
        self.group_key = group_key
        self.lease_seconds = lease_seconds
        self.conn = conn
        self._enqueued_at = enqueued_at
        self._lease_until = lease_until

    @property
    def enqueued_at(self) -> _dt.datetime:
        if not isinstance(self._enqueued_at, _dt.datetime):
            self._enqueued_at = from_epoch(self._enqueued_at)
        return self._enqueued_at

    @property
    def lease_until(self) -> _dt.datetime:
        """When the lease of the claim ended (server clock); the heartbeat
        moves the real end further."""
        if not isinstance(self._lease_until, _dt.datetime):
            self._lease_until = from_epoch(self._lease_until)
        return self._lease_until

    def __repr__(self) -> str:
        return (f"Job(queue={self.queue!r}, id={self.id}, token={self.token}, "
                f"attempt={self.attempt}, group_key={self.group_key!r}, payload={self.payload!r})")


@dataclass
class WorkerStats:
    """Counters of one worker, for logs and tests."""

    claimed: int = 0
    completed: int = 0
    failed: int = 0
    retried: int = 0
    stale: int = 0
    released: int = 0
    extended: int = 0
