"""``pg_claim``: the command line of the Python client.

    pg_claim [--dsn DSN] COMMAND ...

Commands: stats, enqueue, dead, redrive, cancel, pause, resume, work. The
connection comes from ``--dsn``, else ``$PG_CLAIM_DSN``, else libpq's ``PG*``
environment variables. The exit status says what went wrong (see EXIT_CODES
and ``pg_claim --help``).
"""
from __future__ import annotations

import argparse
import datetime as _dt
import getpass
import json
import logging
import os
import re
import signal
import subprocess
import sys
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Set, Tuple, Type

import psycopg

from . import __version__
from .client import Client, QueueStats
from .errors import (BadConnection, InvalidArgument, NotInstalled, NotSupported, PermissionDenied, PgClaimError,
                     ReadOnly, Transient, UnknownQueue, classify, map_error)
from ._common import Job
from .worker import Worker

# Exit status per error class, most specific first (InvalidName and
# NullArgument are InvalidArgument's).
EXIT_CODES: Tuple[Tuple[Type[PgClaimError], int], ...] = (
    (UnknownQueue, 3),
    (InvalidArgument, 4),
    (PermissionDenied, 5),
    (NotInstalled, 6),
    (NotSupported, 7),
    (Transient, 8),
    (ReadOnly, 9),
    (BadConnection, 10),
)

EXIT_HELP = """exit status:
  0  done
  1  any other error; enqueue --wait: the item ended dead or cancelled
  2  bad command line
  3  UnknownQueue      the queue does not exist (42704)
  4  InvalidArgument   a value the server refuses (22023, 22004, 22007, 42602, ...)
  5  PermissionDenied  the role lacks a grant (42501)
  6  NotInstalled      the database has no pg_claim (3F000)
  7  NotSupported      the server's pg_claim lacks this function (0A000, 42883)
  8  Transient         no connection, or lost; serialization failure; shutdown
  9  ReadOnly          a hot standby or a read-only transaction (25006)
 10  BadConnection     a connection string libpq cannot parse, an unknown database,
                    role or a wrong password (3D000, 28000, 28P01)

connection: --dsn, else $PG_CLAIM_DSN, else libpq's PG* variables
(PGHOST, PGPORT, PGDATABASE, PGUSER, PGPASSWORD, ...)."""


def exit_code(exc: BaseException) -> int:
    """The exit status for an error of the client or the driver."""
    cls = classify(exc)
    for base, code in EXIT_CODES:
        if issubclass(cls, base):
            return code
    return 1


