"""Producer and operator helpers: enqueue (inside the caller's transaction when
given a connection), cancel, item_state with a server-side wait, stats."""
from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple, Union

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

from ._common import Interval, to_interval
from ._features import FEATURES_SQL, Features
from .worker import default_conninfo
from .errors import InvalidArgument, UnknownQueue, map_error


@dataclass(frozen=True)
class ItemState:
    """What ``claim.item_state`` says about one item."""

    state: str                      # waiting scheduled ready claimed completed dead cancelled
    attempt: Optional[int]
    result: Any
    error: Optional[str]
    finished_at: Optional[_dt.datetime]


def _count(value: Any) -> Optional[int]:
    return None if value is None else int(value)


@dataclass(frozen=True)
class QueueStats:
    """One row of ``claim.queue_stats``; ``extra`` holds columns this client
    does not name."""

    queue: str
    ready: Optional[int]            # None where the server cannot know (a standby)
    scheduled: Optional[int]
    claimed: Optional[int]
    dead: Optional[int]
    oldest_ready_age: Optional[_dt.timedelta]
    waiting: Optional[int]          # items waiting for others (None: server without `after`)
    paused: Optional[bool]          # None: server without pause
    extra: Dict[str, Any]


_STATS_FIELDS = ("queue", "ready", "scheduled", "claimed", "dead", "oldest_ready_age",
                 "waiting", "paused")

Target = Union[None, str, "psycopg.Connection[Any]", "psycopg.Cursor[Any]"]


def _call(name: str, positional: Sequence[Any], named: Dict[str, Any],
          casts: Dict[str, str]) -> Tuple[sql.Composed, List[Any]]:
    """``claim.name(p1, p2, k => v, ...)`` with named arguments left out when None."""
    parts: List[sql.Composable] = []
    params: List[Any] = []
    for value in positional:
        parts.append(sql.SQL("%s"))
        params.append(value)
    for key, value in named.items():
        if value is None:
            continue
        cast = casts.get(key)
        ph = sql.SQL("%s::" + cast) if cast else sql.SQL("%s")
        parts.append(sql.SQL("{} => ").format(sql.Identifier(key)) + ph)
        params.append(value)
    query = sql.SQL("claim.{}({})").format(sql.Identifier(name), sql.SQL(", ").join(parts))
    return query, params


