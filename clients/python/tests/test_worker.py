"""The worker in-process: heartbeat, results, failures, Retry, stale tokens,
transactional mode, the asyncio variant."""
from __future__ import annotations

import asyncio
import threading
import time
import uuid
from typing import Any, Dict, List, Tuple

import psycopg
from psycopg.conninfo import make_conninfo
import pytest

import pg_claim
from conftest import connect, scalar


def test_noop_worker_drains_queue(dsn: str, conn: "psycopg.Connection[Any]",
                                  client: pg_claim.Client, queue: str) -> None:
    ids = client.enqueue_batch(queue, [{"n": i} for i in range(500)])
    seen: List[int] = []
    lock = threading.Lock()

    def handler(job: pg_claim.Job) -> None:
        assert job.queue == queue and job.attempt == 1
        with lock:
            seen.append(job.id)

    stats = pg_claim.Worker(dsn, queue, handler, concurrency=4, wait=0.3, burst=True).run()
    assert sorted(seen) == sorted(ids)
    assert (stats.claimed, stats.completed, stats.failed, stats.stale) == (500, 500, 0, 0)
    assert client.stats(queue)[0].ready == 0


def test_heartbeat_keeps_short_lease_alive(dsn: str, conn: "psycopg.Connection[Any]",
                                           client: pg_claim.Client, queue: str) -> None:
    item = client.enqueue(queue, {"slow": True})
    seen: Dict[str, Any] = {}

    def handler(job: pg_claim.Job) -> None:
        time.sleep(6.0)
        # Still the live claim, 6 s into a 2 s lease, never re-delivered.
        with connect(dsn) as other:
            seen["claim"] = other.execute(
                "SELECT token, attempt, live FROM claim.claimed_items WHERE id = %s",
                (job.id,)).fetchone()
        seen["job"] = (job.token, job.attempt)

    stats = pg_claim.Worker(dsn, queue, handler, lease=2, wait=0.2, burst=True,
                            max_jobs=1).run()
    token, attempt = seen["job"]
    assert seen["claim"] == (token, 1, True)
    assert attempt == 1
    assert stats.extended >= 2
    assert (stats.completed, stats.stale) == (1, 0)
    assert scalar(conn, "SELECT count(*) FROM claim.items WHERE id = %s", (item,)) == 0


def test_failure_records_exception_text(dsn: str, conn: "psycopg.Connection[Any]",
                                        client: pg_claim.Client, queue: str) -> None:
    conn.execute("SELECT claim.drop_queue(%s)", (queue,))
    conn.execute("SELECT claim.create_queue(%s, max_attempts => 1)", (queue,))
    item = client.enqueue(queue, {})

    def handler(job: pg_claim.Job) -> None:
        raise ValueError("boom 42")

    stats = pg_claim.Worker(dsn, queue, handler, wait=0.2, burst=True).run()
    assert stats.failed == 1
    row = conn.execute("SELECT id, last_error FROM claim.dead_items WHERE queue = %s",
                       (queue,)).fetchone()
    assert row == (item, "boom 42")


def test_retry_sets_the_delay(dsn: str, conn: "psycopg.Connection[Any]",
                              client: pg_claim.Client, queue: str) -> None:
    client.enqueue(queue, {"later": True})
    client.enqueue(queue, {"again": True})
    attempts: List[Any] = []

    def handler(job: pg_claim.Job) -> str:
        attempts.append((job.payload, job.attempt))
        if "later" in job.payload:
            raise pg_claim.Retry(after=3600, message="not yet")
        if job.attempt == 1:
            raise pg_claim.Retry(after=0)
        return "ok"

    stats = pg_claim.Worker(dsn, queue, handler, wait=0.3, burst=True).run()
    assert stats.retried == 2 and stats.completed == 1
    assert sorted(a for p, a in attempts if "again" in p) == [1, 2]
    # The delayed one waits its hour as a scheduled item, with its error kept.
    st = client.stats(queue)[0]
    assert (st.ready, st.scheduled, st.dead) == (0, 1, 0)
    assert scalar(conn, "SELECT last_error FROM claim.items i JOIN claim.queues q "
                        "ON q.queue_id = i.queue_id WHERE q.name = %s", (queue,)) == "not yet"


def test_result_is_stored(dsn: str, client: pg_claim.Client, queue: str,
                          features: pg_claim.Features) -> None:
    if not (features.complete_result and features.has("item_state")):
        pytest.skip("server has no complete(token, result) / item_state")
    conn_q = connect(dsn)
    conn_q.execute("SELECT claim.alter_queue(%s, retain => '1 hour')", (queue,))
    item = client.enqueue(queue, {"x": 2})
    pg_claim.Worker(dsn, queue, lambda job: {"double": job.payload["x"] * 2}, wait=0.2,
                    burst=True).run()
    st = client.item_state(queue, item)
    assert st is not None and st.state == "completed" and st.result == {"double": 4}


