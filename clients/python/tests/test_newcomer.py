"""What a new user meets: error classes that say what happened, workers that
stop at once on what can never work, one readable log line per failure, a
default worker name, and the connection from PG_CLAIM_DSN or libpq's PG*
variables."""
from __future__ import annotations

import asyncio
import logging
import os
import socket
import subprocess
import sys
import time
import uuid
from typing import Any, Dict, Iterator, List

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo
import pytest

import pg_claim
from pg_claim.errors import classify, is_fatal
from conftest import HERE, connect, scalar

ROOT = os.path.dirname(HERE)


@pytest.fixture
def noext_dsn(dsn: str) -> Iterator[str]:
    """A database without pg_claim (skipped where the DSN cannot reach one,
    e.g. through PgBouncer, which serves one database)."""
    name = "pgc_noext_" + uuid.uuid4().hex[:8]
    with connect(dsn) as c:
        try:
            c.execute(f"CREATE DATABASE {name}")
        except psycopg.Error as exc:
            pytest.skip(f"cannot create a database here ({exc.diag.message_primary})")
    other = make_conninfo(dsn, dbname=name)
    try:
        try:
            psycopg.connect(other).close()
        except psycopg.OperationalError as exc:
            pytest.skip(f"cannot reach a second database through this DSN ({exc})")
        yield other
    finally:
        with connect(dsn) as c:
            c.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


# -- error classes ---------------------------------------------------------------

def test_error_classes_say_what_happened(client: pg_claim.Client, queue: str) -> None:
    with pytest.raises(pg_claim.InvalidArgument) as ei:
        client.create_queue("q_" + uuid.uuid4().hex[:6], lease="soon")
    assert ei.value.sqlstate == "22007"
    with pytest.raises(pg_claim.InvalidArgument) as ei2:
        client.create_queue("q_" + uuid.uuid4().hex[:6], retian="1 day")
    assert "retian" in str(ei2.value) and "retain" in (ei2.value.hint or "")
    with pytest.raises(pg_claim.UnknownQueue):
        client.stats("no_such_queue_" + uuid.uuid4().hex[:6])
    assert [s.queue for s in client.stats(queue)] == [queue]
    # The classes of the table in the README.
    for sqlstate, cls in (("08006", pg_claim.Transient), ("40001", pg_claim.Transient),
                          ("57P01", pg_claim.Transient), ("53300", pg_claim.Transient),
                          ("22007", pg_claim.InvalidArgument), ("3F000", pg_claim.NotInstalled),
                          ("42704", pg_claim.UnknownQueue), ("XX000", pg_claim.PgClaimError)):
        assert pg_claim.error_class(sqlstate) is cls, sqlstate
    assert classify(psycopg.OperationalError("connection lost")) is pg_claim.Transient
    assert not is_fatal(psycopg.OperationalError("connection lost"))


def test_bad_connection_settings_fail_fast(dsn: str, queue: str) -> None:
    """A connection string libpq cannot parse, an unknown database, an unknown
    role: BadConnection, at once, from every entry point (the workers do not
    retry it); a server that is not there stays Transient."""
    params = conninfo_to_dict(dsn)
    with connect(dsn) as c:   # the server itself, also when PG_CLAIM_DSN is a pooler's
        params["host"], params["port"] = c.execute(
            "SELECT host(inet_server_addr()), inet_server_port()").fetchone()
    bad = {
        "syntax": "host=127.0.0.1 dbname",
        "option": dsn + ("&" if "?" in dsn else "?") + "bogus_option=1",
        "database": make_conninfo(**{**params, "dbname": "no_such_db_" + uuid.uuid4().hex[:6]}),
        "role": make_conninfo(**{**params, "user": "no_such_role_" + uuid.uuid4().hex[:6]}),
    }
    for what, bad_dsn in bad.items():
        with pytest.raises(pg_claim.BadConnection):
            pg_claim.Client(bad_dsn)
        assert is_fatal(pg_claim.BadConnection("x")), what
        for cls in (pg_claim.Worker, pg_claim.AsyncWorker):
            w = cls(bad_dsn, queue, lambda job: None, wait=0.2, handle_signals=False)
            t0 = time.monotonic()
            with pytest.raises(pg_claim.BadConnection) as ei:
                if cls is pg_claim.Worker:
                    w.run()
                else:
                    asyncio.run(w.run())
            assert time.monotonic() - t0 < 10, (what, cls)
            assert not isinstance(ei.value, pg_claim.Transient)
    for sqlstate in ("3D000", "28000", "28P01"):
        assert pg_claim.error_class(sqlstate) is pg_claim.BadConnection
    with pytest.raises(pg_claim.Transient):
        pg_claim.Client("postgresql://nobody@127.0.0.1:1/none?connect_timeout=3")