class Client:
    """Helpers over one connection.

    Given a conninfo string (or None: ``$PG_CLAIM_DSN``, else libpq's
    ``PG*`` variables), the client opens its own autocommit connection
    (closed by :meth:`close` or ``with``). Given a psycopg connection or
    cursor, it runs on that connection as it is: inside the caller's open
    transaction, committed or rolled back by the caller.
    """

    def __init__(self, target: Target = None, *, prepare: bool = False,
                 connect_kwargs: Optional[Dict[str, Any]] = None) -> None:
        if target is None or isinstance(target, str):
            kwargs = dict(connect_kwargs or {})
            kwargs.setdefault("prepare_threshold", 5 if prepare else None)
            try:
                self.conn: psycopg.Connection[Any] = psycopg.connect(
                    default_conninfo(target), autocommit=True, **kwargs)
            except psycopg.Error as exc:
                raise map_error(exc) from exc
            self._owned = True
        elif isinstance(target, psycopg.Cursor):
            self.conn = target.connection
            self._owned = False
        elif isinstance(target, psycopg.Connection):
            self.conn = target
            self._owned = False
        else:
            raise TypeError("Client() takes a conninfo string, a psycopg Connection or a Cursor")
        self._features: Optional[Features] = None

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection if this client opened it."""
        if self._owned and not self.conn.closed:
            self.conn.close()

    # -- plumbing ------------------------------------------------------------
    @property
    def features(self) -> Features:
        if self._features is None:
            self._features = Features.from_rows(self._exec(FEATURES_SQL).fetchall())
        return self._features

    def _exec(self, query: Any, params: Optional[Sequence[Any]] = None) -> "psycopg.Cursor[Any]":
        try:
            return self.conn.execute(query, params)
        except psycopg.Error as exc:
            raise map_error(exc) from exc

    def _select(self, call: sql.Composed, params: List[Any], suffix: str = "") -> "psycopg.Cursor[Any]":
        return self._exec(sql.SQL("SELECT ") + call + sql.SQL(suffix), params)

    # -- producers -----------------------------------------------------------
    def enqueue(self, queue: str, payload: Any = None, *, group_key: Optional[str] = None,
                run_at: Optional[_dt.datetime] = None, priority: Optional[int] = None,
                dedup_key: Optional[str] = None, after: Optional[Sequence[int]] = None,
                fair_key: Optional[str] = None) -> int:
        """Add one item; returns its id. ``after``: ids that must finish first
        (needs a server with ``enqueue(after => ...)``). ``fair_key``: the
        item's key in a fair queue (docs/fairness.md; pg_claim 0.3.0 on)."""
        if after is not None:
            self.features.require("enqueue", "after")
        if fair_key is not None:
            self.features.require("enqueue", "fair_key")
        call, params = _call("enqueue", [queue, Jsonb({} if payload is None else payload)],
                             {"group_key": group_key, "run_at": run_at, "priority": priority,
                              "dedup_key": dedup_key, "after": list(after) if after is not None else None,
                              "fair_key": fair_key},
                             {"group_key": "text", "run_at": "timestamptz", "priority": "int",
                              "dedup_key": "text", "after": "bigint[]", "fair_key": "text"})
        row = self._select(call, params).fetchone()
        assert row is not None
        return int(row[0])

    def enqueue_batch(self, queue: str, payloads: Iterable[Any], *,
                      group_keys: Optional[Sequence[Optional[str]]] = None,
                      run_at: Optional[_dt.datetime] = None,
                      priority: Optional[int] = None,
                      after: Optional[Sequence[int]] = None,
                      fair_key: Optional[str] = None) -> List[int]:
        """Add many items in one statement; ids in the order of ``payloads``.
        ``after``: ids that must finish before any of these is ready.
        ``fair_key``: the key of every item of the batch in a fair queue."""
        # enqueue_many from pg_claim 0.3.0 on; enqueue_batch before it.
        name = "enqueue_many" if self.features.has("enqueue_many") else "enqueue_batch"
        if after is not None:
            self.features.require(name, "after")
        if fair_key is not None:
            self.features.require(name, "fair_key")
        docs = [Jsonb({} if p is None else p) for p in payloads]
        call, params = _call(name, [queue, docs],
                             {"group_keys": list(group_keys) if group_keys is not None else None,
                              "run_at": run_at, "priority": priority,
                              "after": list(after) if after is not None else None,
                              "fair_key": fair_key},
                             {"group_keys": "text[]", "run_at": "timestamptz", "priority": "int",
                              "after": "bigint[]", "fair_key": "text"})
        return [int(r[0]) for r in self._exec(sql.SQL("SELECT * FROM ") + call, params).fetchall()]

    # -- lifecycle -----------------------------------------------------------
    def cancel(self, queue: str, ids: Sequence[int]) -> int:
        """Cancel items; live claims on them are revoked (their tokens become
        stale). Returns how many were cancelled."""
        if self.features.has("cancel_many"):  # pg_claim 0.3.0 on
            row = self._exec("SELECT claim.cancel_many(%s, %s::bigint[])", (queue, list(ids))).fetchone()
        else:
            self.features.require("cancel")
            row = self._exec("SELECT claim.cancel(%s, %s::bigint[])", (queue, list(ids))).fetchone()
        assert row is not None
        return int(row[0] or 0)

    def item_state(self, queue: str, id: int, wait: Interval = 0) -> Optional[ItemState]:
        """The item's state; with ``wait``, waits inside the server up to that
        long for it to finish. None when the server knows nothing of it."""
        self.features.require("item_state")
        row = self._exec("SELECT state, attempt, result, error, finished_at "
                         "FROM claim.item_state(%s, %s::bigint, %s::interval)",
                         (queue, id, to_interval(wait))).fetchone()
        if row is None or row[0] is None:
            return None
        return ItemState(state=row[0], attempt=row[1], result=row[2], error=row[3], finished_at=row[4])

    def stats(self, queue: Optional[str] = None) -> List[QueueStats]:
        """Rows of ``claim.queue_stats`` (one queue, or all). A queue that
        does not exist raises :class:`UnknownQueue`."""
        cur = self._exec("SELECT * FROM claim.queue_stats" +
                         (" WHERE queue = %s" if queue is not None else "") + " ORDER BY queue",
                         (queue,) if queue is not None else None)
        names = [d.name for d in (cur.description or [])]
        out: List[QueueStats] = []
        for row in cur.fetchall():
            rec = dict(zip(names, row))
            extra = {k: v for k, v in rec.items() if k not in _STATS_FIELDS}
            # A count the server cannot know (a standby) stays None, not 0.
            out.append(QueueStats(queue=rec["queue"], ready=_count(rec["ready"]),
                                  scheduled=_count(rec["scheduled"]),
                                  claimed=_count(rec["claimed"]), dead=_count(rec["dead"]),
                                  oldest_ready_age=rec.get("oldest_ready_age"),
                                  waiting=None if rec.get("waiting") is None else int(rec["waiting"]),
                                  paused=rec.get("paused"), extra=extra))
        if queue is not None and not out:
            raise UnknownQueue(f"queue \"{queue}\" does not exist", sqlstate="42704",
                               hint="Create it with claim.create_queue().")
        return out

    def metrics(self) -> List[Dict[str, Any]]:
        """Rows of ``claim.metrics()`` (per-queue counters since server start
        and gauges), as dicts keyed by column name."""
        self.features.require("metrics")
        cur = self._exec("SELECT * FROM claim.metrics()")
        names = [d.name for d in (cur.description or [])]
        return [dict(zip(names, row)) for row in cur.fetchall()]

    # -- administration ------------------------------------------------------
    def create_queue(self, queue: str, *, lease: Optional[Interval] = None,
                     max_attempts: Optional[int] = None, backoff: Optional[Interval] = None,
                     **options: Any) -> None:
        """``claim.create_queue`` with the named options given."""
        named: Dict[str, Any] = {"lease": to_interval(lease), "max_attempts": max_attempts,
                                 "backoff": to_interval(backoff)}
        self._check_options("create_queue", options)
        named.update(options)
        call, params = _call("create_queue", [queue], named,
                             {"lease": "interval", "max_attempts": "int", "backoff": "interval",
                              "retain": "interval"})
        self._select(call, params)

    def _check_options(self, function: str, options: Dict[str, Any]) -> None:
        """InvalidArgument naming an option that claim.<function> does not
        take (rather than the server's 42883 for the whole call)."""
        known = set()
        for names, _types in self.features.functions.get(function, ()):
            known.update(names)
        known.discard("queue")
        for key in options:
            if key not in known:
                raise InvalidArgument(
                    f"claim.{function}() has no option {key!r}", sqlstate="22023",
                    hint="Its options: " + ", ".join(sorted(known)) + ".")

    def set_fair_weight(self, queue: str, fair_key: str, weight: int) -> None:
        """The key's share in a fair queue (1 to 10000; docs/fairness.md)."""
        self.features.require("set_fair_weight")
        self._exec("SELECT claim.set_fair_weight(%s, %s, %s::int)", (queue, fair_key, weight))

    def drop_queue(self, queue: str) -> None:
        self._exec("SELECT claim.drop_queue(%s)", (queue,))

    def redrive(self, queue: str, ids: Optional[Sequence[int]] = None) -> int:
        row = self._exec("SELECT claim.redrive(%s, %s::bigint[])",
                         (queue, list(ids) if ids is not None else None)).fetchone()
        assert row is not None
        return int(row[0] or 0)

    def pause(self, queue: str) -> None:
        self.features.require("pause")
        self._exec("SELECT claim.pause(%s)", (queue,))

    def resume(self, queue: str) -> None:
        self.features.require("resume")
        self._exec("SELECT claim.resume(%s)", (queue,))
