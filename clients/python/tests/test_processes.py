"""Worker processes against a real server: exactly once, SIGKILL, SIGTERM."""
from __future__ import annotations

import signal
import subprocess
import time
from typing import Any

import psycopg
import pytest

import pg_claim
from conftest import scalar, spawn_worker, wait_until


def queue_left(conn: "psycopg.Connection[Any]", queue: str) -> int:
    return scalar(conn, "SELECT ready + scheduled + claimed + dead FROM claim.queue_stats "
                        "WHERE queue = %s", (queue,))


def sigterm(proc: "subprocess.Popen[str]", grace: float, slack: float) -> str:
    """SIGTERM to a worker process: it exits 0 within ``grace`` + ``slack``
    seconds. Its output."""
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=grace + 10)
    elapsed = time.monotonic() - t0
    assert proc.returncode == 0, out
    assert elapsed < grace + slack, f"took {elapsed:.1f} s to stop, grace {grace} s\n{out}"
    return out


def test_10k_jobs_two_processes_exactly_once(dsn: str, conn: "psycopg.Connection[Any]",
                                             client: pg_claim.Client, queue: str) -> None:
    ids = client.enqueue_batch(queue, [{"n": i} for i in range(10_000)])
    assert len(set(ids)) == 10_000
    procs = [spawn_worker(dsn, queue, f"w{i}", concurrency=8, wait=1.0, burst=True)
             for i in range(2)]
    outputs = []
    for p in procs:
        out, _ = p.communicate(timeout=90)
        outputs.append(out)
        assert p.returncode == 0, out
    done = conn.execute(f"SELECT count(*), count(DISTINCT id), max(attempt), "
                        f"count(DISTINCT worker) FROM {queue}_done").fetchone()
    # The primary key rejects a second record; every item is recorded once,
    # delivered once, and both processes took part.
    assert done == (10_000, 10_000, 1, 2), outputs
    assert scalar(conn, f"SELECT count(*) FROM {queue}_done WHERE id <> ALL(%s)", (ids,)) == 0
    assert queue_left(conn, queue) == 0


def test_sigkill_jobs_redelivered_after_lease(dsn: str, conn: "psycopg.Connection[Any]",
                                              client: pg_claim.Client, queue: str) -> None:
    total = 300
    client.enqueue_batch(queue, [{"n": i} for i in range(total)])
    victim = spawn_worker(dsn, queue, "victim", concurrency=4, lease=2.0, sleep=0.05,
                          transactional=True)
    survivor = spawn_worker(dsn, queue, "survivor", concurrency=4, lease=2.0, sleep=0.05,
                            transactional=True)
    try:
        wait_until(lambda: scalar(conn, f"SELECT count(*) FROM {queue}_done WHERE worker = "
                                        f"'victim'") >= 20, 30, "the victim to do some jobs")
        held = []
        # Kill it while it holds claims.
        for _ in range(100):
            held = [r[0] for r in conn.execute(
                "SELECT id FROM claim.claimed_items WHERE queue = %s AND worker = 'victim' "
                "AND live", (queue,)).fetchall()]
            if held:
                break
            time.sleep(0.01)
        victim.send_signal(signal.SIGKILL)
        victim.wait(10)
        wait_until(lambda: scalar(conn, f"SELECT count(*) FROM {queue}_done") == total, 60,
                   "every item to be recorded")
        assert queue_left(conn, queue) == 0
        assert held, "the victim held no claim when it was killed"
        rows = dict(conn.execute(f"SELECT id, attempt FROM {queue}_done WHERE id = ANY(%s)",
                                 (held,)).fetchall())
        # What the victim held at the kill was either finished by it just in
        # time or delivered again (attempt 2) once the lease ran out.
        assert set(rows) == set(held)
        assert scalar(conn, f"SELECT count(*) FROM {queue}_done WHERE attempt > 1") >= 1
    finally:
        survivor.send_signal(signal.SIGTERM)
        out, _ = survivor.communicate(timeout=30)
        if victim.poll() is None:
            victim.kill()
    assert survivor.returncode == 0, out
    assert scalar(conn, f"SELECT count(DISTINCT id) FROM {queue}_done") == total


def test_sigterm_finishes_in_flight_within_grace(dsn: str, conn: "psycopg.Connection[Any]",
                                                 client: pg_claim.Client, queue: str) -> None:
    total = 200
    client.enqueue_batch(queue, [{"n": i} for i in range(total)])
    grace = 5.0
    proc = spawn_worker(dsn, queue, "term", concurrency=4, sleep=0.3, grace=grace,
                        transactional=True)
    wait_until(lambda: scalar(conn, f"SELECT count(*) FROM {queue}_done") >= 12, 30,
               "some jobs done")
    out = sigterm(proc, grace, 2.0)
    # Nothing still claimed, nothing lost: done + still queued = all, and no
    # attempt was used up by the stop (handlers in flight finished).
    assert scalar(conn, "SELECT count(*) FROM claim.claimed_items WHERE queue = %s",
                  (queue,)) == 0
    done = scalar(conn, f"SELECT count(*) FROM {queue}_done")
    assert 0 < done < total
    assert done + queue_left(conn, queue) == total
    assert "released=0" in out, out
    # A second worker takes the rest: each item recorded exactly once.
    rest = spawn_worker(dsn, queue, "rest", concurrency=4, wait=0.5, burst=True,
                        transactional=True)
    out, _ = rest.communicate(timeout=60)
    assert rest.returncode == 0, out
    assert scalar(conn, f"SELECT count(DISTINCT id) FROM {queue}_done") == total
    assert scalar(conn, f"SELECT max(attempt) FROM {queue}_done") == 1
    assert queue_left(conn, queue) == 0


@pytest.mark.parametrize("transactional", [False, True], ids=["plain", "transactional"])
def test_sigterm_releases_what_outlives_grace(dsn: str, conn: "psycopg.Connection[Any]",
                                              client: pg_claim.Client, queue: str,
                                              transactional: bool) -> None:
    """Handlers that never return: after the grace period the items are
    released (in transactional mode, once the handler's transaction is rolled
    back), ready again long before their 60 s lease would end."""
    ids = client.enqueue_batch(queue, [{"n": i} for i in range(2)])
    grace = 1.0
    proc = spawn_worker(dsn, queue, "slow", concurrency=2, sleep=60, grace=grace, lease=60,
                        transactional=transactional)
    wait_until(lambda: scalar(conn, "SELECT count(*) FROM claim.claimed_items WHERE queue = %s "
                                    "AND live", (queue,)) == 2, 20, "both items claimed")
    out = sigterm(proc, grace, 4.0)
    assert "released=2" in out, out
    # Released, not expired: ready again at once, and a release does not use
    # up an attempt.
    assert scalar(conn, "SELECT count(*) FROM claim.claimed_items WHERE queue = %s AND live",
                  (queue,)) == 0
    rows = conn.execute("SELECT id, attempt FROM claim.claim_next(%s, 2)", (queue,)).fetchall()
    assert sorted(r[0] for r in rows) == sorted(ids)
    assert [r[1] for r in rows] == [1, 1]
