"""The pg_claim command line: each command, --help, and the exit status per
error class. Runs ``python3 -m pg_claim`` from the source tree (test/clients.sh
also runs the ``pg_claim`` script that pip installs)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from typing import Any, Dict, Optional

import psycopg
import pytest

from conftest import HERE, connect, scalar

ROOT = os.path.dirname(HERE)
COMMANDS = ("stats", "enqueue", "dead", "redrive", "cancel", "pause", "resume", "work", "coord")


def cli(dsn: Optional[str], *args: str, stdin: Optional[str] = None, timeout: float = 60,
        env: Optional[Dict[str, str]] = None) -> "subprocess.CompletedProcess[str]":
    e = dict(os.environ)
    e.pop("PG_CLAIM_DSN", None)
    if dsn is not None:
        e["PG_CLAIM_DSN"] = dsn
    e.update(env or {})
    return subprocess.run([sys.executable, "-m", "pg_claim", *args], cwd=ROOT, env=e,
                          input=stdin, capture_output=True, text=True, timeout=timeout)


def test_help_of_each_command() -> None:
    top = cli(None, "--help")
    assert top.returncode == 0
    for name in COMMANDS:
        assert name in top.stdout
        sub = cli(None, name, "--help")
        assert sub.returncode == 0 and f"usage: pg_claim {name}" in sub.stdout, sub.stdout
        assert "exit status" in sub.stdout and "PG_CLAIM_DSN" in sub.stdout
    assert cli(None, "no_such_command").returncode == 2
    assert cli(None, "cancel", "q").returncode == 2          # ids missing


def test_enqueue_stats_dead_redrive_cancel_pause(dsn: str, conn: "psycopg.Connection[Any]",
                                                 queue: str) -> None:
    r = cli(dsn, "enqueue", queue, '{"n": 1}', "--priority", "5")
    assert r.returncode == 0, r.stderr
    first = int(r.stdout)
    r = cli(dsn, "enqueue", queue, "-", stdin='{"n": 2}')
    assert r.returncode == 0, r.stderr
    second = int(r.stdout)
    assert scalar(conn, "SELECT payload FROM claim.items WHERE id = %s", (second,)) == {"n": 2}

    r = cli(dsn, "stats", queue, "--json")
    assert r.returncode == 0, r.stderr
    row = json.loads(r.stdout)[0]
    assert row["queue"] == queue and row["ready"] == 2
    r = cli(dsn, "stats")
    assert r.returncode == 0 and queue in r.stdout and "ready" in r.stdout.splitlines()[0]
    r = cli(dsn, "stats", queue, "--watch", "--interval", "0.1", "--count", "3")
    assert r.returncode == 0 and r.stdout.count(queue) == 3

    # A dead item: claim it and fail it past max_attempts.
    conn.execute("SELECT claim.alter_queue(%s, max_attempts => 1)", (queue,))
    tok = scalar(conn, "SELECT token FROM claim.claim_next(%s) WHERE id = %s", (queue, first))
    if tok is None:   # priority 5 comes first; be robust anyway
        pytest.fail("the first item was not claimed first")
    conn.execute("SELECT claim.fail(%s::bigint, 'it broke')", (tok,))
    r = cli(dsn, "dead", queue, "--json")
    assert r.returncode == 0, r.stderr
    dead = json.loads(r.stdout)
    assert [d["id"] for d in dead] == [first] and dead[0]["last_error"] == "it broke"
    r = cli(dsn, "dead", queue)
    assert r.returncode == 0 and "it broke" in r.stdout
    r = cli(dsn, "redrive", queue, str(first))
    assert (r.returncode, r.stdout.strip()) == (0, "1")

    assert cli(dsn, "pause", queue).returncode == 0
    assert json.loads(cli(dsn, "stats", queue, "--json").stdout)[0]["paused"] is True
    assert cli(dsn, "resume", queue).returncode == 0
    assert json.loads(cli(dsn, "stats", queue, "--json").stdout)[0]["paused"] is False

    r = cli(dsn, "cancel", queue, str(first), str(second))
    assert (r.returncode, r.stdout.strip()) == (0, "2")


def test_exit_status_per_error_class(dsn: str, queue: str) -> None:
    missing = "no_such_queue_" + uuid.uuid4().hex[:6]
    for args in (("stats", missing), ("enqueue", missing), ("dead", missing),
                 ("pause", missing), ("work", missing, "--", "true")):
        r = cli(dsn, *args)
        assert r.returncode == 3 and "UnknownQueue" in r.stderr, (args, r.stderr)
    r = cli(dsn, "enqueue", queue, "{not json")
    assert r.returncode == 4 and "not JSON" in r.stderr
    r = cli(dsn, "enqueue", queue, "{}", "--priority", "-2147483648")
    assert r.returncode == 4 and "InvalidArgument" in r.stderr
    t0 = time.monotonic()
    r = cli(dsn, "work", queue, "--wait", "7200", "--", "true")
    assert r.returncode == 4 and "InvalidArgument" in r.stderr
    assert time.monotonic() - t0 < 20
    # No server at all: Transient.
    r = cli("postgresql://nobody@127.0.0.1:1/none?connect_timeout=3", "stats")
    assert r.returncode == 8 and "Transient" in r.stderr
    # A role without rights: PermissionDenied.
    role = "pgc_cli_" + uuid.uuid4().hex[:6]
    with connect(dsn) as c:
        c.execute(f"CREATE ROLE {role} LOGIN")
    try:
        as_role = psycopg.conninfo.make_conninfo(dsn, user=role)
        try:
            psycopg.connect(as_role).close()
        except psycopg.OperationalError:
            pytest.skip("cannot log in as a new role through this DSN")
        r = cli(as_role, "redrive", queue)
        assert r.returncode == 5 and "PermissionDenied" in r.stderr, r.stderr
    finally:
        with connect(dsn) as c:
            c.execute(f"DROP ROLE {role}")


def test_connection_from_pg_variables(dsn: str, queue: str) -> None:
    parts = psycopg.conninfo.conninfo_to_dict(dsn)
    env = {var: str(parts[key]) for key, var in (("host", "PGHOST"), ("port", "PGPORT"),
                                                 ("dbname", "PGDATABASE"), ("user", "PGUSER"),
                                                 ("password", "PGPASSWORD")) if parts.get(key)}
    r = cli(None, "stats", queue, "--json", env=env)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)[0]["queue"] == queue


def test_work_runs_a_command_per_job(dsn: str, conn: "psycopg.Connection[Any]",
                                     queue: str) -> None:
    conn.execute("SELECT claim.alter_queue(%s, max_attempts => 1, retain => '1 hour')", (queue,))
    ok = int(cli(dsn, "enqueue", queue, '{"n": 3}').stdout)
    bad = int(cli(dsn, "enqueue", queue, '{"fail": true}').stdout)
    script = ('read p; case "$p" in *fail*) echo "no luck for $PG_CLAIM_ITEM_ID" >&2; exit 3;; '
              'esac; echo "{\\"in\\": $p, \\"attempt\\": $PG_CLAIM_ATTEMPT}"')
    r = cli(dsn, "work", queue, "--burst", "--wait", "0.3", "--concurrency", "2", "--", script)
    assert r.returncode == 0, r.stderr
    rows = dict(conn.execute("SELECT state, result FROM claim.item_state(%s, %s::bigint)",
                             (queue, ok)).fetchall())
    assert rows == {"completed": {"in": {"n": 3}, "attempt": 1}}
    err = scalar(conn, "SELECT last_error FROM claim.dead_items WHERE queue = %s AND id = %s",
                 (queue, bad))
    assert err == f"the command exited with status 3: no luck for {bad}"
    warn = [ln for ln in r.stderr.splitlines() if "WARNING" in ln]
    assert len(warn) == 1 and f"job {bad} attempt 1 failed" in warn[0]
    # Several words run as they are, without a shell.
    item = int(cli(dsn, "enqueue", queue, '{"x": 1}').stdout)
    r = cli(dsn, "work", queue, "--max-jobs", "1", "--wait", "0.3", "--", sys.executable, "-c",
            "import sys, json; print(json.dumps(json.load(sys.stdin)['x'] + 1))")
    assert r.returncode == 0, r.stderr
    assert scalar(conn, "SELECT result FROM claim.item_state(%s, %s::bigint)", (queue, item)) == 2


def test_work_burst_returns_when_drained(dsn: str, conn: "psycopg.Connection[Any]",
                                         queue: str) -> None:
    # --burst without --wait does not wait in the server: it returns as soon
    # as a claim finds the queue drained (it used to wait out --wait, 10 s).
    cli(dsn, "enqueue", queue, "{}")
    r = cli(dsn, "work", queue, "--burst", "--concurrency", "2", "--", "true", timeout=8)
    assert r.returncode == 0, r.stderr
    assert scalar(conn, "SELECT ready + claimed FROM claim.queue_stats WHERE queue = %s",
                  (queue,)) == 0


def test_enqueue_wait_in_a_queue_without_retain(dsn: str, conn: "psycopg.Connection[Any]",
                                                queue: str) -> None:
    # The job finishes while enqueue --wait waits; the queue keeps no history,
    # so the state is gone: the command says so instead of a bare null.
    import threading

    def finish() -> None:
        with connect(dsn) as c:
            row = c.execute("SELECT token FROM claim.claim_next(%s, wait => '10 s')",
                            (queue,)).fetchone()
            c.execute("SELECT claim.complete(%s)", (row[0],))

    t = threading.Thread(target=finish)
    t.start()
    r = cli(dsn, "enqueue", queue, "{}", "--wait", "10")
    t.join()
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["state"] is None and out["retained"] is False
    assert "does not retain finished items" in r.stderr and "retain =>" in r.stderr


def test_connection_target_is_printed() -> None:
    # A failed connection names where it tried and where the string came
    # from; never the password.
    r = cli("host=/nonexistent-dir port=1 dbname=app user=u password=s3cret", "stats")
    assert r.returncode == 8, r.stderr
    assert "tried host=/nonexistent-dir port=1 dbname=app user=u (from $PG_CLAIM_DSN)" in r.stderr
    r = cli(None, "--dsn", "host=/nonexistent-dir port=1 base password=s3cret", "stats")
    assert "(from --dsn)" in r.stderr and "password=***" in r.stderr
    r = cli(None, "stats", env={"PGHOST": "/nonexistent-dir", "PGPORT": "2", "PGUSER": "u"})
    assert "tried host=/nonexistent-dir port=2 dbname=u user=u (from libpq's PG* variables)" \
        in r.stderr
    assert all("s3cret" not in x for x in (r.stderr, r.stdout))


def test_work_stops_on_sigterm(dsn: str, conn: "psycopg.Connection[Any]", queue: str) -> None:
    item = int(cli(dsn, "enqueue", queue, "{}").stdout)
    e = dict(os.environ, PG_CLAIM_DSN=dsn)
    proc = subprocess.Popen([sys.executable, "-m", "pg_claim", "work", queue, "--wait", "1",
                             "--", "sleep 1; echo done"], cwd=ROOT, env=e,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        end = time.monotonic() + 20
        while time.monotonic() < end and not scalar(
                conn, "SELECT count(*) FROM claim.claimed_items WHERE queue = %s", (queue,)):
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    # The running command finished within the grace period: completed.
    assert scalar(conn, "SELECT count(*) FROM claim.items WHERE id = %s", (item,)) == 0


def test_coord_shows_sessions_leaders_and_watchers(dsn: str, conn: "psycopg.Connection[Any]") -> None:
    name = "cli_" + uuid.uuid4().hex[:8]
    session = scalar(conn, "SELECT claim.session_open('30 s', %s)", (name + "-holder",))
    epoch = scalar(conn, "SELECT claim.elect(%s, session => %s, holder => %s)",
                   (name, session, name + "-holder"))
    watcher = psycopg.connect(dsn, autocommit=True, prepare_threshold=None, application_name=name)
    try:
        # a backend waiting in claim.watch, sent without waiting for it
        watcher.pgconn.send_query(
            f"SELECT * FROM claim.watch('{name}-none', claim.revision(), wait => '8 s')".encode())
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            r = cli(dsn, "coord", "--json")
            assert r.returncode == 0, r.stderr
            shown = json.loads(r.stdout)
            if any(w["application"] == name for w in shown["watchers"]):
                break
            time.sleep(0.1)
        assert any(w["application"] == name for w in shown["watchers"]), shown
        assert {"session": session, "holder": name + "-holder"}.items() <= next(
            x for x in shown["sessions"] if x["session"] == session).items()
        assert next(x for x in shown["sessions"] if x["session"] == session)["leads"] == [name]
        leader = next(x for x in shown["leaders"] if x["name"] == name)
        assert leader["epoch"] == epoch and leader["holder"] == name + "-holder"
        r = cli(dsn, "coord")
        assert r.returncode == 0, r.stderr
        assert r.stdout.startswith("sessions") and name in r.stdout and "watchers" in r.stdout
    finally:
        watcher.close()   # the server ends the wait when its client is gone
        conn.execute("SELECT claim.session_close(%s)", (session,))