class _Fail(Exception):
    """An error of the command line itself (not of the server)."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


def _json_arg(text: str, what: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as exc:
        raise _Fail(f"{what} is not JSON: {exc}", 4) from exc


def _fmt(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, _dt.timedelta):
        secs = value.total_seconds()
        return f"{secs:.1f}s" if secs < 120 else str(value).split(".")[0]
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def _table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    cells = [[_fmt(v) for v in r] for r in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths)).rstrip()]
    for r in cells:
        lines.append("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
    return "\n".join(lines)


def _jsonable(value: Any) -> Any:
    if isinstance(value, _dt.timedelta):
        return value.total_seconds()
    if isinstance(value, (_dt.datetime, _dt.date)):
        return value.isoformat()
    return value


STATS_COLUMNS = ("queue", "ready", "scheduled", "claimed", "dead", "waiting", "paused",
                 "oldest_ready_age")


def _stats_rows(rows: List[QueueStats]) -> List[List[Any]]:
    return [[getattr(r, c) for c in STATS_COLUMNS] for r in rows]


# -- commands ------------------------------------------------------------------

def cmd_stats(args: argparse.Namespace, client: Client) -> int:
    shown = 0
    while True:
        rows = client.stats(args.queue)
        if args.json:
            print(json.dumps([{c: _jsonable(getattr(r, c)) for c in STATS_COLUMNS} for r in rows]))
        else:
            if args.watch and sys.stdout.isatty():
                sys.stdout.write("\x1b[H\x1b[2J")
            if args.watch:
                print(_dt.datetime.now().strftime("%H:%M:%S"))
            print(_table(STATS_COLUMNS, _stats_rows(rows)))
        sys.stdout.flush()
        shown += 1
        if not args.watch or (args.count is not None and shown >= args.count):
            return 0
        time.sleep(args.interval)


def cmd_enqueue(args: argparse.Namespace, client: Client) -> int:
    text = args.payload
    if text == "-":
        text = sys.stdin.read()
    payload = _json_arg(text, "the payload") if text is not None else {}
    run_at = None
    if args.run_at is not None:
        try:
            run_at = _dt.datetime.fromisoformat(args.run_at)
        except ValueError as exc:
            raise _Fail(f"--run-at: {exc}", 4) from exc
        if run_at.tzinfo is None:
            run_at = run_at.astimezone()
    item = client.enqueue(args.queue, payload, group_key=args.group_key, run_at=run_at,
                          priority=args.priority, dedup_key=args.dedup_key)
    if args.wait is None:
        print(item)
        return 0
    state = client.item_state(args.queue, item, wait=float(args.wait))
    if state is None or state.state is None:
        # Finished (completed or cancelled) in a queue that keeps no history:
        # the item, its state and its result are gone.
        print(json.dumps({"id": item, "state": None, "retained": False}))
        print(f"pg_claim: item {item} finished, but queue {args.queue} does not retain finished "
              f"items, so its state and result are gone; claim.alter_queue({args.queue!r}, "
              f"retain => '1 day') keeps them", file=sys.stderr)
        return 0
    if state.state not in ("completed", "dead", "cancelled"):
        print(json.dumps({"id": item, "state": state.state if state else None}))
        return 0
    print(json.dumps({"id": item, "state": state.state, "attempt": state.attempt,
                      "result": state.result, "error": state.error}))
    return 0 if state.state == "completed" else 1


DEAD_SQL = ("SELECT id, attempts, died_at, last_error, payload FROM claim.dead_items "
            "WHERE queue = %s ORDER BY died_at DESC, id DESC LIMIT %s")


def cmd_dead(args: argparse.Namespace, client: Client) -> int:
    client.stats(args.queue)   # UnknownQueue for a queue that does not exist
    rows = client._exec(DEAD_SQL, (args.queue, args.limit)).fetchall()
    if args.json:
        print(json.dumps([{"id": r[0], "attempts": r[1], "died_at": _jsonable(r[2]),
                           "last_error": r[3], "payload": r[4]} for r in rows]))
        return 0
    out = []
    for r in rows:
        err = (r[3] or "").splitlines()[0] if r[3] else ""
        out.append([r[0], r[1], r[2].strftime("%Y-%m-%d %H:%M:%S") if r[2] else "",
                    err[:60], json.dumps(r[4])[:60]])
    print(_table(("id", "attempts", "died_at", "last_error", "payload"), out))
    return 0


COORD_SESSIONS_SQL = (
    "SELECT session, holder, started, expires, coalesce(leads, '{}'), coalesce(leases, '{}'), "
    "claims FROM claim.sessions ORDER BY session")
COORD_LEADERS_SQL = (
    "SELECT l.name, r.holder, r.epoch, r.since, r.until FROM claim.coord_leaders l, "
    "LATERAL claim.leader(l.name) r WHERE l.ended IS NULL AND r.epoch IS NOT NULL "
    "ORDER BY l.name")
# Backends waiting inside claim.watch (what pg_stat_activity shows the
# caller: every backend of its own role, all with pg_read_all_stats).
COORD_WATCHERS_SQL = (
    "SELECT pid, usename, application_name, query_start FROM pg_catalog.pg_stat_activity "
    "WHERE state = 'active' AND wait_event_type = 'Extension' AND pid <> pg_backend_pid() "
    "AND query ~* 'claim\\.watch\\s*\\(' ORDER BY pid")


def _when(v: Any) -> str:
    return v.strftime("%Y-%m-%d %H:%M:%S") if v is not None else ""


def cmd_coord(args: argparse.Namespace, client: Client) -> int:
    sessions = client._exec(COORD_SESSIONS_SQL).fetchall()
    leaders = client._exec(COORD_LEADERS_SQL).fetchall()
    watchers = client._exec(COORD_WATCHERS_SQL).fetchall()
    if args.json:
        print(json.dumps({
            "sessions": [{"session": r[0], "holder": r[1], "started": _jsonable(r[2]),
                          "expires": _jsonable(r[3]), "leads": list(r[4]),
                          "leases": list(r[5]), "claims": r[6]} for r in sessions],
            "leaders": [{"name": r[0], "holder": r[1], "epoch": r[2], "since": _jsonable(r[3]),
                         "until": _jsonable(r[4])} for r in leaders],
            "watchers": [{"pid": r[0], "user": r[1], "application": r[2],
                          "since": _jsonable(r[3])} for r in watchers]}))
        return 0
    print("sessions")
    print(_table(("session", "holder", "started", "expires", "leads", "leases", "claims"),
                 [[r[0], r[1] or "", _when(r[2]), _when(r[3]), ",".join(r[4]),
                   ",".join(r[5]), r[6]] for r in sessions]))
    print()
    print("leaders")
    print(_table(("name", "holder", "epoch", "since", "until"),
                 [[r[0], r[1] or "", r[2], _when(r[3]), _when(r[4])] for r in leaders]))
    print()
    print("watchers")
    print(_table(("pid", "user", "application", "waiting since"),
                 [[r[0], r[1] or "", r[2] or "", _when(r[3])] for r in watchers]))
    return 0


def cmd_redrive(args: argparse.Namespace, client: Client) -> int:
    print(client.redrive(args.queue, args.ids or None))
    return 0


def cmd_cancel(args: argparse.Namespace, client: Client) -> int:
    print(client.cancel(args.queue, args.ids))
    return 0


def cmd_pause(args: argparse.Namespace, client: Client) -> int:
    client.pause(args.queue)
    return 0


def cmd_resume(args: argparse.Namespace, client: Client) -> int:
    client.resume(args.queue)
    return 0


class CommandFailed(Exception):
    """The job's command exited with a non-zero status."""


