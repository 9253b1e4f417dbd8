"""The workers under the faults of issue 43: a cancelled AsyncWorker, handlers
that raise CancelledError or SystemExit, results that are not JSON, a
transient error at completion, keyword connection strings."""
from __future__ import annotations

import asyncio
import threading
import time
from typing import Any, List

import psycopg
import pytest

import pg_claim
from conftest import scalar


def _claimed(conn: "psycopg.Connection[Any]", queue: str) -> int:
    return int(scalar(conn, "SELECT claimed FROM claim.queue_stats WHERE queue = %s", (queue,)))


def _dead_errors(conn: "psycopg.Connection[Any]", queue: str) -> List[str]:
    return [r[0] for r in conn.execute(
        "SELECT last_error FROM claim.dead_items WHERE queue = %s", (queue,)).fetchall()]


def test_cancelling_async_run_stops_claiming_and_releases(dsn: str, conn: "psycopg.Connection[Any]",
                                                          client: pg_claim.Client,
                                                          queue: str) -> None:
    client.enqueue_batch(queue, [{"i": i} for i in range(50)])
    worked: List[int] = []

    async def handler(job: pg_claim.Job) -> None:
        worked.append(job.id)
        await asyncio.sleep(0.2)

    async def main() -> int:
        worker = pg_claim.AsyncWorker(dsn, queue, handler, concurrency=2, wait=0.2,
                                      handle_signals=False)
        task = asyncio.ensure_future(worker.run())
        await asyncio.sleep(1.0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        at_cancel = len(worked)
        await asyncio.sleep(1.5)   # nothing of the worker may still run
        assert len(worked) == at_cancel, f"{len(worked) - at_cancel} jobs ran after the cancel"
        return at_cancel

    asyncio.run(main())
    assert _claimed(conn, queue) == 0, "claims left live after the cancel"


@pytest.mark.parametrize("exc", ["cancelled", "systemexit"])
def test_handler_raising_base_exceptions_fails_the_item(dsn: str, conn: "psycopg.Connection[Any]",
                                                        client: pg_claim.Client, queue: str,
                                                        exc: str) -> None:
    conn.execute("SELECT claim.alter_queue(%s, max_attempts => 1)", (queue,))
    client.enqueue_batch(queue, [{"n": 1}, {"n": 2}])
    ran: List[int] = []

    async def handler(job: pg_claim.Job) -> None:
        ran.append(job.id)
        if exc == "cancelled":
            raise asyncio.CancelledError()
        raise SystemExit(3)

    async def main() -> pg_claim.WorkerStats:
        worker = pg_claim.AsyncWorker(dsn, queue, handler, concurrency=1, wait=0.2,
                                      handle_signals=False, lease=1)
        task = asyncio.ensure_future(worker.run())
        deadline = time.monotonic() + 10
        while worker.stats.failed < 2 and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        worker.stop()
        return await asyncio.wait_for(task, 10)

    stats = asyncio.run(main())
    assert stats.failed == 2, stats
    assert len(ran) == 2
    assert _claimed(conn, queue) == 0
    assert len(_dead_errors(conn, queue)) == 2


def test_sync_handler_raising_systemexit_fails_the_item(dsn: str, conn: "psycopg.Connection[Any]",
                                                        client: pg_claim.Client, queue: str) -> None:
    conn.execute("SELECT claim.alter_queue(%s, max_attempts => 1)", (queue,))
    client.enqueue_batch(queue, [{"n": 1}, {"n": 2}])

    def handler(job: pg_claim.Job) -> None:
        raise SystemExit(3)

    worker = pg_claim.Worker(dsn, queue, handler, concurrency=1, wait=0.2, burst=True,
                             handle_signals=False)
    stats = worker.run()
    assert stats.failed == 2, stats
    assert _claimed(conn, queue) == 0


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_unstorable_result_fails_the_item(dsn: str, conn: "psycopg.Connection[Any]",
                                          client: pg_claim.Client, queue: str, mode: str,
                                          features: pg_claim.Features) -> None:
    if not features.complete_result:
        pytest.skip("the server keeps no results")
    conn.execute("SELECT claim.alter_queue(%s, max_attempts => 1)", (queue,))
    client.enqueue_batch(queue, [{}])

    def handler(job: pg_claim.Job) -> Any:
        return {"when": object()}

    if mode == "sync":
        stats = pg_claim.Worker(dsn, queue, handler, wait=0.2, burst=True,
                                handle_signals=False).run()
    else:
        stats = asyncio.run(pg_claim.AsyncWorker(dsn, queue, handler, wait=0.2, burst=True,
                                                 handle_signals=False).run())
    assert (stats.completed, stats.failed) == (0, 1), stats
    errors = _dead_errors(conn, queue)
    assert len(errors) == 1 and "cannot be stored as JSON" in errors[0], errors


def test_keyword_conninfo(dsn: str) -> None:
    from psycopg.conninfo import conninfo_to_dict, make_conninfo
    kw = make_conninfo(**{k: v for k, v in conninfo_to_dict(dsn).items()})
    assert "://" not in kw
    with pg_claim.Client(kw) as c:
        assert isinstance(c.stats(), list)