def test_stale_token_outcome_dropped(dsn: str, conn: "psycopg.Connection[Any]",
                                     client: pg_claim.Client, queue: str) -> None:
    client.enqueue(queue, {})

    def handler(job: pg_claim.Job) -> None:
        # Someone else gives the item back under the worker's feet.
        with connect(dsn) as other:
            other.execute("SELECT claim.release(%s::bigint)", (job.token,))

    stats = pg_claim.Worker(dsn, queue, handler, wait=0.2, max_jobs=1, heartbeat=False).run()
    assert (stats.completed, stats.stale) == (0, 1)
    assert client.stats(queue)[0].ready == 1


def test_transactional_commits_writes_with_completion(dsn: str, conn: "psycopg.Connection[Any]",
                                                      client: pg_claim.Client, queue: str) -> None:
    ok = client.enqueue(queue, {"ok": True})
    bad = client.enqueue(queue, {"ok": False})

    def handler(job: pg_claim.Job) -> None:
        assert job.conn is not None
        job.conn.execute(f"INSERT INTO {queue}_done VALUES (%s, 'tx', %s, %s)",
                         (job.id, job.token, job.attempt))
        if not job.payload["ok"]:
            raise RuntimeError("handler failed after its write")

    stats = pg_claim.Worker(dsn, queue, handler, transactional=True, wait=0.2,
                            max_jobs=2).run()
    assert (stats.completed, stats.failed) == (1, 1)
    assert [r[0] for r in conn.execute(f"SELECT id FROM {queue}_done").fetchall()] == [ok]
    assert scalar(conn, "SELECT count(*) FROM claim.items WHERE id = %s", (ok,)) == 0
    assert scalar(conn, "SELECT last_error FROM claim.items WHERE id = %s",
                  (bad,)) == "handler failed after its write"


def test_transactional_lease_lost_leaves_no_writes(dsn: str, conn: "psycopg.Connection[Any]",
                                                   client: pg_claim.Client, queue: str) -> None:
    item = client.enqueue(queue, {})

    def handler(job: pg_claim.Job) -> None:
        assert job.conn is not None
        job.conn.execute(f"INSERT INTO {queue}_done VALUES (%s, 'tx', %s, %s)",
                         (job.id, job.token, job.attempt))
        if job.attempt == 1:
            time.sleep(1.6)   # no heartbeat: the 1 s lease runs out

    stats = pg_claim.Worker(dsn, queue, handler, transactional=True, lease=1, heartbeat=False,
                            wait=0.2, max_jobs=1).run()
    assert (stats.completed, stats.stale) == (0, 1)
    assert scalar(conn, f"SELECT count(*) FROM {queue}_done") == 0
    # Reclaimed by the next worker: its writes and completion commit.
    stats = pg_claim.Worker(dsn, queue, handler, transactional=True, wait=0.2,
                            max_jobs=1).run()
    assert stats.completed == 1
    assert conn.execute(f"SELECT id, attempt FROM {queue}_done").fetchall() == [(item, 2)]


def run_fenced_late(dsn: str, queue: str, before: Any,
                    **kwargs: Any) -> "Tuple[List[int], pg_claim.WorkerStats]":
    """One job of a transactional worker whose handler records its call and
    writes a row; ``before(job)`` runs between the claim and the handler's
    transaction. The calls and the worker's stats."""
    calls: List[int] = []

    def handler(job: pg_claim.Job) -> None:
        calls.append(job.id)
        assert job.conn is not None
        job.conn.execute(f"INSERT INTO {queue}_done VALUES (%s, 'tx', %s, %s)",
                         (job.id, job.token, job.attempt))

    worker = pg_claim.Worker(dsn, queue, handler, transactional=True, wait=0.2, max_jobs=1,
                             **kwargs)
    orig = worker._process_tx

    def late(slot: Any, job: pg_claim.Job) -> None:
        before(job)
        orig(slot, job)

    worker._process_tx = late  # type: ignore[assignment]
    return calls, worker.run()


