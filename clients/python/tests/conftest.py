"""Fixtures: a server from PG_CLAIM_DSN (directly or through a pooler in
transaction mode), one fresh queue per test, worker processes."""
from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from typing import Any, Callable, Iterator, List, Optional

import psycopg
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import pg_claim  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture(scope="session")
def dsn() -> str:
    value = os.environ.get("PG_CLAIM_DSN")
    if not value:
        pytest.skip("PG_CLAIM_DSN is not set: no server to test against")
    return value


@pytest.fixture(scope="session")
def features(dsn: str) -> pg_claim.Features:
    with pg_claim.Client(dsn) as c:
        return c.features


def connect(dsn: str, autocommit: bool = True) -> "psycopg.Connection[Any]":
    return psycopg.connect(dsn, autocommit=autocommit, prepare_threshold=None)


@pytest.fixture
def conn(dsn: str) -> Iterator["psycopg.Connection[Any]"]:
    c = connect(dsn)
    yield c
    c.close()


@pytest.fixture
def client(dsn: str) -> Iterator[pg_claim.Client]:
    with pg_claim.Client(dsn) as c:
        yield c


@pytest.fixture
def queue(dsn: str) -> Iterator[str]:
    """A fresh queue (lease 30 s, max_attempts 5, backoff 1 s) and its
    ``<queue>_done`` table; both dropped afterwards."""
    name = "t_" + uuid.uuid4().hex[:10]
    with connect(dsn) as c:
        c.execute("SELECT claim.create_queue(%s, lease => '30 s', max_attempts => 5, "
                  "backoff => '1 s')", (name,))
        c.execute(f"CREATE TABLE {name}_done (id bigint PRIMARY KEY, worker text NOT NULL, "
                  f"token bigint NOT NULL, attempt int NOT NULL)")
    yield name
    with connect(dsn) as c:
        c.execute("SELECT claim.drop_queue(%s)", (name,))
        c.execute(f"DROP TABLE IF EXISTS {name}_done")


def spawn_worker(dsn: str, queue: str, name: str, *, concurrency: int = 8,
                 lease: Optional[float] = None, wait: float = 0.5, grace: float = 30.0,
                 sleep: float = 0.0, transactional: bool = False, burst: bool = False
                 ) -> "subprocess.Popen[str]":
    cmd: List[str] = [sys.executable, os.path.join(HERE, "worker_proc.py"), "--dsn", dsn,
                      "--queue", queue, "--name", name, "--concurrency", str(concurrency),
                      "--wait", str(wait), "--grace", str(grace), "--sleep", str(sleep)]
    if lease is not None:
        cmd += ["--lease", str(lease)]
    if transactional:
        cmd.append("--transactional")
    if burst:
        cmd.append("--burst")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.startswith("ready"), f"worker {name} did not start: {line}{proc.stdout.read()}"
    return proc


def wait_until(pred: Callable[[], bool], timeout: float, what: str) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def scalar(conn: "psycopg.Connection[Any]", query: str, params: Any = None) -> Any:
    row = conn.execute(query, params).fetchone()
    assert row is not None
    return row[0]
