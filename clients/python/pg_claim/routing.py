"""Direct routing to the partitions of a partitioned pg_claim, without the
PL/Proxy front (docs/partitions.md, "Clients that route directly").

:class:`PartitionedClient` takes the connection strings of partitions 0 to
P - 1 (P a power of two) and sends each call to the partition the front
would: a queue by :func:`route_hash` of its name, a token by its partition
bits (:func:`token_partition`), a lease by its name, once and guards by their
key. A spread queue (one that exists on more than one partition, as
``claim.create_queue(..., spread => true)`` at the front makes it) is placed
and claimed like the front does: items with a group key (else dedup key) on
:func:`spread_partition`, others at random; claims from the partitions in
turn from a random one, skipping those that cannot be reached.
"""
from __future__ import annotations

import random
import time
from typing import Any, Dict, List, Optional, Sequence

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from ._common import Interval, to_interval
from .errors import PgClaimError, map_error

__all__ = ["PartitionedClient", "PartitionUnreachable", "route_hash", "spread_partition",
           "token_partition"]

MAX_SAFE = 9007199254740991


class PartitionUnreachable(PgClaimError, sqlstate="PC003"):
    """A partition that the call needs cannot be reached (SQLSTATE PC003 at
    the front; here the connection error of the partition itself)."""

    def __init__(self, partition: int, cause: BaseException):
        super().__init__(f"partition {partition} cannot be reached: {cause}")
        self.partition = partition
        self.__cause__ = cause


def route_hash(key: Optional[str]) -> int:
    """32-bit FNV-1a over the UTF-8 bytes of key, as a signed int4 (0 for
    None): the front's ``claim.route_hash``."""
    if key is None:
        return 0
    h = 2166136261
    for b in key.encode("utf-8"):
        h = ((h ^ b) * 16777619) & 0xFFFFFFFF
    return h - 0x100000000 if h >= 0x80000000 else h


def token_partition(token: int) -> int:
    """The partition bits of a token: 52..47 (62..53 for a token of 0.2.0,
    above 2^53 - 1); -1 for a negative value."""
    if token < 0:
        return -1
    return token >> 53 if token > MAX_SAFE else token >> 47


def spread_partition(partitions: Sequence[int], key: Optional[str]) -> int:
    """The partition of a spread queue that holds the items of key: the
    front's ``claim.spread_partition``."""
    return partitions[(route_hash(key) & 0xFFFFFFFF) % len(partitions)]


