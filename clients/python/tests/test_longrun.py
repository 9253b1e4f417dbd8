"""A long run of the worker in transactional mode: PGCLAIM_LONGRUN_JOBS items
(400 in CI; run 100000 by hand with
``PGCLAIM_LONGRUN_JOBS=100000 python3 -m pytest -q -s tests/test_longrun.py``),
half of them failing on their first attempt or slow, on the threaded and the
asyncio worker. Every item is completed exactly once (one committed row
each), and memory, threads, connections and tasks stay flat between the
first quarter of the run and its end."""
from __future__ import annotations

import asyncio
import gc
import json
import logging
import os
import threading
import time
import tracemalloc
import uuid
from typing import Any, Dict, List

import psycopg
import pytest

import pg_claim
from conftest import connect

JOBS = int(os.environ.get("PGCLAIM_LONGRUN_JOBS", "400"))
CONCURRENCY = 4


def _backends(conn: "psycopg.Connection[Any]", name: str) -> int:
    row = conn.execute("SELECT count(*) FROM pg_catalog.pg_stat_activity "
                       "WHERE application_name = %s", (f"pg_claim worker {name}"[:63],)).fetchone()
    assert row is not None
    return int(row[0])


@pytest.mark.parametrize("kind", ["threads", "asyncio"])
def test_long_run_exactly_once_and_flat(dsn: str, kind: str) -> None:
    queue = "lr_" + uuid.uuid4().hex[:10]
    table = f"{queue}_rows"
    name = f"longrun-{queue}"
    with connect(dsn) as c:
        c.execute("SELECT claim.create_queue(%s, max_attempts => 3, backoff => '0 s')", (queue,))
        c.execute(f"CREATE TABLE {table} (id bigint NOT NULL)")
        with pg_claim.Client(dsn) as client:
            for i in range(0, JOBS, 10000):
                client.enqueue_batch(queue, [{"k": k} for k in range(i, min(JOBS, i + 10000))])
    samples: List[Dict[str, float]] = []
    tracemalloc.start()
    probe = connect(dsn)

    def sample(completed: int) -> None:
        gc.collect()
        samples.append({"done": completed, "mem": tracemalloc.get_traced_memory()[0] / 1048576,
                        "threads": threading.active_count(),
                        "tasks": len(asyncio.all_tasks()) if kind == "asyncio" else 0,
                        "conns": _backends(probe, name)})

    def outcome(job: pg_claim.Job) -> None:
        k = job.payload["k"]
        if k % 4 == 1 and job.attempt == 1:
            raise RuntimeError("fails on its first attempt")
        if k % 4 == 3:
            time.sleep(0.002) if kind == "threads" else None

    # The expected failures log a warning each: kept out of pytest's log
    # capture, which would hold every record (and grow the traced memory).
    wlog = logging.getLogger("pg_claim.worker")
    level = wlog.level
    wlog.setLevel(logging.ERROR)
    t0 = time.monotonic()
    try:
        if kind == "threads":
            def handler(job: pg_claim.Job) -> None:
                job.conn.execute(f"INSERT INTO {table} VALUES (%s)", (job.id,))
                outcome(job)
            worker: Any = pg_claim.Worker(dsn, queue, handler, concurrency=CONCURRENCY, wait=0.2,
                                          transactional=True, name=name, handle_signals=False)
            th = threading.Thread(target=worker.run)
            th.start()
            while th.is_alive():
                done = sum(s.completed for s in [worker.stats])
                sample(done)
                if done >= JOBS:
                    break
                time.sleep(0.25)
            worker.stop()
            th.join(60)
            stats = worker.stats
        else:
            async def ahandler(job: pg_claim.Job) -> None:
                await job.conn.execute(f"INSERT INTO {table} VALUES (%s)", (job.id,))
                if job.payload["k"] % 4 == 3:
                    await asyncio.sleep(0.002)
                outcome(job)

            async def main() -> Any:
                w = pg_claim.AsyncWorker(dsn, queue, ahandler, concurrency=CONCURRENCY, wait=0.2,
                                         transactional=True, name=name, handle_signals=False)
                task = asyncio.ensure_future(w.run())
                while not task.done():
                    sample(w.stats.completed)
                    if w.stats.completed >= JOBS:
                        break
                    await asyncio.sleep(0.25)
                w.stop()
                return await task
            stats = asyncio.run(main())
        secs = time.monotonic() - t0
        first = samples[len(samples) // 4]
        last = samples[-1]
        row = probe.execute(f"SELECT count(*), count(DISTINCT id) FROM {table}").fetchone()
        assert row is not None
        report = {"kind": kind, "jobs": JOBS, "seconds": round(secs, 1),
                  "per_second": round(JOBS / secs), "failed": stats.failed,
                  "mem_first_quarter_mb": round(first["mem"], 1), "mem_last_mb": round(last["mem"], 1),
                  "max_threads": max(s["threads"] for s in samples),
                  "max_tasks": max(s["tasks"] for s in samples),
                  "max_conns": max(s["conns"] for s in samples)}
        print("longrun " + json.dumps(report))
        assert stats.completed == JOBS
        assert tuple(row) == (JOBS, JOBS), "one committed row per item: exactly once"
        assert report["max_conns"] <= CONCURRENCY + 1
        # A slot and a heartbeat thread per slot; the main thread, the
        # deadlines' watchdog, pytest's and a spare.
        assert report["max_threads"] <= 2 * CONCURRENCY + 4
        assert report["max_tasks"] <= 3 * CONCURRENCY + 4
        assert last["mem"] < first["mem"] * 1.5 + 8, report
    finally:
        wlog.setLevel(level)
        tracemalloc.stop()
        probe.close()
        with connect(dsn) as c:
            c.execute("SELECT claim.drop_queue(%s)", (queue,))
            c.execute(f"DROP TABLE IF EXISTS {table}")
