"""A small web dashboard for pg_claim: queues, dead items, claims, blocked
groups, leases and schedules of one database, with redrive, cancel, pause
and resume buttons for members of claim_admin.

Start it with one command (Debian: python3-psycopg; the standard library's
http.server serves the page):

    python3 -m pg_claim_dashboard --dsn "dbname=app user=ops" [--port 8080]

from ops/dashboard (or with ops/dashboard on PYTHONPATH). It listens on
127.0.0.1 unless --host says otherwise.

Who may do what is decided by the database role of --dsn, checked on every
request: the page shows what that role may read (a section it may not read
says so), and the buttons work only when the role is a member of
claim_admin (pg_has_role(current_user, 'claim_admin', 'USAGE')); otherwise
they are not shown and a POST is refused with 403. The page itself has no
login: anyone who reaches the port acts as that role, so keep it on
localhost or behind an authenticating proxy, and give read-only viewers a
DSN whose role is only in pg_monitor and claim_worker (or start it with
--no-actions). Each action form carries a token made at start-up, so other
web pages cannot post to it from a browser.

The actions go through the pg_claim Python client (clients/python) on the
request's connection.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import html
import json
import os
import secrets
import sys
import threading
import time
import urllib.parse
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Dict, List, Optional, Sequence, Tuple

import psycopg

try:  # the pg_claim client, installed or from the checkout
    import pg_claim
except ImportError:  # pragma: no cover - depends on the environment
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "clients", "python"))
    import pg_claim

__all__ = ["Dashboard", "main"]

ROW_LIMIT = 200
COUNTERS = ("enqueued", "claimed", "completed", "failed", "dead", "expired", "cancelled")
RATES = ("enqueued", "claimed", "completed", "failed")
ACTIONS = ("redrive", "cancel", "pause", "resume")


def esc(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, _dt.datetime):
        return html.escape(v.isoformat(sep=" ", timespec="seconds"))
    if isinstance(v, _dt.timedelta):
        s = v.total_seconds()
        return html.escape(f"{s:.1f} s" if s < 120 else f"{s / 60:.1f} min" if s < 7200 else f"{s / 3600:.1f} h")
    if isinstance(v, (dict, list)):
        text = json.dumps(v, separators=(",", ":"))
        return html.escape(text if len(text) <= 120 else text[:117] + "...")
    return html.escape(str(v))


class Sampler(threading.Thread):
    """Reads the counters of claim.metrics() every `every` seconds and keeps
    the last two samples, so the page shows rates (per second) at once."""

    def __init__(self, dsn: str, every: float) -> None:
        super().__init__(daemon=True, name="pg_claim-dashboard-sampler")
        self.dsn, self.every = dsn, every
        self.lock = threading.Lock()
        self.prev: Optional[Tuple[float, Dict[str, Dict[str, int]]]] = None
        self.last: Optional[Tuple[float, Dict[str, Dict[str, int]]]] = None
        self.stop = threading.Event()

    def sample(self) -> None:
        try:
            with psycopg.connect(self.dsn, autocommit=True) as conn:
                rows = conn.execute("SELECT queue, " + ", ".join(COUNTERS) + " FROM claim.metrics()").fetchall()
        except psycopg.Error:
            return
        now = time.monotonic()
        data = {r[0]: dict(zip(COUNTERS, r[1:])) for r in rows}
        with self.lock:
            self.prev, self.last = self.last, (now, data)

    def rates(self) -> Dict[str, Dict[str, Optional[float]]]:
        with self.lock:
            prev, last = self.prev, self.last
        if prev is None or last is None or last[0] <= prev[0]:
            return {}
        dt = last[0] - prev[0]
        out: Dict[str, Dict[str, Optional[float]]] = {}
        for q, c in last[1].items():
            p = prev[1].get(q)
            out[q] = {k: (None if p is None or c[k] is None or p[k] is None else max(0, c[k] - p[k]) / dt)
                      for k in RATES}
        return out

    def run(self) -> None:
        while not self.stop.is_set():
            self.sample()
            self.stop.wait(self.every)


class Dashboard:
    def __init__(self, dsn: str, *, actions: bool = True, sample_every: float = 5.0) -> None:
        self.dsn = dsn
        self.actions = actions
        self.csrf = secrets.token_urlsafe(24)
        self.sampler = Sampler(dsn, sample_every)

    # -- data ----------------------------------------------------------------
    def connect(self) -> "psycopg.Connection[Any]":
        return psycopg.connect(self.dsn, autocommit=True, connect_timeout=10)

    @staticmethod
    def is_admin(conn: "psycopg.Connection[Any]") -> bool:
        row = conn.execute("SELECT pg_catalog.pg_has_role(current_user, 'claim_admin', 'USAGE')"
                           " FROM pg_catalog.pg_roles WHERE rolname = 'claim_admin'").fetchone()
        return bool(row and row[0])

    @staticmethod
    def exists(conn: "psycopg.Connection[Any]", regclass: str) -> bool:
        return conn.execute("SELECT pg_catalog.to_regclass(%s) IS NOT NULL", (regclass,)).fetchone()[0]

    @staticmethod
    def query(conn: "psycopg.Connection[Any]", sql: str, params: Sequence[Any] = ()) -> Tuple[List[str], List[tuple], Optional[str]]:
        """(columns, rows, refusal): a query the role may not run yields its
        error message instead of rows."""
        try:
            cur = conn.execute(sql, params)
            cols = [d.name for d in cur.description or []]
            return cols, cur.fetchall(), None
        except psycopg.errors.InsufficientPrivilege as exc:
            return [], [], f"not permitted for this role: {exc.diag.message_primary}"
        except psycopg.errors.UndefinedFunction:
            return [], [], "not available in this version of pg_claim"

    # -- page ----------------------------------------------------------------
    def render(self, msg: str = "", err: str = "") -> str:
        with self.connect() as conn:
            who = conn.execute("SELECT current_user, current_database(), "
                               "(SELECT extversion FROM pg_extension WHERE extname = 'pg_claim')").fetchone()
            admin = self.actions and self.is_admin(conn)
            parts = [self.header(who, admin, msg, err)]
            parts.append(self.queues(conn, admin))
            parts.append(self.dead(conn, admin))
            parts.append(self.claims(conn, admin))
            parts.append(self.simple(conn, "blocked-groups", "Blocked groups", "claim.blocked_groups",
                                     "SELECT * FROM claim.blocked_groups ORDER BY 1, 2 LIMIT %s"))
            parts.append(self.simple(conn, "leases", "Leases", "claim.leases",
                                     "SELECT * FROM claim.leases ORDER BY 1, 2 LIMIT %s"))
            parts.append(self.simple(conn, "schedules", "Schedules", "claim.schedules",
                                     "SELECT * FROM claim.schedules ORDER BY 1 LIMIT %s"))
        return PAGE.replace("{{body}}", "\n".join(parts))

    def header(self, who: tuple, admin: bool, msg: str, err: str) -> str:
        role = "claim_admin: actions enabled" if admin else "read only"
        out = [f'<header><h1>pg_claim</h1><p>database <b>{esc(who[1])}</b> as <b id="role">{esc(who[0])}</b>'
               f' · pg_claim {esc(who[2])} · <span id="mode">{role}</span>'
               f' · <a href="/">refresh</a></p></header>']
        if msg:
            out.append(f'<p class="msg" id="msg">{esc(msg)}</p>')
        if err:
            out.append(f'<p class="err" id="err">{esc(err)}</p>')
        return "\n".join(out)

    def button(self, action: str, queue: str, item: Optional[int] = None, label: Optional[str] = None) -> str:
        hid = f'<input type="hidden" name="id" value="{item}">' if item is not None else ""
        tid = f"{action}-{queue}" + (f"-{item}" if item is not None else "")
        return (f'<form method="post" action="/action" class="inline">'
                f'<input type="hidden" name="csrf" value="{self.csrf}">'
                f'<input type="hidden" name="action" value="{action}">'
                f'<input type="hidden" name="queue" value="{esc(queue)}">{hid}'
                f'<button type="submit" data-testid="{esc(tid)}">{esc(label or action)}</button></form>')

    def queues(self, conn: "psycopg.Connection[Any]", admin: bool) -> str:
        cols, rows, refusal = self.query(conn, "SELECT * FROM claim.metrics()")
        if refusal:
            cols, rows, refusal2 = self.query(conn, "SELECT * FROM claim.queue_stats ORDER BY queue")
            refusal = refusal2 and f"{refusal}; {refusal2}"
        if refusal:
            return section("queues", "Queues", f'<p class="note">{esc(refusal)}</p>')
        rates = self.sampler.rates()
        gauges = [c for c in ("ready", "scheduled", "in_flight", "claimed", "waiting", "dead_items", "dead",
                              "oldest_ready_age", "paused", "waiters") if c in cols and
                  not (c in ("claimed", "dead") and "in_flight" in cols)]
        counters = [c for c in COUNTERS if c in cols and "in_flight" in cols]
        head = ["queue"] + gauges + [f"{c} (total)" for c in counters] + [f"{c}/s" for c in RATES if counters]
        if admin:
            head.append("actions")
        body = []
        for r in rows:
            d = dict(zip(cols, r))
            q = d["queue"]
            cells = [f'<td data-col="queue">{esc(q)}</td>']
            cells += [f'<td data-col="{c}">{esc(d[c])}</td>' for c in gauges]
            cells += [f'<td data-col="{c}_total">{esc(d[c])}</td>' for c in counters]
            if counters:
                qr = rates.get(q, {})
                cells += [f'<td data-col="{c}_rate">{"" if qr.get(c) is None else f"{qr[c]:.1f}"}</td>'
                          for c in RATES]
            if admin:
                paused = bool(d.get("paused"))
                act = self.button("resume" if paused else "pause", q)
                if d.get("dead_items", d.get("dead")):
                    act += self.button("redrive", q, None, "redrive all")
                cells.append(f"<td>{act}</td>")
            body.append(f'<tr data-queue="{esc(q)}">' + "".join(cells) + "</tr>")
        return section("queues", f"Queues ({len(rows)})", table(head, body))

    def dead(self, conn: "psycopg.Connection[Any]", admin: bool) -> str:
        cols, rows, refusal = self.query(
            conn, "SELECT queue, id, attempts, last_error, died_at, payload FROM claim.dead_items "
                  "ORDER BY died_at DESC, id LIMIT %s", (ROW_LIMIT,))
        if refusal:
            return section("dead", "Dead items", f'<p class="note">{esc(refusal)}</p>')
        head = ["queue", "id", "attempts", "last error", "died at", "payload"] + (["actions"] if admin else [])
        body = []
        for q, i, attempts, error, died, payload in rows:
            act = f"<td>{self.button('redrive', q, i)}{self.button('cancel', q, i)}</td>" if admin else ""
            body.append(f'<tr data-queue="{esc(q)}" data-id="{i}"><td>{esc(q)}</td><td>{i}</td><td>{attempts}</td>'
                        f'<td class="error">{esc(error)}</td><td>{esc(died)}</td><td class="payload">{esc(payload)}</td>'
                        f"{act}</tr>")
        return section("dead", f"Dead items ({len(rows)}{'+' if len(rows) == ROW_LIMIT else ''})", table(head, body))

    def claims(self, conn: "psycopg.Connection[Any]", admin: bool) -> str:
        cols, rows, refusal = self.query(
            conn, "SELECT queue, id, token, attempt, worker, claimed_at, lease_until, live "
                  "FROM claim.claimed_items ORDER BY lease_until, id LIMIT %s", (ROW_LIMIT,))
        if refusal:
            return section("claims", "Claims", f'<p class="note">{esc(refusal)}</p>')
        head = ["queue", "id", "token", "attempt", "worker", "claimed at", "lease until", "live"] + \
               (["actions"] if admin else [])
        body = []
        for q, i, token, attempt, worker, claimed, until, live in rows:
            act = f"<td>{self.button('cancel', q, i)}</td>" if admin else ""
            body.append(f'<tr data-queue="{esc(q)}" data-id="{i}"><td>{esc(q)}</td><td>{i}</td><td>{token}</td>'
                        f'<td>{attempt}</td><td>{esc(worker)}</td><td>{esc(claimed)}</td><td>{esc(until)}</td>'
                        f'<td>{"yes" if live else "expired"}</td>{act}</tr>')
        return section("claims", f"Claims ({len(rows)}{'+' if len(rows) == ROW_LIMIT else ''})", table(head, body))

    def simple(self, conn: "psycopg.Connection[Any]", sid: str, title: str, rel: str, sql: str) -> str:
        if not self.exists(conn, rel):
            return section(sid, title, '<p class="note">not available in this version of pg_claim</p>')
        cols, rows, refusal = self.query(conn, sql, (ROW_LIMIT,))
        if refusal:
            return section(sid, title, f'<p class="note">{esc(refusal)}</p>')
        body = ["<tr>" + "".join(f"<td>{esc(v)}</td>" for v in r) + "</tr>" for r in rows]
        return section(sid, f"{title} ({len(rows)})", table(cols, body))

    # -- actions -------------------------------------------------------------
    def act(self, form: Dict[str, str]) -> Tuple[int, str]:
        """Runs one button's action; (HTTP status, message)."""
        if not self.actions:
            return HTTPStatus.FORBIDDEN, "actions are disabled (--no-actions)"
        if not secrets.compare_digest(form.get("csrf", ""), self.csrf):
            return HTTPStatus.FORBIDDEN, "stale or missing form token: reload the page"
        action, queue = form.get("action", ""), form.get("queue", "")
        if action not in ACTIONS or not queue:
            return HTTPStatus.BAD_REQUEST, "unknown action"
        ident: Optional[int] = None
        if form.get("id"):
            try:
                ident = int(form["id"])
            except ValueError:
                return HTTPStatus.BAD_REQUEST, "id must be an integer"
        with self.connect() as conn:
            if not self.is_admin(conn):
                return HTTPStatus.FORBIDDEN, "only members of claim_admin may do this"
            client = pg_claim.Client(conn)
            try:
                if action == "redrive":
                    n = client.redrive(queue, None if ident is None else [ident])
                    return HTTPStatus.OK, f"redrive {queue}{'' if ident is None else f' #{ident}'}: {n} item(s) ready again"
                if action == "cancel":
                    if ident is None:
                        return HTTPStatus.BAD_REQUEST, "cancel needs an item id"
                    n = client.cancel(queue, [ident])
                    return HTTPStatus.OK, f"cancel {queue} #{ident}: {n} item(s) cancelled"
                if action == "pause":
                    client.pause(queue)
                    return HTTPStatus.OK, f"queue {queue} paused"
                client.resume(queue)
                return HTTPStatus.OK, f"queue {queue} resumed"
            except (pg_claim.PgClaimError, psycopg.Error) as exc:
                return HTTPStatus.CONFLICT, f"{action} {queue}: {exc}"