def test_transactional_reclaimed_by_other_worker(dsn: str, conn: "psycopg.Connection[Any]",
                                                 client: pg_claim.Client, queue: str) -> None:
    """The lease runs out before the handler's transaction starts; another
    worker has re-claimed the item: assert_token refuses, nothing is written."""
    client.enqueue(queue, {})
    with connect(dsn) as other:
        def reclaim(job: pg_claim.Job) -> None:
            time.sleep(0.8)
            other.execute("SELECT claim.claim_next(%s)", (queue,))

        calls, stats = run_fenced_late(dsn, queue, reclaim, lease=0.5)
    assert calls == [] and stats.stale == 1
    assert scalar(conn, f"SELECT count(*) FROM {queue}_done") == 0


def test_transactional_cancelled_before_fence(dsn: str, conn: "psycopg.Connection[Any]",
                                             client: pg_claim.Client, queue: str,
                                             features: pg_claim.Features) -> None:
    """The item is cancelled after the claim, before the handler's
    transaction fences it: assert_token refuses, the handler never runs."""
    if not features.has("cancel"):
        pytest.skip("server has no claim.cancel")
    item = client.enqueue(queue, {})
    def cancel(job: pg_claim.Job) -> None:
        assert client.cancel(queue, [job.id]) == 1

    calls, stats = run_fenced_late(dsn, queue, cancel)
    assert calls == [] and (stats.stale, stats.completed) == (1, 0)
    assert scalar(conn, f"SELECT count(*) FROM {queue}_done") == 0
    st = client.item_state(queue, item)
    assert st is None or st.state == "cancelled"


def test_transactional_cancel_during_handler(dsn: str, conn: "psycopg.Connection[Any]",
                                             client: pg_claim.Client, queue: str,
                                             features: pg_claim.Features) -> None:
    """A cancel issued while the handler runs: the handler's writes and the
    completion commit together, or neither does; never writes without the
    completion."""
    if not features.has("cancel"):
        pytest.skip("server has no claim.cancel")
    item = client.enqueue(queue, {})
    results: Dict[str, Any] = {}

    def cancel_it() -> None:
        with pg_claim.Client(dsn) as other:
            results["cancelled"] = other.cancel(queue, [item])

    def handler(job: pg_claim.Job) -> None:
        assert job.conn is not None
        job.conn.execute(f"INSERT INTO {queue}_done VALUES (%s, 'tx', %s, %s)",
                         (job.id, job.token, job.attempt))
        t = threading.Thread(target=cancel_it)
        t.start()
        t.join(1.0)
        results["thread"] = t

    stats = pg_claim.Worker(dsn, queue, handler, transactional=True, wait=0.2,
                            max_jobs=1).run()
    results["thread"].join(10)
    written = scalar(conn, f"SELECT count(*) FROM {queue}_done")
    # assert_token holds the item, so the cancel waits for the handler's
    # transaction and then finds the item finished; were it to win, the
    # worker's commit would be refused and nothing written.
    if results["cancelled"]:
        assert written == 0 and stats.stale == 1
    else:
        assert written == 1 and stats.completed == 1
        assert scalar(conn, "SELECT count(*) FROM claim.items WHERE id = %s", (item,)) == 0


def test_async_worker(dsn: str, conn: "psycopg.Connection[Any]", client: pg_claim.Client,
                      queue: str) -> None:
    ids = client.enqueue_batch(queue, [{"n": i} for i in range(300)])
    client.enqueue(queue, {"fail": True})
    seen: List[int] = []

    async def handler(job: pg_claim.Job) -> None:
        if job.payload.get("fail"):
            raise pg_claim.Retry(after=3600, message="async retry")
        await asyncio.sleep(0)
        seen.append(job.id)

    worker = pg_claim.AsyncWorker(dsn, queue, handler, concurrency=4, wait=0.3, burst=True)
    stats = asyncio.run(worker.run())
    assert sorted(seen) == sorted(ids)
    assert (stats.completed, stats.retried, stats.stale) == (300, 1, 0)


def test_async_worker_transactional_and_heartbeat(dsn: str, conn: "psycopg.Connection[Any]",
                                                  client: pg_claim.Client, queue: str) -> None:
    item = client.enqueue(queue, {})

    async def handler(job: pg_claim.Job) -> None:
        await job.conn.execute(f"INSERT INTO {queue}_done VALUES (%s, 'async', %s, %s)",
                               (job.id, job.token, job.attempt))
        await asyncio.sleep(2.5)

    worker = pg_claim.AsyncWorker(dsn, queue, handler, transactional=True, lease=1, wait=0.2,
                                  max_jobs=1)
    stats = asyncio.run(worker.run())
    assert (stats.completed, stats.stale) == (1, 0) and stats.extended >= 2
    assert conn.execute(f"SELECT id, attempt FROM {queue}_done").fetchall() == [(item, 1)]


