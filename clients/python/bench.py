#!/usr/bin/env python3
"""Throughput of pg_claim.Worker (no-op handler, 8 concurrent jobs) beside a
minimal hand-written loop with the same driver and the same 8 threads
(claim_next + complete, one connection per thread), in the same run.

    PG_CLAIM_DSN=postgresql://user@host:port/db /usr/bin/python3 clients/python/bench.py

With --done-loop, a hand-written one-round-trip loop (claim_next(done =>
...)) runs too. Each window drains a fresh queue of --jobs items; windows run
in the order loop, worker, worker, loop (--rounds times) so a drift of the machine weighs
on both sides alike; the figures are the means of each side's windows.
Connection set-up is inside each window on both sides.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
import uuid
from typing import Any, Callable, Dict, List, Optional, Tuple

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import psycopg  # noqa: E402

import pg_claim  # noqa: E402


def fill(dsn: str, queue: str, jobs: int) -> None:
    with pg_claim.Client(dsn) as c:
        c.create_queue(queue, lease="30 s")
        for start in range(0, jobs, 5000):
            c.enqueue_batch(queue, [{"n": i} for i in range(start, min(jobs, start + 5000))])


def drop(dsn: str, queue: str) -> None:
    with pg_claim.Client(dsn) as c:
        left = c.stats(queue)[0]
        assert left.ready + left.claimed + left.dead + left.scheduled == 0, left
        c.drop_queue(queue)


def in_threads(dsn: str, threads: int, prepare: bool,
               loop: Callable[["psycopg.Connection[Any]"], int]) -> int:
    """Runs ``loop(conn)`` in ``threads`` threads, each on a connection of its
    own; the jobs they did, summed."""
    counts: List[int] = [0] * threads

    def run(i: int) -> None:
        with psycopg.connect(dsn, autocommit=True,
                             prepare_threshold=5 if prepare else None) as conn:
            counts[i] = loop(conn)

    ts = [threading.Thread(target=run, args=(i,)) for i in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return sum(counts)


def hand_loop(dsn: str, queue: str, threads: int, prepare: bool) -> int:
    """The loop every user writes by hand: claim one, (no-op), complete it."""
    def loop(conn: "psycopg.Connection[Any]") -> int:
        n = 0
        while True:
            row = conn.execute("SELECT id, token, payload FROM claim.claim_next(%s)",
                               (queue,)).fetchone()
            if row is None:
                return n
            conn.execute("SELECT claim.complete(%s::bigint)", (row[1],))
            n += 1

    return in_threads(dsn, threads, prepare, loop)


def done_loop(dsn: str, queue: str, threads: int, prepare: bool) -> int:
    """The hand-written one-round-trip loop: each claim completes the
    previous job (claim_next(done => ...)), as the worker does."""
    def loop(conn: "psycopg.Connection[Any]") -> int:
        n = 0
        done: Optional[List[int]] = None
        while True:
            row = conn.execute("SELECT id, token, payload FROM claim.claim_next(%s, "
                               "done => %s::bigint[])", (queue, done)).fetchone()
            if row is None:
                return n
            done = [row[1]]
            n += 1

    return in_threads(dsn, threads, prepare, loop)


def worker_run(dsn: str, queue: str, threads: int, prepare: bool) -> int:
    def noop(job: pg_claim.Job) -> None:
        return None

    stats = pg_claim.Worker(dsn, queue, noop, concurrency=threads, wait=0, burst=True,
                            prepare=prepare, handle_signals=False).run()
    return stats.completed


def window(kind: str, dsn: str, jobs: int, threads: int, prepare: bool) -> Tuple[float, float]:
    """Jobs per second and this process's CPU microseconds per job."""
    queue = "bench_" + uuid.uuid4().hex[:8]
    fill(dsn, queue, jobs)
    c0 = time.process_time()
    t0 = time.perf_counter()
    run = {"loop": hand_loop, "done": done_loop, "worker": worker_run}[kind]
    done = run(dsn, queue, threads, prepare)
    elapsed = time.perf_counter() - t0
    cpu = time.process_time() - c0
    drop(dsn, queue)
    assert done == jobs, f"{kind}: completed {done} of {jobs}"
    return jobs / elapsed, cpu / jobs * 1e6


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dsn", default=os.environ.get("PG_CLAIM_DSN", ""))
    ap.add_argument("--jobs", type=int, default=10000)
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--done-loop", action="store_true",
                    help="also run a hand-written one-round-trip loop (claim_next(done => ...))")
    ap.add_argument("--prepare", action="store_true",
                    help="let psycopg prepare statements (both sides); not behind PgBouncer < 1.21")
    args = ap.parse_args()
    with pg_claim.Client(args.dsn) as c:
        feats = c.features
    print(f"jobs per window {args.jobs}, {args.threads} threads, prepare={args.prepare}, "
          f"one-round-trip loop (claim_next done =>): {'yes' if feats.claim_done else 'no (server lacks it)'}")
    order: Tuple[str, ...] = ("loop", "worker", "worker", "loop")
    if args.done_loop:
        if not feats.claim_done:
            ap.error("--done-loop: the server's claim_next has no done argument")
        order = ("loop", "done", "worker", "worker", "done", "loop")
    res: Dict[str, List[float]] = {k: [] for k in order}
    cpu: Dict[str, List[float]] = {k: [] for k in order}
    for _ in range(args.rounds):
        for kind in order:
            rate, us = window(kind, args.dsn, args.jobs, args.threads, args.prepare)
            res[kind].append(rate)
            cpu[kind].append(us)
            print(f"  {kind:6s} {rate:8.0f} jobs/s  {us:6.1f} us client CPU/job", flush=True)
    loop = statistics.mean(res["loop"])
    work = statistics.mean(res["worker"])
    print(f"hand-written loop: {loop:.0f} jobs/s, {statistics.mean(cpu['loop']):.1f} us client CPU/job")
    print(f"pg_claim.Worker:   {work:.0f} jobs/s, {statistics.mean(cpu['worker']):.1f} us client CPU/job")
    print(f"ratio: {work / loop:.2f}x")
    if args.done_loop:
        one = statistics.mean(res["done"])
        print(f"hand-written one-round-trip loop: {one:.0f} jobs/s, "
              f"{statistics.mean(cpu['done']):.1f} us client CPU/job")
        print(f"ratio to it: {work / one:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