def section(sid: str, title: str, content: str) -> str:
    return f'<section id="{sid}"><h2>{esc(title)}</h2>{content}</section>'


def table(head: Sequence[str], body: Sequence[str]) -> str:
    if not body:
        return '<p class="note">none</p>'
    th = "".join(f"<th>{esc(h)}</th>" for h in head)
    return f"<table><thead><tr>{th}</tr></thead><tbody>{''.join(body)}</tbody></table>"


PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>pg_claim</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #222; }
h1 { margin: 0 0 .2em; font-size: 1.5em; } h2 { font-size: 1.15em; margin: 1.4em 0 .4em; }
table { border-collapse: collapse; } th, td { border: 1px solid #ccc; padding: .25em .5em; text-align: left; vertical-align: top; }
th { background: #f3f3f3; } td.error { color: #a00; } td.payload { font-family: monospace; font-size: 12px; }
form.inline { display: inline; margin-right: .3em; } button { cursor: pointer; }
.msg { background: #e8f5e9; padding: .4em; } .err { background: #fdecea; padding: .4em; } .note { color: #777; }
</style></head><body>
{{body}}
</body></html>
"""


def make_handler(dash: Dashboard) -> type:
    class Handler(BaseHTTPRequestHandler):
        server_version = "pg_claim_dashboard"

        def log_message(self, fmt: str, *args: Any) -> None:
            if os.environ.get("PG_CLAIM_DASHBOARD_LOG"):
                super().log_message(fmt, *args)

        def send(self, status: int, body: str, ctype: str = "text/html; charset=utf-8") -> None:
            data = body.encode()
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.send_header("Cache-Control", "no-store")
            self.send_header("X-Frame-Options", "DENY")
            self.send_header("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'")
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            url = urllib.parse.urlsplit(self.path)
            if url.path == "/healthz":
                self.send(200, "ok\n", "text/plain")
                return
            if url.path != "/":
                self.send(404, "not found\n", "text/plain")
                return
            qs = urllib.parse.parse_qs(url.query)
            try:
                self.send(200, dash.render(qs.get("msg", [""])[0], qs.get("err", [""])[0]))
            except psycopg.Error as exc:
                self.send(503, f"database error: {html.escape(str(exc))}\n", "text/plain")

        def do_POST(self) -> None:
            if urllib.parse.urlsplit(self.path).path != "/action":
                self.send(404, "not found\n", "text/plain")
                return
            length = min(int(self.headers.get("Content-Length") or 0), 65536)
            form = {k: v[0] for k, v in urllib.parse.parse_qs(self.rfile.read(length).decode()).items()}
            try:
                status, message = dash.act(form)
            except psycopg.Error as exc:
                status, message = HTTPStatus.SERVICE_UNAVAILABLE, f"database error: {exc}"
            if status == HTTPStatus.OK or status == HTTPStatus.CONFLICT:
                key = "msg" if status == HTTPStatus.OK else "err"
                self.send_response(303)
                self.send_header("Location", "/?" + urllib.parse.urlencode({key: message}))
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self.send(int(status), message + "\n", "text/plain")

    return Handler


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m pg_claim_dashboard",
                                 description="Web dashboard of pg_claim (one database).")
    ap.add_argument("--dsn", default=os.environ.get("PG_CLAIM_DSN", ""),
                    help="libpq connection string or URI (default: $PG_CLAIM_DSN, then the PG* variables)")
    ap.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    ap.add_argument("--port", type=int, default=8080, help="port (default 8080; 0 picks a free one)")
    ap.add_argument("--sample", type=float, default=5.0, help="seconds between counter samples for rates (default 5)")
    ap.add_argument("--no-actions", action="store_true", help="no buttons, whatever the role")
    args = ap.parse_args(argv)
    dash = Dashboard(args.dsn, actions=not args.no_actions, sample_every=args.sample)
    with dash.connect() as conn:  # fail early on a bad DSN
        conn.execute("SELECT 1")
    dash.sampler.start()
    httpd = ThreadingHTTPServer((args.host, args.port), make_handler(dash))
    print(f"pg_claim dashboard on http://{args.host}:{httpd.server_address[1]}/", flush=True)
    try:
        httpd.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        dash.sampler.stop.set()
        httpd.server_close()
    return 0