def test_async_worker_results_failures_and_stale_tokens(dsn: str, client: pg_claim.Client,
                                                        queue: str,
                                                        features: pg_claim.Features) -> None:
    if not (features.complete_result and features.has("item_state")):
        pytest.skip("server has no complete(token, result) / item_state")
    with connect(dsn) as c:
        c.execute("SELECT claim.alter_queue(%s, retain => '1 hour', max_attempts => 1)", (queue,))
    done, broken, taken = client.enqueue_batch(queue, [{"k": "done"}, {"k": "broken"},
                                                       {"k": "taken"}])

    async def handler(job: pg_claim.Job) -> Any:
        if job.payload["k"] == "broken":
            raise ValueError("broken on purpose")
        if job.payload["k"] == "taken":
            # Someone else gives the item back under the worker's feet.
            with connect(dsn) as other:
                other.execute("SELECT claim.release(%s::bigint)", (job.token,))
            return None
        return {"id": job.id}

    stats = asyncio.run(pg_claim.AsyncWorker(dsn, queue, handler, wait=0.2, max_jobs=3,
                                             heartbeat=False).run())
    assert (stats.completed, stats.failed, stats.stale) == (1, 1, 1)
    st = client.item_state(queue, done)
    assert st is not None and st.state == "completed" and st.result == {"id": done}
    st = client.item_state(queue, broken)
    assert st is not None and st.state == "dead" and "broken on purpose" in (st.error or "")
    st = client.item_state(queue, taken)
    assert st is not None and st.state == "ready"


def test_stop_from_another_thread(dsn: str, client: pg_claim.Client, queue: str) -> None:
    worker = pg_claim.Worker(dsn, queue, lambda job: None, concurrency=3, wait=30)
    timer = threading.Timer(0.5, worker.stop)
    timer.start()
    t0 = time.monotonic()
    worker.run()
    # The claims waiting in the server were cancelled, not waited out.
    assert time.monotonic() - t0 < 10


@pytest.mark.parametrize("transactional", [False, True], ids=["plain", "transactional"])
def test_async_worker_stop_releases_after_grace(dsn: str, conn: "psycopg.Connection[Any]",
                                                client: pg_claim.Client, queue: str,
                                                transactional: bool) -> None:
    items = client.enqueue_batch(queue, [{}, {}])
    started: List[int] = []

    async def handler(job: pg_claim.Job) -> None:
        if transactional:
            await job.conn.execute(f"INSERT INTO {queue}_done VALUES (%s, 'a', %s, %s)",
                                   (job.id, job.token, job.attempt))
        started.append(job.id)
        await asyncio.sleep(60)

    worker = pg_claim.AsyncWorker(dsn, queue, handler, concurrency=3, wait=30, grace=0.5,
                                  lease=60, transactional=transactional)

    async def main() -> pg_claim.WorkerStats:
        task = asyncio.ensure_future(worker.run())
        while len(started) < 2:
            await asyncio.sleep(0.05)
        # From another thread, as a signal handler or a supervisor would.
        threading.Thread(target=worker.stop).start()
        return await asyncio.wait_for(task, 15)

    t0 = time.monotonic()
    stats = asyncio.run(main())
    assert time.monotonic() - t0 < 10
    assert stats.released == 2 and stats.completed == 0
    # Released: ready again at once, attempt not used up.
    rows = conn.execute("SELECT id, attempt FROM claim.claim_next(%s, 2)", (queue,)).fetchall()
    assert sorted(r[0] for r in rows) == sorted(items) and [r[1] for r in rows] == [1, 1]
    assert scalar(conn, f"SELECT count(*) FROM {queue}_done") == 0


def test_unknown_queue_stops_the_worker(dsn: str) -> None:
    missing = "no_such_queue_" + uuid.uuid4().hex[:6]
    with pytest.raises(pg_claim.UnknownQueue):
        pg_claim.Worker(dsn, missing, lambda job: None, concurrency=2, wait=0.2).run()
    with pytest.raises(pg_claim.UnknownQueue):
        asyncio.run(pg_claim.AsyncWorker(dsn, missing, lambda job: None, wait=0.2).run())


