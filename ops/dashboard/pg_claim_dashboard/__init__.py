"""A small web dashboard for pg_claim: charts of queue depth and throughput
over the last hour, queues, dead and finished items, claims, blocked groups,
leases and schedules of one database, with redrive, cancel, pause and resume
buttons for members of claim_admin. See ops/dashboard/README.md.

    PG_CLAIM_DSN="dbname=app user=ops" python3 -m pg_claim_dashboard [--port 8080]

from ops/dashboard (or with ops/dashboard on PYTHONPATH). Without
PG_CLAIM_DSN or --dsn, libpq's PG* variables (PGHOST, PGDATABASE, ...) say
where to connect. It listens on 127.0.0.1 unless --host says otherwise.

Who may do what is decided by the database role it connects as, checked on
every request: the page shows what that role may read (a section it may not
read says so), and the buttons work only when the role is a member of
claim_admin; otherwise they are not shown and a POST is refused with 403.
Each action form carries a token made at start-up, so other web pages cannot
post to it from a browser.

The page never fails as a whole: each section is read on its own, a value
the driver cannot convert is shown as the server's text, and a section that
cannot be read says why while the others are shown.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import hashlib
import hmac
import html
import json
import os
import secrets
import sys
import time
import traceback
import urllib.parse
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import psycopg
from psycopg.types.datetime import DateLoader, IntervalLoader, TimestampLoader, TimestamptzLoader

try:  # the pg_claim client, installed or from the checkout
    import pg_claim
except ImportError:  # pragma: no cover - depends on the environment
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "clients", "python"))
    import pg_claim

from .charts import COUNTERS, History, depth_series, rate_series, span_of, svg_chart

__all__ = ["Dashboard", "main"]

ROW_LIMIT = 200
RATES = ("enqueued", "completed", "failed")
ACTIONS = ("redrive", "cancel", "pause", "resume")
DEFAULT_REFRESH = 10


class Unconverted(str):
    """A value as the server wrote it, where Python has no equivalent
    (an infinite timestamp, a date before year 1)."""


def lenient(base: type) -> type:
    class Lenient(base):  # type: ignore[misc, valid-type]
        def load(self, data: Any) -> Any:
            try:
                return super().load(data)
            except (psycopg.DataError, ValueError, OverflowError):
                return Unconverted(bytes(data).decode("utf-8", "replace"))
    Lenient.__name__ = f"Lenient{base.__name__}"
    return Lenient


LENIENT = {"timestamptz": lenient(TimestamptzLoader), "timestamp": lenient(TimestampLoader),
           "date": lenient(DateLoader), "interval": lenient(IntervalLoader)}


def esc(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, Unconverted):
        return f'<span class="raw" title="shown as the server wrote it">{html.escape(str(v))}</span>'
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


def section(sid: str, title: str, content: str) -> str:
    return f'<section id="{sid}"><h2>{esc(title)}</h2>{content}</section>'


def note(text: str, cls: str = "note") -> str:
    return f'<p class="{cls}">{esc(text)}</p>'


def table(head: Sequence[str], body: Sequence[str]) -> str:
    if not body:
        return note("none")
    th = "".join(f"<th>{esc(h)}</th>" for h in head)
    return f'<div class="scroll"><table><thead><tr>{th}</tr></thead><tbody>{"".join(body)}</tbody></table></div>'


def counted(title: str, rows: Sequence[Any]) -> str:
    return f"{title} ({len(rows)}{'+' if len(rows) >= ROW_LIMIT else ''})"


class View:
    """What one request asks to see: the queue of the charts and the
    finished items (None: all), and the auto-refresh period (0: paused)."""

    def __init__(self, queue: Optional[str], refresh: int, dead_before: Optional[int] = None) -> None:
        self.queue, self.refresh = queue or None, max(0, min(refresh, 3600))
        self.dead_before = dead_before   # keyset of the dead items' page: ids below this
        self.csrf = ""                    # the form token of the session asking

    @classmethod
    def from_query(cls, qs: Dict[str, List[str]], default_refresh: int) -> "View":
        try:
            refresh = int(qs.get("refresh", [str(default_refresh)])[0])
        except ValueError:
            refresh = default_refresh
        try:
            before: Optional[int] = int(qs.get("dead_before", [""])[0])
        except ValueError:
            before = None
        return cls(qs.get("queue", [""])[0], refresh, before)

    def url(self, **changes: Any) -> str:
        params = {"queue": self.queue or "", "refresh": self.refresh,
                  "dead_before": self.dead_before if self.dead_before is not None else ""}
        params.update(changes)
        return "/?" + urllib.parse.urlencode({k: v for k, v in params.items() if v not in ("", None)})


class Dashboard:
    def __init__(self, dsn: str, *, actions: bool = True, sample_every: float = 5.0,
                 refresh: int = DEFAULT_REFRESH, statement_timeout: float = 5.0) -> None:
        self.dsn = dsn
        self.actions = actions
        self.refresh = refresh
        self.statement_timeout = statement_timeout
        # Form tokens are per browser session: HMAC(secret, session cookie).
        self.secret = secrets.token_bytes(32)
        self.history = History(self.connect, sample_every)

    # -- data ----------------------------------------------------------------
    def connect(self) -> "psycopg.Connection[Any]":
        # Unprepared statements: each dead-items page query is planned for its
        # queue (a generic plan would scan every item of the busiest queue).
        conn = psycopg.connect(self.dsn, autocommit=True, connect_timeout=10, prepare_threshold=None)
        if self.statement_timeout > 0:
            # No query of a page (or an action) may hold a backend longer.
            conn.execute("SELECT pg_catalog.set_config('statement_timeout', %s, false)",
                         (f"{int(self.statement_timeout * 1000)}ms",))
        for name, loader in LENIENT.items():
            conn.adapters.register_loader(name, loader)
        return conn

    def csrf_for(self, session: str) -> str:
        """The form token of a browser session (its cookie)."""
        return hmac.new(self.secret, session.encode(), hashlib.sha256).hexdigest() if session else ""

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
    def render(self, view: View, msg: str = "", err: str = "") -> Tuple[int, str]:
        """(HTTP status, page). 503 only when the database cannot be reached;
        then the page says so and refreshes itself."""
        try:
            conn = self.connect()
        except psycopg.Error as exc:
            body = self.header(("?", "?", "?"), False, view, msg, err) + \
                note(f"database unreachable: {str(exc).strip()}", "err")
            return HTTPStatus.SERVICE_UNAVAILABLE, self.page(view, body)
        with conn:
            try:
                who = conn.execute("SELECT current_user, current_database(), "
                                   "(SELECT extversion FROM pg_extension WHERE extname = 'pg_claim')").fetchone()
                admin = self.actions and self.is_admin(conn)
            except psycopg.Error as exc:
                who, admin = ("?", "?", "?"), False
                err = (err + "; " if err else "") + f"could not read the role: {str(exc).strip()}"
            parts = [self.header(who, admin, view, msg, err)]
            sections: List[Tuple[str, str, Callable[[], str]]] = [
                ("charts", "Last hour", lambda: self.charts(view)),
                ("queues", "Queues", lambda: self.queues(conn, admin, view)),
                ("fair-keys", "Fair keys", lambda: self.simple(
                    conn, "fair-keys", "Fair keys", "claim.fair_stats",
                    "SELECT * FROM claim.fair_stats ORDER BY queue, handed_last_minute DESC, fair_key LIMIT %s")),
                ("dead", "Dead items", lambda: self.dead(conn, admin, view)),
                ("claims", "Claims", lambda: self.claims(conn, admin, view)),
                ("finished", "Finished items", lambda: self.finished(conn, view)),
                ("steps", "Run steps", lambda: self.simple(
                    conn, "steps", "Run steps", "claim.item_steps",
                    "SELECT queue, id, step, output, token, done_at FROM claim.item_steps "
                    "ORDER BY id DESC, done_at DESC LIMIT %s")),
                ("blocked-groups", "Blocked groups", lambda: self.simple(
                    conn, "blocked-groups", "Blocked groups", "claim.blocked_groups",
                    "SELECT * FROM claim.blocked_groups ORDER BY 1, 2 LIMIT %s")),
                ("leases", "Leases", lambda: self.simple(
                    conn, "leases", "Leases", "claim.leases", "SELECT * FROM claim.leases ORDER BY 1, 2 LIMIT %s")),
                ("schedules", "Schedules", lambda: self.simple(
                    conn, "schedules", "Schedules", "claim.schedules", "SELECT * FROM claim.schedules ORDER BY 1 LIMIT %s")),
            ]
            for sid, title, build in sections:
                parts.append(self.guarded(sid, title, build))
        return HTTPStatus.OK, self.page(view, "\n".join(parts))

    @staticmethod
    def guarded(sid: str, title: str, build: Callable[[], str]) -> str:
        """One section, or a note saying why it could not be shown."""
        try:
            return build()
        except psycopg.Error as exc:
            why = str(exc).strip() or type(exc).__name__
        except Exception as exc:  # a value the page could not show: the rest stays
            traceback.print_exc(file=sys.stderr)
            why = f"{type(exc).__name__}: {exc}"
        return f'<section id="{sid}" class="failed"><h2>{esc(title)}</h2>' + \
            note(f"could not show this section: {why}", "err section-error") + "</section>"

    def page(self, view: View, body: str) -> str:
        meta = (f'<meta http-equiv="refresh" content="{view.refresh}; url={html.escape(view.url())}">'
                if view.refresh else "")
        return PAGE.replace("{{meta}}", meta).replace("{{body}}", body)

    def header(self, who: tuple, admin: bool, view: View, msg: str, err: str) -> str:
        role = "claim_admin: actions enabled" if admin else "read only"
        if view.refresh:
            auto = (f'<span id="refresh-state">auto-refresh every {view.refresh} s</span> · '
                    f'<a id="refresh-toggle" href="{esc(view.url(refresh=0))}">pause</a>')
        else:
            auto = (f'<span id="refresh-state">auto-refresh paused</span> · '
                    f'<a id="refresh-toggle" href="{esc(view.url(refresh=self.refresh or DEFAULT_REFRESH))}">resume</a>')
        stamp = _dt.datetime.now().astimezone().isoformat(sep=" ", timespec="milliseconds")
        out = [f'<header><h1>pg_claim</h1><p>database <b>{esc(who[1])}</b> as <b id="role">{esc(who[0])}</b>'
               f' · pg_claim {esc(who[2])} · <span id="mode">{role}</span></p>'
               f'<p>{auto} · <a href="{esc(view.url())}">refresh now</a> · '
               f'shown at <span id="rendered">{esc(stamp)}</span></p></header>']
        if msg:
            out.append(f'<p class="msg" id="msg">{esc(msg)}</p>')
        if err:
            out.append(f'<p class="err" id="err">{esc(err)}</p>')
        return "\n".join(out)

    def button(self, action: str, queue: str, view: View, item: Optional[int] = None,
               label: Optional[str] = None) -> str:
        hid = f'<input type="hidden" name="id" value="{item}">' if item is not None else ""
        tid = f"{action}-{queue}" + (f"-{item}" if item is not None else "")
        return (f'<form method="post" action="/action" class="inline">'
                f'<input type="hidden" name="csrf" value="{esc(view.csrf)}">'
                f'<input type="hidden" name="action" value="{action}">'
                f'<input type="hidden" name="queue" value="{esc(queue)}">{hid}'
                f'<input type="hidden" name="back" value="{esc(view.url())}">'
                f'<button type="submit" data-testid="{esc(tid)}">{esc(label or action)}</button></form>')

    def charts(self, view: View) -> str:
        samples = self.history.snapshot()
        now = time.time()
        queues = sorted(samples[-1][1]) if samples else []
        links = [f'<a href="{esc(view.url(queue=""))}"{" class=current" if view.queue is None else ""}>all queues</a>']
        links += [f'<a href="{esc(view.url(queue=q))}"{" class=current" if view.queue == q else ""}>{esc(q)}</a>'
                  for q in queues]
        span = span_of(samples, now)
        since = ""
        if samples and samples[0][0] > now - 3500:
            since = f" (sampled since {_dt.datetime.fromtimestamp(samples[0][0]).strftime('%H:%M:%S')}, when the dashboard started)"
        empty = f"no samples yet: the dashboard samples every {self.history.every:g} s from its start"
        which = view.queue or "all queues"
        parts = [f'<p class="chart-nav">{" · ".join(links)}</p>',
                 '<div class="charts">',
                 svg_chart("chart-depth", f"Queue depth, {which}: items", depth_series(samples, view.queue), now, span, empty)]
        if self.history.counters:
            parts.append(svg_chart("chart-throughput", f"Throughput, {which}: items per second",
                                   rate_series(samples, view.queue), now, span, empty))
        else:
            parts.append(note("throughput needs claim.metrics(), which this role may not call (pg_monitor or claim_admin may)"))
        parts.append("</div>")
        if self.history.error:
            parts.append(note(f"the last sample failed: {self.history.error}", "err"))
        return section("charts", f"Last hour{since}", "".join(parts))

    def queues(self, conn: "psycopg.Connection[Any]", admin: bool, view: View) -> str:
        cols, rows, refusal = self.query(conn, "SELECT * FROM claim.metrics()")
        if refusal:
            cols, rows, refusal2 = self.query(conn, "SELECT * FROM claim.queue_stats ORDER BY queue")
            refusal = refusal2 and f"{refusal}; {refusal2}"
            cols = [{"claimed": "in_flight", "dead": "dead_items"}.get(c, c) for c in cols]
        if refusal:
            return section("queues", "Queues", note(refusal))
        rates = self.history.rates()
        gauges = [c for c in ("ready", "scheduled", "in_flight", "waiting", "dead_items", "oldest_ready_age", "paused")
                  if c in cols]
        labels = {"in_flight": "in flight", "dead_items": "dead", "oldest_ready_age": "oldest ready"}
        counters = [c for c in COUNTERS if c in cols]
        head = ["queue"] + (["actions"] if admin else []) + [labels.get(c, c) for c in gauges] + \
               ([f"{c}/s" for c in RATES] if counters else [])
        body, totals = [], []
        for r in rows:
            d = dict(zip(cols, r))
            q = d["queue"]
            cells = [f'<td data-col="queue"><a href="{esc(view.url(queue=q))}">{esc(q)}</a></td>']
            if admin:
                paused = bool(d.get("paused"))
                act = self.button("resume" if paused else "pause", q, view)
                if d.get("dead_items"):
                    act += self.button("redrive", q, view, None, "redrive all")
                cells.append(f'<td class="actions">{act}</td>')
            cells += [f'<td data-col="{c}">{esc(d[c])}</td>' for c in gauges]
            if counters:
                qr = rates.get(q, {})
                cells += [f'<td data-col="{c}_rate">{"" if qr.get(c) is None else f"{qr[c]:.1f}"}</td>'
                          for c in RATES]
                totals.append(f'<tr data-queue="{esc(q)}"><td>{esc(q)}</td>' +
                              "".join(f'<td data-col="{c}_total">{esc(d[c])}</td>' for c in counters) +
                              (f'<td data-col="waiters">{esc(d["waiters"])}</td>' if "waiters" in cols else "") +
                              "</tr>")
            body.append(f'<tr data-queue="{esc(q)}">' + "".join(cells) + "</tr>")
        out = table(head, body)
        if counters and rows and all(dict(zip(cols, r))[c] is None for r in rows for c in counters):
            # claim.metrics() counts in shared memory, which only the preload sets up.
            out = note("claim.metrics() counters are NULL: pg_claim is not in shared_preload_libraries "
                       "(add it and restart the server). Without it there is no throughput, no "
                       "schedules, no rate limits, and waits poll instead of being woken.",
                       "err") + out
        if totals:
            out += ('<details id="counters"><summary>Counters since the server started</summary>' +
                    table(["queue"] + list(counters) + (["waiters"] if "waiters" in cols else []), totals) +
                    "</details>")
        return section("queues", f"Queues ({len(rows)})", out)

    def dead_rows(self, conn: "psycopg.Connection[Any]", view: View) -> Tuple[List[tuple], Optional[str]]:
        """Up to ROW_LIMIT + 1 dead items, newest id first, below the page's
        keyset. Each queue's are read by one statement with its queue_id as a
        value, which the index on (queue_id, id) of dead items answers at
        once; a role that cannot read claim.items (or a pg_claim whose table
        differs) gets the view instead."""
        n = ROW_LIMIT + 1
        _, queues, refusal = self.query(
            conn, "SELECT queue_id, name FROM claim.queues WHERE %(q)s::text IS NULL OR name = %(q)s",
            {"q": view.queue})
        if refusal is None:
            rows: List[tuple] = []
            try:
                for qid, name in queues:
                    rows += conn.execute(
                        "SELECT %s::text, id, failures, last_error, died_at, payload FROM claim.items "
                        "WHERE queue_id = %s AND state = 'd' AND (%s::bigint IS NULL OR id < %s) "
                        "ORDER BY id DESC LIMIT %s", (name, qid, view.dead_before, view.dead_before, n)).fetchall()
                rows.sort(key=lambda r: r[1], reverse=True)
                return rows[:n], None
            except psycopg.Error:   # no SELECT on claim.items, or another layout of it
                pass
        _, rows, refusal = self.query(
            conn, "SELECT queue, id, attempts, last_error, died_at, payload FROM claim.dead_items "
                  "WHERE (%(q)s::text IS NULL OR queue = %(q)s) AND (%(before)s::bigint IS NULL OR id < %(before)s) "
                  "ORDER BY id DESC LIMIT %(n)s", {"q": view.queue, "before": view.dead_before, "n": n})
        return rows, refusal

    def dead(self, conn: "psycopg.Connection[Any]", admin: bool, view: View) -> str:
        """The dead items of the queue filter (all queues without one), newest
        id first, ROW_LIMIT a page; the next page starts below the last id
        shown (keyset: each queue's rows come from its index on (queue, id),
        however many are dead)."""
        rows, refusal = self.dead_rows(conn, view)
        if refusal:
            return section("dead", "Dead items", note(refusal))
        more = len(rows) > ROW_LIMIT
        rows = rows[:ROW_LIMIT]
        head = ["queue", "id"] + (["actions"] if admin else []) + ["attempts", "last error", "died at", "payload"]
        body = []
        for q, i, attempts, error, died, payload in rows:
            act = (f'<td class="actions">{self.button("redrive", q, view, i)}{self.button("cancel", q, view, i)}</td>'
                   if admin else "")
            body.append(f'<tr data-queue="{esc(q)}" data-id="{i}"><td>{esc(q)}</td><td>{i}</td>{act}<td>{attempts}</td>'
                        f'<td class="error">{esc(error)}</td><td>{esc(died)}</td><td class="payload">{esc(payload)}</td></tr>')
        scope = f" of queue {view.queue}" if view.queue else ""
        nav = []
        if view.dead_before is not None:
            nav.append(f'<a id="dead-first" href="{esc(view.url(dead_before=""))}">newest</a>')
        if more:
            nav.append(f'<a id="dead-next" href="{esc(view.url(dead_before=rows[-1][1]))}">older</a>')
        shown = (f"{len(rows)} shown, newest id first" + (f", below id {view.dead_before}" if view.dead_before else "")
                 + ("; more are older" if more else ""))
        return section("dead", f"Dead items{esc(scope)}",
                       note(shown) + (f'<p class="pages">{" · ".join(nav)}</p>' if nav else "") + table(head, body))

    def claims(self, conn: "psycopg.Connection[Any]", admin: bool, view: View) -> str:
        cols, rows, refusal = self.query(
            conn, "SELECT queue, id, token, attempt, worker, claimed_at, lease_until, live "
                  "FROM claim.claimed_items ORDER BY lease_until, id LIMIT %s", (ROW_LIMIT,))
        if refusal:
            return section("claims", "Claims", note(refusal))
        head = ["queue", "id"] + (["actions"] if admin else []) + \
               ["token", "attempt", "worker", "claimed at", "lease until", "live"]
        body = []
        for q, i, token, attempt, worker, claimed, until, live in rows:
            act = f'<td class="actions">{self.button("cancel", q, view, i)}</td>' if admin else ""
            body.append(f'<tr data-queue="{esc(q)}" data-id="{i}"><td>{esc(q)}</td><td>{i}</td>{act}<td>{token}</td>'
                        f'<td>{attempt}</td><td>{esc(worker)}</td><td>{esc(claimed)}</td><td>{esc(until)}</td>'
                        f'<td>{"yes" if live else "expired"}</td></tr>')
        return section("claims", counted("Claims", rows), table(head, body))

    def finished(self, conn: "psycopg.Connection[Any]", view: View) -> str:
        if not self.exists(conn, "claim.finished_items"):
            return section("finished", "Finished items", note("not available in this version of pg_claim"))
        # Dead items have their own section (paged by id): here they would
        # make every page load sort all of them by finished_at.
        where, params = ("WHERE state <> 'dead' AND queue = %s ", [view.queue]) if view.queue \
            else ("WHERE state <> 'dead' ", [])
        cols, rows, refusal = self.query(
            conn, "SELECT queue, id, state, attempts, finished_at, result, error, payload "
                  f"FROM claim.finished_items {where}ORDER BY finished_at DESC, id DESC LIMIT %s",
            params + [ROW_LIMIT])
        title = "Finished items" + (f" of {view.queue}" if view.queue else "")
        if refusal:
            return section("finished", title, note(refusal))
        body = [f'<tr data-queue="{esc(q)}" data-id="{i}" data-state="{esc(st)}"><td>{esc(q)}</td><td>{i}</td>'
                f'<td>{esc(st)}</td><td>{esc(att)}</td><td>{esc(fin)}</td><td class="result">{esc(res)}</td>'
                f'<td class="error">{esc(error)}</td><td class="payload">{esc(payload)}</td></tr>'
                for q, i, st, att, fin, res, error, payload in rows]
        return section("finished", counted(title, rows),
                       note("completed and cancelled items while their queue retains them (retain); "
                            "dead items are in their own section")
                       + table(["queue", "id", "state", "attempts", "finished at", "result", "error", "payload"], body))

    def simple(self, conn: "psycopg.Connection[Any]", sid: str, title: str, rel: str, sql: str) -> str:
        if not self.exists(conn, rel):
            return section(sid, title, note("not available in this version of pg_claim"))
        cols, rows, refusal = self.query(conn, sql, (ROW_LIMIT,))
        if refusal:
            return section(sid, title, note(refusal))
        body = ["<tr>" + "".join(f"<td>{esc(v)}</td>" for v in r) + "</tr>" for r in rows]
        return section(sid, counted(title, rows), table(cols, body))

    # -- actions -------------------------------------------------------------
    @staticmethod
    def cancel(conn: "psycopg.Connection[Any]", queue: str, ident: int) -> int:
        """claim.cancel of one item, in the form this database's pg_claim has:
        cancel(queue, id) with cancel_many for arrays, or cancel(queue, ids[])."""
        one = conn.execute("SELECT pg_catalog.to_regprocedure('claim.cancel(text, bigint)') IS NOT NULL").fetchone()
        if one and one[0]:
            row = conn.execute("SELECT claim.cancel(%s::text, %s::bigint)", (queue, ident)).fetchone()
        else:
            row = conn.execute("SELECT claim.cancel(%s::text, %s::bigint[])", (queue, [ident])).fetchone()
        return int(row[0] or 0) if row else 0

    def act(self, form: Dict[str, str]) -> Tuple[int, str]:
        """Runs one button's action; (HTTP status, message)."""
        if not self.actions:
            return HTTPStatus.FORBIDDEN, "actions are disabled (--no-actions)"
        expected = self.csrf_for(form.get("_session", ""))
        if not expected or not secrets.compare_digest(form.get("csrf", ""), expected):
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
                    n = self.cancel(conn, queue, ident)
                    return HTTPStatus.OK, f"cancel {queue} #{ident}: {n} item(s) cancelled"
                if action == "pause":
                    client.pause(queue)
                    return HTTPStatus.OK, f"queue {queue} paused"
                client.resume(queue)
                return HTTPStatus.OK, f"queue {queue} resumed"
            except (pg_claim.PgClaimError, psycopg.Error) as exc:
                return HTTPStatus.CONFLICT, f"{action} {queue}: {exc}"


PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>pg_claim</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
{{meta}}
<style>
body { font: 14px/1.4 system-ui, sans-serif; margin: 1em 1.5em; color: #222; }
h1 { margin: 0 0 .2em; font-size: 1.5em; } h2 { font-size: 1.15em; margin: 1.2em 0 .4em; }
header p { margin: .2em 0; }
.scroll { max-width: 100%; overflow-x: auto; }
table { border-collapse: collapse; } th, td { border: 1px solid #ccc; padding: .2em .45em; text-align: left; vertical-align: top; }
th { background: #f3f3f3; white-space: nowrap; } td.error { color: #a00; max-width: 24em; overflow-wrap: anywhere; }
td.payload, td.result { font-family: monospace; font-size: 12px; max-width: 26em; overflow-wrap: anywhere; }
td.actions { white-space: nowrap; }
form.inline { display: inline; margin-right: .3em; } button { cursor: pointer; }
.msg { background: #e8f5e9; padding: .4em; } .err { background: #fdecea; padding: .4em; } .note { color: #777; }
.raw { color: #a60; }
.charts { display: flex; flex-wrap: wrap; gap: 1em; }
figure.chart { margin: 0; } figcaption { font-weight: 600; margin-bottom: .2em; }
.legend .key { margin-right: 1em; white-space: nowrap; } .legend svg { vertical-align: -1px; }
.chart-nav a.current { font-weight: 700; text-decoration: none; color: #222; }
details summary { cursor: pointer; margin: .5em 0; }
</style></head><body>
{{body}}
</body></html>
"""


SESSION_COOKIE = "pg_claim_session"


def host_allowed(header: Optional[str], allowed: Sequence[str]) -> bool:
    """Whether a request's Host header (name or address, with or without its
    port) is one the dashboard serves: a page read through another name (DNS
    rebinding) is refused."""
    if not header:
        return False
    host = header.strip().lower()
    if host.startswith("["):
        host = host[: host.find("]") + 1] if "]" in host else host
    elif host.count(":") == 1:
        host = host.split(":", 1)[0]
    return host in {a.lower() for a in allowed}


def make_handler(dash: Dashboard, allowed_hosts: Sequence[str] = ("127.0.0.1", "localhost", "[::1]")) -> type:
    class Handler(BaseHTTPRequestHandler):
        server_version = "pg_claim_dashboard"

        def log_message(self, fmt: str, *args: Any) -> None:
            if os.environ.get("PG_CLAIM_DASHBOARD_LOG"):
                super().log_message(fmt, *args)

        def host_ok(self) -> bool:
            if host_allowed(self.headers.get("Host"), allowed_hosts):
                return True
            self.send(421, "this dashboard does not serve that host name (see --allow-host)\n", "text/plain")
            return False

        def session(self) -> str:
            jar = self.headers.get("Cookie") or ""
            for part in jar.split(";"):
                name, _, value = part.strip().partition("=")
                if name == SESSION_COOKIE and 16 <= len(value) <= 64 and value.isalnum():
                    return value
            return ""

        def send(self, status: int, body: str, ctype: str = "text/html; charset=utf-8",
                 cookie: str = "") -> None:
            data = body.encode()
            self.send_response(status)
            if cookie:
                self.send_header("Set-Cookie", f"{SESSION_COOKIE}={cookie}; Path=/; HttpOnly; SameSite=Strict")
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.send_header("Cache-Control", "no-store")
            self.send_header("X-Frame-Options", "DENY")
            self.send_header("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'")
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if not self.host_ok():
                return
            url = urllib.parse.urlsplit(self.path)
            if url.path == "/healthz":
                self.send(200, "ok\n", "text/plain")
                return
            if url.path != "/":
                self.send(404, "not found\n", "text/plain")
                return
            qs = urllib.parse.parse_qs(url.query)
            view = View.from_query(qs, dash.refresh)
            session = self.session()
            new = "" if session else secrets.token_hex(16)
            view.csrf = dash.csrf_for(session or new)
            status, page = dash.render(view, qs.get("msg", [""])[0], qs.get("err", [""])[0])
            self.send(int(status), page, cookie=new)

        def do_POST(self) -> None:
            if not self.host_ok():
                return
            if urllib.parse.urlsplit(self.path).path != "/action":
                self.send(404, "not found\n", "text/plain")
                return
            length = min(int(self.headers.get("Content-Length") or 0), 65536)
            form = {k: v[0] for k, v in urllib.parse.parse_qs(self.rfile.read(length).decode()).items()}
            form["_session"] = self.session()   # the token must be this session's
            try:
                status, message = dash.act(form)
            except psycopg.Error as exc:
                status, message = HTTPStatus.SERVICE_UNAVAILABLE, f"database error: {exc}"
            if status == HTTPStatus.OK or status == HTTPStatus.CONFLICT:
                back = urllib.parse.urlsplit(form.get("back", "/"))
                qs = urllib.parse.parse_qs(back.query) if back.path == "/" and not back.netloc else {}
                view = View.from_query(qs, dash.refresh)
                key = "msg" if status == HTTPStatus.OK else "err"
                self.send_response(303)
                self.send_header("Location", view.url(**{key: message}))
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self.send(int(status), message + "\n", "text/plain")

    return Handler


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m pg_claim_dashboard",
                                 description="Web dashboard of pg_claim (one database).")
    ap.add_argument("--dsn", default=os.environ.get("PG_CLAIM_DSN", ""),
                    help="libpq connection string or URI (default: $PG_CLAIM_DSN, then libpq's PG* variables)")
    ap.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    ap.add_argument("--port", type=int, default=8080, help="port (default 8080; 0 picks a free one)")
    ap.add_argument("--sample", type=float, default=5.0,
                    help="seconds between samples of the queues for the charts and rates (default 5)")
    ap.add_argument("--refresh", type=int, default=DEFAULT_REFRESH,
                    help=f"seconds between automatic refreshes of the page (default {DEFAULT_REFRESH}; 0: off)")
    ap.add_argument("--no-actions", action="store_true", help="no buttons, whatever the role")
    ap.add_argument("--allow-host", action="append", default=[], metavar="NAME",
                    help="a host name (or address) the page may be reached by, besides the --host address, "
                         "localhost, 127.0.0.1 and [::1]; repeat for more")
    ap.add_argument("--statement-timeout", type=float, default=5.0, metavar="SECONDS",
                    help="statement_timeout of the dashboard's queries (default 5; 0: the server's)")
    args = ap.parse_args(argv)
    if args.sample <= 0:
        ap.error("--sample must be greater than 0")
    dash = Dashboard(args.dsn, actions=not args.no_actions, sample_every=args.sample, refresh=max(0, args.refresh),
                     statement_timeout=max(0.0, args.statement_timeout))
    listen = args.host if ":" not in args.host else f"[{args.host}]"
    allowed = [listen, "localhost", "127.0.0.1", "[::1]", *args.allow_host]
    try:
        with dash.connect() as conn:  # fail early on a bad DSN
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        print(f"pg_claim dashboard: cannot connect: {str(exc).strip()}", file=sys.stderr)
        return 2
    dash.history.start()
    httpd = ThreadingHTTPServer((args.host, args.port), make_handler(dash, allowed))
    print(f"pg_claim dashboard on http://{args.host}:{httpd.server_address[1]}/", flush=True)
    try:
        httpd.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        dash.history.stop.set()
        httpd.server_close()
    return 0