def test_not_installed(noext_dsn: str) -> None:
    with pg_claim.Client(noext_dsn) as c:
        with pytest.raises(pg_claim.NotInstalled):
            c.stats()
        with pytest.raises(pg_claim.NotInstalled):
            c.enqueue("q", {})
    t0 = time.monotonic()
    with pytest.raises(pg_claim.NotInstalled):
        pg_claim.Worker(noext_dsn, "q", lambda job: None, wait=0.2, handle_signals=False).run()
    with pytest.raises(pg_claim.NotInstalled):
        asyncio.run(pg_claim.AsyncWorker(noext_dsn, "q", lambda job: None, wait=0.2,
                                         handle_signals=False).run())
    assert time.monotonic() - t0 < 10


# -- workers fail fast -------------------------------------------------------------

@pytest.mark.parametrize("options,cls", [
    ({"wait": "soon"}, pg_claim.InvalidArgument),
    ({"wait": 7200}, pg_claim.InvalidArgument),
    ({"lease": 0}, pg_claim.InvalidArgument),
    ({"lease": "8 days"}, pg_claim.InvalidArgument),
])
def test_worker_stops_at_once_on_bad_options(dsn: str, queue: str, options: Dict[str, Any],
                                             cls: type, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="pg_claim")
    t0 = time.monotonic()
    with pytest.raises(cls):
        pg_claim.Worker(dsn, queue, lambda job: None, concurrency=3, handle_signals=False,
                        **options).run()
    with pytest.raises(cls):
        asyncio.run(pg_claim.AsyncWorker(dsn, queue, lambda job: None, concurrency=3,
                                         handle_signals=False, **options).run())
    assert time.monotonic() - t0 < 10
    # One line per worker that says why it stopped; no tracebacks.
    errors = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(errors) == 2 and all("stopping" in r.getMessage() for r in errors)
    assert not any(r.exc_info for r in caplog.records)


def test_worker_stops_when_its_queue_is_dropped(dsn: str, client: pg_claim.Client) -> None:
    name = "t_drop_" + uuid.uuid4().hex[:6]
    client.create_queue(name)
    worker = pg_claim.Worker(dsn, name, lambda job: None, concurrency=2, wait=0.3,
                             handle_signals=False)
    import threading
    out: List[BaseException] = []

    def run() -> None:
        try:
            worker.run()
        except BaseException as exc:  # noqa: BLE001
            out.append(exc)

    t = threading.Thread(target=run)
    t.start()
    time.sleep(0.5)
    client.drop_queue(name)
    t.join(15)
    assert not t.is_alive() and len(out) == 1 and isinstance(out[0], pg_claim.UnknownQueue)


