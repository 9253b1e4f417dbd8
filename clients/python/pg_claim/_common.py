"""Types shared by the synchronous and asyncio workers."""
from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass
from typing import Any, Iterable, Optional, Union

Interval = Union[str, float, int, _dt.timedelta]
"""An interval: a PostgreSQL interval string ('10 s'), seconds, or a timedelta."""


def to_interval(value: Optional[Interval]) -> Optional[Union[str, _dt.timedelta]]:
    """Normalize an interval for a ``%s::interval`` parameter (None stays None)."""
    if value is None or isinstance(value, (str, _dt.timedelta)):
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"an interval must be a str, a number of seconds or a timedelta, not {value!r}")
    return _dt.timedelta(seconds=float(value))


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


class Delivery:
    """What every view of one claimed item carries: its ``queue``, its ``id``,
    the claim's fencing ``token``, the ``payload``, which ``attempt`` this
    is, and ``conn``, the connection the item's work runs on (or None). The
    base of :class:`Job` and of the durable runner's ``Context``."""

    __slots__ = ("queue", "id", "token", "payload", "attempt", "conn")

    def __init__(self, queue: str, id: int, token: int, payload: Any, attempt: int,
                 conn: Any = None) -> None:
        self.queue = queue
        self.id = id
        self.token = token
        self.payload = payload
        self.attempt = attempt
        self.conn = conn


class Job(Delivery):
    """One claimed item, as the handler sees it.

    ``lease_seconds`` is the length of the claim's lease (the heartbeat
    extends it by that much at a third of it). ``conn`` is the connection of
    the handler's transaction in transactional mode (already fenced with
    ``claim.assert_token``), else None.
    """

    __slots__ = ("group_key", "lease_seconds")

    def __init__(self, queue: str, id: int, token: int, payload: Any, attempt: int,
                 group_key: Optional[str], lease_seconds: float, conn: Any = None) -> None:
        super().__init__(queue, id, token, payload, attempt, conn)
        self.group_key = group_key
        self.lease_seconds = lease_seconds

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


def sum_stats(parts: Iterable[WorkerStats]) -> WorkerStats:
    total = WorkerStats()
    for st in parts:
        for name in total.__dataclass_fields__:
            setattr(total, name, getattr(total, name) + getattr(st, name))
    return total
