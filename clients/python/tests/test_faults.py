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


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_transient_error_at_completion_is_retried(dsn: str, conn: "psycopg.Connection[Any]",
                                                  client: pg_claim.Client, queue: str,
                                                  mode: str) -> None:
    client.enqueue_batch(queue, [{}])
    runs: List[int] = []
    broken = [0]

    def handler(job: pg_claim.Job) -> Any:
        runs.append(job.id)
        return {"ok": 1}   # a result: completed on its own, not on the next claim

    if mode == "sync":
        worker: Any = pg_claim.Worker(dsn, queue, handler, wait=0.2, burst=True,
                                      handle_signals=False)
        real = worker._execute_complete

        def flaky(cur: Any, token: int, result: Any) -> None:
            if broken[0] < 2:
                broken[0] += 1
                raise psycopg.OperationalError("simulated: server closed the connection")
            real(cur, token, result)
        worker._execute_complete = flaky
        stats = worker.run()
    else:
        worker = pg_claim.AsyncWorker(dsn, queue, handler, wait=0.2, burst=True,
                                      handle_signals=False)
        areal = worker._execute_outcome

        async def aflaky(slot: Any, query: str, params: Any) -> None:
            if "complete" in query and broken[0] < 2:
                broken[0] += 1
                raise psycopg.OperationalError("simulated: server closed the connection")
            await areal(slot, query, params)
        worker._execute_outcome = aflaky
        stats = asyncio.run(worker.run())
    assert broken[0] == 2
    assert len(runs) == 1
    assert stats.completed == 1, stats
    assert _claimed(conn, queue) == 0


def test_worker_connections_send_keepalives(dsn: str) -> None:
    from pg_claim.worker import connect_kwargs_for
    kwargs = connect_kwargs_for(dsn, {}, False, "t")
    assert kwargs["keepalives"] == 1 and kwargs["keepalives_idle"] == 10
    with psycopg.connect(dsn, autocommit=True, **kwargs) as c:
        assert c.info.get_parameters().get("keepalives_idle", "10") == "10"