class Children:
    """The commands running now, each in a process group of its own, so
    that a stop can end them with everything they started."""

    def __init__(self) -> None:
        self.procs: Set["subprocess.Popen[bytes]"] = set()

    def end_all(self, wait: float = 2.0) -> None:
        """SIGTERM to every running command's process group, SIGKILL to
        those still there after ``wait`` seconds."""
        procs = list(self.procs)
        for proc in procs:
            _kill_group(proc, signal.SIGTERM)
        end = time.monotonic() + wait
        for proc in procs:
            try:
                proc.wait(max(0.0, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            _kill_group(proc, signal.SIGKILL)


def _kill_group(proc: "subprocess.Popen[bytes]", sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def command_handler(command: Sequence[str], timeout: Optional[float],
                    children: Optional[Children] = None) -> Callable[[Job], Any]:
    """A handler that runs ``command`` with the payload (JSON) on stdin.
    One word runs through /bin/sh -c; several are run as they are. Each
    runs in a process group of its own (listed in ``children``)."""
    shell = len(command) == 1
    argv: Any = command[0] if shell else list(command)
    live = children if children is not None else Children()

    def handle(job: Job) -> Any:
        env = dict(os.environ, PG_CLAIM_QUEUE=job.queue, PG_CLAIM_ITEM_ID=str(job.id),
                   PG_CLAIM_ATTEMPT=str(job.attempt), PG_CLAIM_TOKEN=str(job.token))
        child = subprocess.Popen(argv, shell=shell, stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                                 start_new_session=True)
        live.procs.add(child)
        try:
            try:
                stdout, stderr = child.communicate(json.dumps(job.payload).encode(), timeout=timeout)
            except subprocess.TimeoutExpired as exc:
                _kill_group(child, signal.SIGKILL)
                child.communicate()
                raise CommandFailed(f"the command ran longer than {timeout:g} s") from exc
        finally:
            live.procs.discard(child)
        proc = subprocess.CompletedProcess(argv, child.returncode, stdout, stderr)
        if proc.stderr:
            sys.stderr.buffer.write(proc.stderr)
            sys.stderr.flush()
        if proc.returncode != 0:
            tail = proc.stderr.decode(errors="replace").strip().splitlines()
            why = f"the command exited with status {proc.returncode}"
            if proc.returncode < 0:
                why = f"the command was killed by signal {-proc.returncode}"
            raise CommandFailed(why + (f": {tail[-1]}" if tail else ""))
        out = proc.stdout.decode(errors="replace").strip()
        if not out:
            return None
        try:
            return json.loads(out)
        except ValueError:
            return out
    return handle


def cmd_work(args: argparse.Namespace, dsn: str) -> int:
    command = list(args.command)
    if not command:
        raise _Fail("work: give the command after --, e.g. pg_claim work QUEUE -- ./handle.sh", 2)
    children = Children()
    worker = Worker(dsn, args.queue, command_handler(command, args.timeout, children),
                    concurrency=args.concurrency, lease=args.lease,
                    wait=args.wait if args.wait is not None else (0.0 if args.burst else 10.0),
                    grace=args.grace, name=args.name, burst=args.burst, max_jobs=args.max_jobs)
    try:
        stats = worker.run()
    finally:
        # Commands still running after the grace period (their items were
        # released) end with the worker rather than outlive it.
        children.end_all()
    logging.getLogger("pg_claim.cli").info(
        "work: %d claimed, %d completed, %d failed, %d stale, %d released", stats.claimed,
        stats.completed, stats.failed + stats.retried, stats.stale, stats.released)
    return 0


# -- parser --------------------------------------------------------------------

def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1: {text!r}")
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must not be negative: {text!r}")
    return value


def _item_id(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an item id: {text!r}") from None


def build_parser() -> argparse.ArgumentParser:
    fmt = argparse.RawDescriptionHelpFormatter
    p = argparse.ArgumentParser(
        prog="pg_claim", formatter_class=fmt,
        description="Look at and operate pg_claim queues; run a shell command per job.",
        epilog=EXIT_HELP)
    p.add_argument("--dsn", default=None,
                   help="libpq connection string or URI (default: $PG_CLAIM_DSN, then the PG* "
                        "variables)")
    p.add_argument("-v", "--verbose", action="store_true", help="log at INFO (default WARNING)")
    p.add_argument("--version", action="version", version=f"pg_claim {__version__}")
    # --dsn and -v also after the command; given there, they win.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--dsn", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    common.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS,
                        help=argparse.SUPPRESS)
    sub = p.add_subparsers(dest="cmd", metavar="COMMAND")
    sub.required = True
    real_add = sub.add_parser

    def add_parser(name: str, **kw: Any) -> argparse.ArgumentParser:
        return real_add(name, parents=[common], **kw)

    sub.add_parser = add_parser  # type: ignore[method-assign]

    s = sub.add_parser("stats", help="items per queue", formatter_class=fmt,
                       description="Items per queue (claim.queue_stats): ready, scheduled, "
                                   "claimed, dead, waiting, paused, age of the oldest ready item.",
                       epilog=EXIT_HELP)
    s.add_argument("queue", nargs="?", help="one queue (default: all)")
    s.add_argument("--watch", action="store_true", help="print again every --interval seconds")
    s.add_argument("--interval", type=_seconds, default=2.0, help="seconds between prints (2)")
    s.add_argument("--count", type=_positive_int, default=None,
                   help="with --watch: stop after this many prints")
    s.add_argument("--json", action="store_true", help="one JSON array per print")
    s.set_defaults(func=cmd_stats)

    e = sub.add_parser("enqueue", help="add one item; prints its id", formatter_class=fmt,
                       description="Add one item to QUEUE and print its id.", epilog=EXIT_HELP)
    e.add_argument("queue")
    e.add_argument("payload", nargs="?", default=None,
                   help="the payload as JSON (default {}); - reads it from stdin")
    e.add_argument("--group-key")
    e.add_argument("--priority", type=int)
    e.add_argument("--run-at", help="ISO 8601 time; without a zone, local time")
    e.add_argument("--dedup-key")
    e.add_argument("--wait", type=_seconds, default=None,
                   help="wait up to this many seconds for the item to finish and print its "
                        "state as JSON (exit 1 when it ended dead or cancelled)")
    e.set_defaults(func=cmd_enqueue)

    d = sub.add_parser("dead", help="list dead items", formatter_class=fmt,
                       description="Dead items of QUEUE, newest first (claim.dead_items).",
                       epilog=EXIT_HELP)
    d.add_argument("queue")
    d.add_argument("--limit", type=_positive_int, default=20, help="at most this many (20)")
    d.add_argument("--json", action="store_true")
    d.set_defaults(func=cmd_dead)

    r = sub.add_parser("redrive", help="dead items back to ready", formatter_class=fmt,
                       description="Dead items (all, or the ids given) back to ready with their "
                                   "attempts reset; prints how many. An admin function.",
                       epilog=EXIT_HELP)
    r.add_argument("queue")
    r.add_argument("ids", nargs="*", type=_item_id, metavar="ID")
    r.set_defaults(func=cmd_redrive)

    c = sub.add_parser("cancel", help="cancel items", formatter_class=fmt,
                       description="Cancel items (their live claims are revoked); prints how "
                                   "many were cancelled.", epilog=EXIT_HELP)
    c.add_argument("queue")
    c.add_argument("ids", nargs="+", type=_item_id, metavar="ID")
    c.set_defaults(func=cmd_cancel)

    co = sub.add_parser("coord", help="sessions, leaders and watchers", formatter_class=fmt,
                        description="The coordination service now: live sessions (claim.sessions) "
                                    "with what they lead and carry, the leader of every "
                                    "election (claim.leader), and the backends waiting in "
                                    "claim.watch (those pg_stat_activity shows you).",
                        epilog=EXIT_HELP)
    co.add_argument("--json", action="store_true", help="one JSON object")
    co.set_defaults(func=cmd_coord)

    for name, what, fn in (("pause", "stop deliveries from a queue", cmd_pause),
                           ("resume", "resume deliveries from a paused queue", cmd_resume)):
        q = sub.add_parser(name, help=what, formatter_class=fmt,
                           description=what[0].upper() + what[1:] + ".", epilog=EXIT_HELP)
        q.add_argument("queue")
        q.set_defaults(func=fn)

    w = sub.add_parser(
        "work", help="run a shell command per job", formatter_class=fmt,
        usage="pg_claim work [options] QUEUE -- CMD [ARG ...]",
        description="Claim jobs of QUEUE and run CMD for each, with the payload (JSON) on "
                    "stdin and PG_CLAIM_QUEUE, PG_CLAIM_ITEM_ID, PG_CLAIM_ATTEMPT and "
                    "PG_CLAIM_TOKEN in its environment. Exit status 0 completes the job, "
                    "with CMD's stdout as its result (JSON when it parses, else the text); "
                    "any other status fails the attempt with the last line of CMD's stderr. "
                    "A single word runs through /bin/sh -c, several words as they are. "
                    "SIGTERM or SIGINT stops claiming and lets running commands finish "
                    "(up to --grace seconds).", epilog=EXIT_HELP)
    w.add_argument("queue")
    w.add_argument("--concurrency", type=_positive_int, default=1, help="commands at once (1)")
    w.add_argument("--lease", type=_seconds, default=None,
                   help="lease in seconds (default: the queue's); extended while CMD runs")
    w.add_argument("--wait", type=_seconds, default=None,
                   help="seconds one claim waits in the server (10; 0 with --burst)")
    w.add_argument("--grace", type=_seconds, default=30.0,
                   help="seconds running commands get after a stop (30)")
    w.add_argument("--timeout", type=_seconds, default=None,
                   help="fail a job whose command runs longer than this")
    w.add_argument("--name", default=None, help="the worker's name (default host:pid)")
    w.add_argument("--burst", action="store_true",
                   help="return once a claim finds no ready item (the queue is drained; items "
                        "scheduled or backing off for later are left)")
    w.add_argument("--max-jobs", type=_positive_int, default=None,
                   help="return after this many jobs")
    w.set_defaults(func=None, command=[])
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    command: List[str] = []
    if "work" in argv and "--" in argv and argv.index("work") < argv.index("--"):
        cut = argv.index("--")
        argv, command = argv[:cut], argv[cut + 1:]
    args = parser.parse_args(argv)
    if args.cmd == "work":
        args.command = command
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="pg_claim: %(levelname)s %(message)s")
    dsn = args.dsn if args.dsn is not None else os.environ.get("PG_CLAIM_DSN", "")
    source = ("--dsn" if args.dsn is not None
              else "$PG_CLAIM_DSN" if os.environ.get("PG_CLAIM_DSN") else "libpq's PG* variables")
    try:
        if args.cmd == "work":
            return cmd_work(args, dsn)
        with Client(dsn) as client:
            code: int = args.func(args, client)
            return code
    except _Fail as exc:
        print(f"pg_claim: {exc}", file=sys.stderr)
        return exc.code
    except KeyboardInterrupt:
        return 130
    except (PgClaimError, psycopg.Error) as exc:
        err = map_error(exc) if isinstance(exc, psycopg.Error) else exc
        line = f"pg_claim: {type(err).__name__}: {err}"
        if err.sqlstate:
            line += f" (SQLSTATE {err.sqlstate})"
        print(line, file=sys.stderr)
        if _connect_failed(exc.__cause__ if isinstance(exc, PgClaimError) else exc):
            print(f"pg_claim: tried {connection_target(dsn)} (from {source})", file=sys.stderr)
        if err.hint:
            print(f"hint: {err.hint}", file=sys.stderr)
        return exit_code(err)


def connection_target(dsn: str) -> str:
    """Where a connection string leads, as libpq resolves it (host, port,
    database, user; never the password): the DSN's own parameters, else the
    PG* variables, else libpq's defaults. A string libpq cannot parse is
    shown as it is, with any password= value masked."""
    try:
        params = psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.Error:
        return repr(re.sub(r"(password\s*=\s*)\S+", r"\1***", dsn))
    user = params.get("user") or os.environ.get("PGUSER") or getpass.getuser()
    fields = (("host", params.get("host") or os.environ.get("PGHOST") or "/var/run/postgresql"),
              ("port", params.get("port") or os.environ.get("PGPORT") or "5432"),
              ("dbname", params.get("dbname") or os.environ.get("PGDATABASE") or user),
              ("user", user))
    return " ".join(f"{k}={v}" for k, v in fields)


def _connect_failed(exc: Optional[BaseException]) -> bool:
    """The error is one of making the connection (or of its string)."""
    if exc is None:
        return False
    if isinstance(exc, psycopg.ProgrammingError) and "connection info" in str(exc):
        return True
    return (isinstance(exc, psycopg.OperationalError)
            and (exc.sqlstate is None or exc.sqlstate[:2] in ("08", "28") or exc.sqlstate == "3D000"))


def run() -> None:
    """Console-script entry point."""
    sys.exit(main())


if __name__ == "__main__":
    run()