class PartitionedClient:
    """Calls routed to the partitions directly, one autocommit connection per
    partition (opened when first needed, opened again after a failure)."""

    def __init__(self, partitions: Sequence[str], *, spread_wait_slice: float = 0.05):
        if not partitions or len(partitions) & (len(partitions) - 1):
            raise ValueError("partitions: a power of two of connection strings, partition 0 first")
        self.dsns = list(partitions)
        self.slice = spread_wait_slice
        self._conns: Dict[int, psycopg.Connection[Any]] = {}
        self._spread: Dict[str, Optional[List[int]]] = {}

    # ------------------------------------------------------------ plumbing
    def close(self) -> None:
        for c in self._conns.values():
            c.close()
        self._conns.clear()

    def __enter__(self) -> "PartitionedClient":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def partition_of(self, key: Optional[str]) -> int:
        """The partition of a queue name, lease name or once/guard key."""
        return route_hash(key) & (len(self.dsns) - 1)

    def _conn(self, k: int) -> "psycopg.Connection[Any]":
        c = self._conns.get(k)
        if c is None or c.closed or c.broken:
            try:
                c = psycopg.connect(self.dsns[k], autocommit=True, row_factory=dict_row)
            except psycopg.OperationalError as e:
                raise PartitionUnreachable(k, e) from e
            self._conns[k] = c
        return c

    def _run(self, k: int, sql: str, params: Sequence[Any]) -> List[Dict[str, Any]]:
        c = self._conns.get(k)
        try:
            if c is None or c.broken or c.closed:
                c = self._conn(k)
            cur = c.execute(sql, params)
            return cur.fetchall() if cur.description else []
        except PartitionUnreachable:
            raise
        except psycopg.OperationalError as e:
            c = self._conns.get(k)
            if c is not None and (c.closed or c.broken):
                raise PartitionUnreachable(k, e) from e
            raise map_error(e) from e
        except psycopg.Error as e:
            raise map_error(e) from e

    def spread_partitions(self, queue: str) -> Optional[List[int]]:
        """The partitions of a spread queue, None for a queue on one
        partition (looked up once per client, on every partition that can be
        reached; a client made before a queue is spread routes it as before)."""
        if queue not in self._spread:
            have = []
            for k in range(len(self.dsns)):
                try:
                    if self._run(k, "SELECT 1 FROM claim.queues WHERE name = %s", [queue]):
                        have.append(k)
                except PartitionUnreachable:
                    if k != self.partition_of(queue):
                        continue
                    raise
            self._spread[queue] = have if len(have) > 1 else None
        return self._spread[queue]

    # ---------------------------------------------------------------- queues
    def enqueue(self, queue: str, payload: Any = None, *, group_key: Optional[str] = None,
                run_at: Any = None, priority: int = 0, dedup_key: Optional[str] = None) -> int:
        params = [queue, Jsonb({} if payload is None else payload), group_key, run_at, priority,
                  dedup_key]
        sql = "SELECT claim.enqueue(%s, %s, %s, %s, %s, %s) AS id"
        parts = self.spread_partitions(queue)
        if parts is None:
            return self._run(self.partition_of(queue), sql, params)[0]["id"]
        key = group_key if group_key is not None else dedup_key
        if key is not None:
            return self._run(spread_partition(parts, key), sql, params)[0]["id"]
        start = random.randrange(len(parts))
        for i in range(len(parts)):
            try:
                return self._run(parts[(start + i) % len(parts)], sql, params)[0]["id"]
            except PartitionUnreachable:
                if i == len(parts) - 1:
                    raise
        raise AssertionError("unreachable")

    def enqueue_many(self, queue: str, payloads: Sequence[Any],
                     group_keys: Optional[Sequence[Optional[str]]] = None) -> List[int]:
        """Ids partition by partition (a spread queue), each partition's
        items in one transaction there."""
        sql = "SELECT id FROM claim.enqueue_many(%s, %s::jsonb[], %s::text[]) AS id"
        parts = self.spread_partitions(queue)
        if parts is None:
            return [r["id"] for r in self._run(self.partition_of(queue), sql,
                                               [queue, [Jsonb(p) for p in payloads], group_keys])]
        start = random.randrange(len(parts))
        by: Dict[int, List[int]] = {}
        for i in range(len(payloads)):
            g = group_keys[i] if group_keys is not None else None
            k = parts[(start + i + 1) % len(parts)] if g is None else spread_partition(parts, g)
            by.setdefault(k, []).append(i)
        ids: List[int] = []
        for k in sorted(by):
            sel = by[k]
            ids += [r["id"] for r in self._run(k, sql, [
                queue, [Jsonb(payloads[i]) for i in sel],
                None if group_keys is None else [group_keys[i] for i in sel]])]
        return ids

    def claim_next(self, queue: str, n: int = 1, *, lease: Interval = None,
                   wait: Interval = None) -> List[Dict[str, Any]]:
        """Up to n items, all from one partition: of a spread queue, the
        first of its partitions in turn (from a random one) that has any;
        with wait, rounds that wait spread_wait_slice on each partition."""
        sql = "SELECT * FROM claim.claim_next(%s, %s, %s::interval, %s::interval)"
        le = to_interval(lease)
        parts = self.spread_partitions(queue)
        if parts is None:
            return self._run(self.partition_of(queue), sql, [queue, n, le, to_interval(wait) or "0"])
        if isinstance(wait, str):
            raise TypeError("wait for a spread queue: seconds or a timedelta")
        total = to_interval(wait)
        deadline = time.monotonic() + (total.total_seconds() if total is not None else 0.0)
        start = random.randrange(len(parts))
        w = 0.0
        while True:
            reached = 0
            last: Optional[PartitionUnreachable] = None
            for i in range(len(parts)):
                k = parts[(start + i) % len(parts)]
                try:
                    rows = self._run(k, sql, [queue, n, le, f"{w} s"])
                except PartitionUnreachable as e:
                    last = e
                    continue
                reached += 1
                if rows:
                    return rows
            if reached == 0 and last is not None:
                raise last
            left = deadline - time.monotonic()
            if left <= 0:
                return []
            w = min(self.slice, left)
            start += 1

    def queue_stats(self, queue: str) -> Dict[str, int]:
        """ready, scheduled, claimed and dead of one queue, summed over its
        partitions."""
        parts = self.spread_partitions(queue) or [self.partition_of(queue)]
        out = {"ready": 0, "scheduled": 0, "claimed": 0, "dead": 0}
        for k in parts:
            for r in self._run(k, "SELECT ready, scheduled, claimed, dead FROM claim.queue_stats"
                                  " WHERE queue = %s", [queue]):
                for f in out:
                    out[f] += r[f]
        return out

    # ---------------------------------------------------------------- tokens
    def complete(self, token: int, result: Any = None) -> int:
        return self._run(token_partition(token), "SELECT claim.complete(%s, %s) AS n",
                         [token, None if result is None else Jsonb(result)])[0]["n"]

    def complete_many(self, tokens: Sequence[int], skip_stale: bool = False) -> int:
        """Tokens of several partitions are completed partition by partition."""
        by: Dict[int, List[int]] = {}
        for t in tokens:
            by.setdefault(token_partition(t), []).append(t)
        return sum(self._run(k, "SELECT claim.complete_many(%s::bigint[], %s) AS n",
                             [ts, skip_stale])[0]["n"] for k, ts in sorted(by.items()))

    def fail(self, token: int, error: Optional[str] = None, retry_in: Interval = None) -> int:
        return self._run(token_partition(token), "SELECT claim.fail(%s, %s, %s::interval) AS n",
                         [token, error, to_interval(retry_in)])[0]["n"]

    def extend(self, token: int, lease: Interval = None) -> Any:
        return self._run(token_partition(token), "SELECT claim.extend(%s, %s::interval) AS t",
                         [token, to_interval(lease)])[0]["t"]

    def release(self, token: int) -> int:
        return self._run(token_partition(token), "SELECT claim.release(%s) AS n",
                         [token])[0]["n"]

    # ---------------------------------------------------- leases, once, guards
    def lease_acquire(self, name: str, ttl: Interval, holder: Optional[str] = None,
                      permits: int = 1) -> Optional[int]:
        return self._run(self.partition_of(name),
                         "SELECT claim.lease_acquire(%s, %s::interval, %s, %s) AS t",
                         [name, to_interval(ttl), holder, permits])[0]["t"]

    def lease_release(self, name: str, token: int) -> bool:
        return self._run(token_partition(token), "SELECT claim.lease_release(%s, %s) AS r",
                         [name, token])[0]["r"]

    def once(self, key: str, ttl: Interval = None) -> bool:
        return self._run(self.partition_of(key), "SELECT claim.once(%s, %s::interval) AS r",
                         [key, to_interval(ttl)])[0]["r"]