def test_work_leaves_no_child_running_after_stop(dsn: str, conn: "psycopg.Connection[Any]",
                                                 client: pg_claim.Client, queue: str,
                                                 tmp_path: Any) -> None:
    import os
    import signal
    import subprocess
    import sys
    from conftest import HERE
    client.enqueue_batch(queue, [{}])
    pidfile = tmp_path / "pid"
    e = dict(os.environ, PG_CLAIM_DSN=dsn)
    proc = subprocess.Popen([sys.executable, "-m", "pg_claim", "work", queue, "--wait", "0.5",
                             "--grace", "0.5", "--", f"echo $$ > {pidfile}; exec sleep 60"],
                            cwd=os.path.dirname(HERE), env=e,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        end = time.monotonic() + 20
        while time.monotonic() < end and not (pidfile.exists() and pidfile.read_text().strip()):
            time.sleep(0.05)
        child = int(pidfile.read_text())
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    time.sleep(0.2)
    try:
        os.kill(child, 0)
        alive = open(f"/proc/{child}/stat").read().split()[2] != "Z"
    except (ProcessLookupError, FileNotFoundError):
        alive = False
    assert not alive, f"the command (pid {child}) outlived pg_claim work"
    assert _claimed(conn, queue) == 0


def test_sync_signal_handler_takes_no_lock(dsn: str, queue: str) -> None:
    worker = pg_claim.Worker(dsn, queue, lambda job: None, wait=0.2, handle_signals=False)
    # The handler records; it neither sets the Event nor logs (both lock).
    worker._stop._cond.acquire()   # as if the signal came inside Event.wait/set
    try:
        done = threading.Event()
        t = threading.Thread(target=lambda: (worker._on_signal(15, None), done.set()))
        t.start()
        assert done.wait(2), "the signal handler blocked on the stop Event's lock"
    finally:
        worker._stop._cond.release()
    worker._take_signals()
    assert worker.stopping


@pytest.mark.parametrize("kind", ["threads", "asyncio"])
def test_heartbeat_survives_the_slot_connection_dying_mid_job(dsn: str,
                                                              conn: "psycopg.Connection[Any]",
                                                              client: pg_claim.Client,
                                                              queue: str, kind: str) -> None:
    if not scalar(conn, "SELECT count(*) FROM pg_catalog.pg_stat_activity WHERE pid = %s",
                  (conn.info.backend_pid,)):
        pytest.skip("behind a pooler: the slot's server backend cannot be told apart")
    client.enqueue_batch(queue, [{}])
    name = "hb-" + queue
    probe_claims = [0]
    worker: Any = None

    def handler(job: pg_claim.Job) -> Any:
        # Kill the slot's backend (the heartbeat's connection until now).
        conn.execute("SELECT pg_catalog.pg_terminate_backend(%s)",
                     (worker._slots[0].conn.info.backend_pid,))
        end = time.monotonic() + 3.0   # three leases
        while time.monotonic() < end:
            probe_claims[0] += len(conn.execute("SELECT id FROM claim.claim_next(%s)",
                                                (queue,)).fetchall())
            time.sleep(0.25)
        return {"ok": True}

    async def ahandler(job: pg_claim.Job) -> Any:
        conn.execute("SELECT pg_catalog.pg_terminate_backend(%s)",
                     (worker._slots[0].conn.info.backend_pid,))
        end = time.monotonic() + 3.0
        while time.monotonic() < end:
            probe_claims[0] += len(conn.execute("SELECT id FROM claim.claim_next(%s)",
                                                (queue,)).fetchall())
            await asyncio.sleep(0.25)
        return {"ok": True}

    if kind == "threads":
        worker = pg_claim.Worker(dsn, queue, handler, lease=1, wait=0.2, burst=True, name=name,
                                 handle_signals=False)
        stats = worker.run()
    else:
        worker = pg_claim.AsyncWorker(dsn, queue, ahandler, lease=1, wait=0.2, burst=True,
                                      name=name, handle_signals=False)
        stats = asyncio.run(worker.run())
    assert probe_claims[0] == 0, "another claimer got the item while its handler ran"
    assert stats.completed == 1, stats


def test_unknown_counts_stay_none(dsn: str) -> None:
    class FakeCursor:
        description = [type("D", (), {"name": n})() for n in
                       ("queue", "ready", "scheduled", "claimed", "dead", "oldest_ready_age")]

        def fetchall(self) -> list:
            return [("q", None, 2, None, 0, None)]

    with pg_claim.Client(dsn) as c:
        c._exec = lambda *a, **k: FakeCursor()   # type: ignore[method-assign]
        [s] = c.stats()
    assert (s.ready, s.scheduled, s.claimed, s.dead) == (None, 2, None, 0)


class _BlackholeProxy:
    """A TCP proxy to the server that can stop forwarding without closing
    anything (a half-open connection, seen from the worker)."""

    def __init__(self, host: str, port: int) -> None:
        import socket as _socket
        self.target = (host, port)
        self.blackhole = False
        self.sockets: List[Any] = []
        self.server = _socket.socket()
        self.server.bind(("127.0.0.1", 0))
        self.server.listen(64)
        self.port = self.server.getsockname()[1]
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        import socket as _socket
        while not self._closed:
            try:
                inbound, _ = self.server.accept()
            except OSError:
                return
            self.sockets.append(inbound)
            if self.blackhole:
                continue   # accepted, never answered
            outbound = _socket.create_connection(self.target)
            self.sockets.append(outbound)
            for a, b in ((inbound, outbound), (outbound, inbound)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    def _pipe(self, a: Any, b: Any) -> None:
        while True:
            try:
                data = a.recv(65536)
            except OSError:
                return
            if not data:
                if not self.blackhole:
                    b.close()
                return
            if not self.blackhole:
                try:
                    b.sendall(data)
                except OSError:
                    return

    def close(self) -> None:
        import socket as _socket
        self._closed = True
        # shutdown() first: it wakes the threads blocked in accept() and
        # recv() (close() alone does not), so none outlives the test.
        for s in [self.server, *self.sockets]:
            try:
                s.shutdown(_socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()


@pytest.mark.parametrize("kind", ["threads", "asyncio"])
def test_connection_that_stops_answering_does_not_hang_the_worker(dsn: str, conn: "psycopg.Connection[Any]",
                                                                 client: pg_claim.Client, queue: str,
                                                                 kind: str) -> None:
    """Issue 43 item 5: the worker's connections stop answering without
    closing while its claim waits in the server and a completion is due.
    Every statement of the worker's own has a deadline (call_timeout; a
    claim: its wait and call_timeout), cancel requests are sent from threads
    of their own, and a claim that its cancel does not end is shut down: run()
    returns within about grace + 2 × call_timeout."""
    from psycopg.conninfo import conninfo_to_dict, make_conninfo
    params = conninfo_to_dict(dsn)
    params["host"], params["port"] = conn.execute(
        "SELECT host(inet_server_addr()), inet_server_port()").fetchone()
    proxy = _BlackholeProxy(params["host"], int(params["port"]))
    proxied = make_conninfo(**{**params, "host": "127.0.0.1", "port": str(proxy.port)})
    client.enqueue_batch(queue, [{}])
    started = threading.Event()
    grace, call_timeout = 1.0, 1.0

    def handler(job: pg_claim.Job) -> None:
        proxy.blackhole = True   # from now on nothing reaches the server, nothing comes back
        started.set()
        time.sleep(0.1)

    async def ahandler(job: pg_claim.Job) -> None:
        handler(job)

    try:
        if kind == "threads":
            worker: Any = pg_claim.Worker(proxied, queue, handler, wait="10 s", grace=grace,
                                          call_timeout=call_timeout, handle_signals=False)
            done = threading.Event()
            threading.Thread(target=lambda: (worker.run(), done.set()), daemon=True).start()
            assert started.wait(20)
            time.sleep(0.7)   # the claim now waits on a connection that no longer answers
            t0 = time.monotonic()
            worker.stop()
            assert done.wait(20), "run() hung"
            took = time.monotonic() - t0
        else:
            async def main() -> float:
                worker = pg_claim.AsyncWorker(proxied, queue, ahandler, wait="10 s", grace=grace,
                                              call_timeout=call_timeout, handle_signals=False)
                task = asyncio.ensure_future(worker.run())
                while not started.is_set():
                    await asyncio.sleep(0.05)
                await asyncio.sleep(0.7)
                t0 = time.monotonic()
                worker.stop()
                await asyncio.wait_for(task, 20)
                return time.monotonic() - t0
            took = asyncio.run(main())
        # The bound is grace + 2 × call_timeout here; 3 s more for a loaded machine.
        assert took < grace + 2 * call_timeout + 3, took
    finally:
        proxy.close()