def test_worker_backs_off_on_transient_errors(dsn: str, conn: "psycopg.Connection[Any]",
                                             client: pg_claim.Client, queue: str,
                                             caplog: pytest.LogCaptureFixture) -> None:
    """A server connection killed under a waiting claim (57P01 admin
    shutdown, then a lost connection) is retried: the worker goes on."""
    caplog.set_level(logging.WARNING, logger="pg_claim")
    name = "transient_" + uuid.uuid4().hex[:6]
    seen: List[int] = []
    worker = pg_claim.Worker(dsn, queue, lambda job: seen.append(job.id), wait=1.0, name=name,
                             handle_signals=False)
    import threading
    t = threading.Thread(target=worker.run)
    t.start()
    try:
        time.sleep(0.5)
        scalar(conn, "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                     "WHERE application_name = %s", (f"pg_claim worker {name}",))
        item = client.enqueue(queue, {})
        end = time.monotonic() + 20
        while item not in seen and time.monotonic() < end:
            time.sleep(0.05)
        assert seen == [item]
    finally:
        worker.stop()
        t.join(15)
    assert not t.is_alive()
    assert not any(r.levelno >= logging.ERROR for r in caplog.records)


# -- logging and the worker's name -------------------------------------------------

def test_handler_failure_is_one_warning_line(dsn: str, client: pg_claim.Client, queue: str,
                                             caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="pg_claim")
    item = client.enqueue(queue, {})

    def handler(job: pg_claim.Job) -> None:
        raise KeyError("no such customer")

    pg_claim.Worker(dsn, queue, handler, wait=0.2, max_jobs=1, handle_signals=False).run()
    lines = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(lines) == 1, [r.getMessage() for r in lines]
    msg = lines[0].getMessage()
    assert lines[0].levelno == logging.WARNING and lines[0].exc_info is None
    assert f"job {item} attempt 1 failed: KeyError: 'no such customer'" in msg
    assert "\n" not in msg


def test_handler_failure_visible_under_default_logging(dsn: str, queue: str,
                                                       client: pg_claim.Client) -> None:
    """No logging set up by the program: the WARNING still reaches stderr."""
    item = client.enqueue(queue, {})
    code = ("import sys, pg_claim\n"
            "def h(job):\n"
            "    raise ValueError('bad payload')\n"
            "pg_claim.Worker(sys.argv[1], sys.argv[2], h, wait=0.2, max_jobs=1).run()\n")
    proc = subprocess.run([sys.executable, "-c", code, dsn, queue], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and f"job {item} attempt 1 failed: ValueError: bad payload" in lines[0]


def test_stale_token_is_one_line(dsn: str, client: pg_claim.Client, queue: str,
                                 caplog: pytest.LogCaptureFixture) -> None:
    """The item is cancelled while its handler runs: the heartbeat finds the
    token stale; one WARNING line, the outcome dropped."""
    caplog.set_level(logging.INFO, logger="pg_claim")

    def handler(job: pg_claim.Job) -> None:
        with connect(dsn) as other:
            pg_claim.Client(other).cancel(job.queue, [job.id])
        time.sleep(1.5)

    async def ahandler(job: pg_claim.Job) -> None:
        with connect(dsn) as other:
            pg_claim.Client(other).cancel(job.queue, [job.id])
        await asyncio.sleep(1.5)

    for kind in ("thread", "asyncio"):
        caplog.clear()
        item = client.enqueue(queue, {})
        if kind == "thread":
            stats = pg_claim.Worker(dsn, queue, handler, lease=1, wait=0.2, max_jobs=1,
                                    handle_signals=False).run()
        else:
            stats = asyncio.run(pg_claim.AsyncWorker(dsn, queue, ahandler, lease=1, wait=0.2,
                                                     max_jobs=1, handle_signals=False).run())
        assert stats.stale == 1 and stats.completed == 0, (kind, stats)
        lines = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
        assert len(lines) == 1 and f"job {item} attempt 1" in lines[0], (kind, lines)


def test_default_worker_name_is_host_and_pid(dsn: str, conn: "psycopg.Connection[Any]",
                                             client: pg_claim.Client, queue: str) -> None:
    client.enqueue(queue, {})
    names: List[str] = []

    def handler(job: pg_claim.Job) -> None:
        names.append(scalar(conn, "SELECT worker FROM claim.claimed_items WHERE id = %s",
                            (job.id,)))

    pg_claim.Worker(dsn, queue, handler, wait=0.2, max_jobs=1, handle_signals=False).run()
    assert names == [f"{socket.gethostname()}:{os.getpid()}"]


# -- one connection setting ----------------------------------------------------------

def test_connection_from_environment(dsn: str, queue: str,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PG_CLAIM_DSN", dsn)
    with pg_claim.Client() as c:
        assert [s.queue for s in c.stats(queue)] == [queue]
    # No DSN: libpq's own PG* variables.
    monkeypatch.delenv("PG_CLAIM_DSN")
    parts = conninfo_to_dict(dsn)
    for key, var in (("host", "PGHOST"), ("port", "PGPORT"), ("dbname", "PGDATABASE"),
                     ("user", "PGUSER"), ("password", "PGPASSWORD")):
        if parts.get(key):
            monkeypatch.setenv(var, str(parts[key]))
        else:
            monkeypatch.delenv(var, raising=False)
    with pg_claim.Client() as c:
        item = c.enqueue(queue, {})
    stats = pg_claim.Worker(None, queue, lambda job: None, wait=0.2, max_jobs=1,
                            handle_signals=False).run()
    assert stats.completed == 1 and item > 0