def test_worker_reconnects_after_losing_its_connections(dsn: str, conn: "psycopg.Connection[Any]",
                                                       client: pg_claim.Client,
                                                       queue: str) -> None:
    name = "reconnect_" + uuid.uuid4().hex[:6]
    seen: List[int] = []
    worker = pg_claim.Worker(dsn, queue, lambda job: seen.append(job.id), concurrency=2,
                             wait=0.5, name=name, handle_signals=False)
    t = threading.Thread(target=worker.run)
    t.start()
    try:
        first = client.enqueue(queue, {})
        end = time.monotonic() + 10
        while first not in seen and time.monotonic() < end:
            time.sleep(0.05)
        killed = scalar(conn, "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                              "WHERE application_name = %s", (f"pg_claim worker {name}",))
        assert killed >= 1    # through a pooler: the server connections in use
        second = client.enqueue(queue, {})
        end = time.monotonic() + 20
        while second not in seen and time.monotonic() < end:
            time.sleep(0.05)
        assert seen == [first, second]
    finally:
        worker.stop()
        t.join(15)
    assert not t.is_alive()


def test_stop_not_blocked_by_long_transactional_statement(dsn: str,
                                                          conn: "psycopg.Connection[Any]",
                                                          client: pg_claim.Client,
                                                          queue: str) -> None:
    """A handler's statement outlasts the grace period while its heartbeat
    waits for the connection: the stop cancels the statement, the transaction
    rolls back and the item is released."""
    item = client.enqueue(queue, {})

    def handler(job: pg_claim.Job) -> None:
        assert job.conn is not None
        job.conn.execute(f"INSERT INTO {queue}_done VALUES (%s, 'tx', %s, %s)",
                         (job.id, job.token, job.attempt))
        job.conn.execute("SELECT pg_sleep(30)")

    worker = pg_claim.Worker(dsn, queue, handler, transactional=True, lease=6, grace=0.5,
                             wait=0.2, handle_signals=False)
    timer = threading.Timer(1.5, worker.stop)
    timer.start()
    t0 = time.monotonic()
    stats = worker.run()
    assert time.monotonic() - t0 < 8
    assert stats.released == 1 and stats.completed == 0
    assert scalar(conn, f"SELECT count(*) FROM {queue}_done") == 0
    rows = conn.execute("SELECT id FROM claim.claim_next(%s)", (queue,)).fetchall()
    assert rows == [(item,)]


def test_roles_worker_and_producer(dsn: str, conn: "psycopg.Connection[Any]", queue: str) -> None:
    """A role granted claim_worker runs a worker and one granted
    claim_producer enqueues, with no other grant; a role with neither gets
    PermissionDenied from the worker."""
    have = {r[0] for r in conn.execute(
        "SELECT rolname FROM pg_roles WHERE rolname IN ('claim_worker', 'claim_producer')")}
    if have != {"claim_worker", "claim_producer"}:
        pytest.skip("server has no claim_worker / claim_producer roles")
    suffix = uuid.uuid4().hex[:6]
    roles = {k: f"pgc_{k}_{suffix}" for k in ("worker", "producer", "nobody")}
    for kind, role in roles.items():
        conn.execute(f"CREATE ROLE {role} LOGIN")
        if kind != "nobody":
            conn.execute(f"GRANT claim_{kind} TO {role}")
    try:
        def dsn_as(role: str) -> str:
            return make_conninfo(dsn, user=role)

        try:
            psycopg.connect(dsn_as(roles["worker"])).close()
        except psycopg.OperationalError as exc:
            pytest.skip(f"cannot log in as a new role through this DSN ({exc})")
        with pg_claim.Client(dsn_as(roles["producer"])) as producer:
            ids = producer.enqueue_batch(queue, [{"n": i} for i in range(20)])
            producer.enqueue(queue, {"n": 20})
        seen: List[int] = []
        stats = pg_claim.Worker(dsn_as(roles["worker"]), queue, lambda job: seen.append(job.id),
                                concurrency=2, lease=2, wait=0.2, burst=True).run()
        assert stats.completed == 21 and set(ids) <= set(seen)
        with pytest.raises(pg_claim.PermissionDenied):
            pg_claim.Worker(dsn_as(roles["nobody"]), queue, lambda job: None, wait=0.2).run()
    finally:
        for role in roles.values():
            conn.execute(f"DROP ROLE {role}")


def test_stop_without_cancel_requests(dsn: str, client: pg_claim.Client, queue: str) -> None:
    """cancel_on_stop=False: no cancel request is sent; the waiting claims end
    by themselves within their wait, and work in flight completes."""
    item = client.enqueue(queue, {})
    seen: List[int] = []
    worker = pg_claim.Worker(dsn, queue, lambda job: seen.append(job.id), concurrency=3,
                             wait=1.5, cancel_on_stop=False, handle_signals=False)
    timer = threading.Timer(0.5, worker.stop)
    timer.start()
    t0 = time.monotonic()
    stats = worker.run()
    assert time.monotonic() - t0 < 8
    assert seen == [item] and stats.completed == 1
