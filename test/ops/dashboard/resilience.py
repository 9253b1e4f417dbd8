#!/usr/bin/env python3
"""The dashboard never fails as a whole: run by test/ops/dashboard_test.sh with
ops/dashboard on PYTHONPATH. Environment:
  OLD_DSN       a database on pg_claim 0.2.0 whose claimed_items holds an item
                given back with release (lease_until -infinity, which psycopg
                cannot load into a datetime)
  OLD_RELEASED  that item's id
  DSN           a database on the current version
Prints one "ok <what>" or "FAIL <what>: <why>" line per check.
"""
import contextlib
import io
import os
import re
import sys
import traceback

import psycopg

from pg_claim_dashboard import Dashboard, View

results = []
SECTIONS = ("charts", "queues", "fair-keys", "dead", "claims", "finished", "steps", "blocked-groups", "leases",
            "schedules")


def check(what, cond, why=""):
    results.append(bool(cond))
    print(f"ok    {what}" if cond else f"FAIL  {what}{': ' + why if why else ''}", flush=True)


def section_html(page, sid):
    m = re.search(rf'<section id="{sid}"[^>]*>.*?</section>', page, re.S)
    return m.group(0) if m else ""


try:
    # 1. A row that psycopg cannot load (pg_claim 0.2.0 lists a released claim).
    with psycopg.connect(os.environ["OLD_DSN"], autocommit=True) as conn:
        try:
            conn.execute("SELECT * FROM claim.claimed_items").fetchall()
            loaded = "loaded"
        except psycopg.DataError as exc:
            loaded = f"DataError: {exc}"
    check("0.2.0: psycopg cannot load claimed_items with a released claim (the row the page must survive)",
          loaded.startswith("DataError"), loaded)
    status, page = Dashboard(os.environ["OLD_DSN"]).render(View(None, 0))
    check("0.2.0: the page answers 200", status == 200, f"status {status}")
    missing = [s for s in SECTIONS if not section_html(page, s)]
    check("0.2.0: every section is shown", not missing, f"missing {missing}")
    row = re.search(rf'<tr[^>]*data-id="{os.environ["OLD_RELEASED"]}".*?</tr>', section_html(page, "claims"), re.S)
    check("0.2.0: the released claim is shown with the server's text for -infinity",
          row is not None and "-infinity" in row.group(0), row.group(0) if row else "no row")
    check("0.2.0: no section failed", "could not show this section" not in page)
    with psycopg.connect(os.environ["OLD_DSN"], autocommit=True) as conn:
        n = Dashboard.cancel(conn, "old", int(os.environ["OLD_RELEASED"]))
    check("0.2.0: the cancel button's call (claim.cancel with an array) cancels the item", n == 1, f"{n}")

    # 2. Sections that fail: the others are shown, the failed ones say why.
    class Broken(Dashboard):
        def finished(self, conn, view):
            conn.execute("SELECT 1 / 0").fetchall()
            return ""

        def dead(self, conn, admin, view):
            raise ValueError("a value the page cannot show")

    log = io.StringIO()
    with contextlib.redirect_stderr(log):
        status, page = Broken(os.environ["DSN"]).render(View(None, 0))
    check("failing sections: the page's own error goes to the log with its traceback",
          "Traceback" in log.getvalue() and "ValueError" in log.getvalue(), log.getvalue()[-200:])
    check("failing sections: the page answers 200", status == 200, f"status {status}")
    fin, dead = section_html(page, "finished"), section_html(page, "dead")
    check("failing sections: finished items says why (the database error)",
          "could not show this section" in fin and "division by zero" in fin, fin[:300])
    check("failing sections: dead items says why (the page's own error)",
          "could not show this section" in dead and "ValueError" in dead, dead[:300])
    check("failing sections: the queues are shown",
          "<table>" in section_html(page, "queues") and "could not" not in section_html(page, "queues"))
    check("failing sections: the claims, leases and schedules are shown",
          all("could not" not in section_html(page, s) and section_html(page, s) for s in ("claims", "leases", "schedules")))

    # 3. Without shared_preload_libraries claim.metrics() counts nothing: its
    # counters are NULL, and the queues section says why, in red (a preloaded
    # server, as here, shows no such line).
    class NoPreload(Dashboard):
        def query(self, conn, sql, params=()):
            cols, rows, refusal = Dashboard.query(conn, sql, params)
            if "claim.metrics()" in sql and not refusal:
                counters = {"enqueued", "claimed", "completed", "failed", "dead", "expired", "cancelled"}
                rows = [tuple(None if c in counters else v for c, v in zip(cols, r)) for r in rows]
            return cols, rows, refusal

    status, page = Dashboard(os.environ["DSN"]).render(View(None, 0))
    check("preloaded: no missing-preload line", "shared_preload_libraries" not in section_html(page, "queues"))
    status, page = NoPreload(os.environ["DSN"]).render(View(None, 0))
    q = section_html(page, "queues")
    check("no preload: the queues section says that pg_claim is not preloaded",
          status == 200 and 'class="err"' in q and "not in shared_preload_libraries" in q, q[:300])

    # 4. No database: a page that says so (503), not a traceback.
    status, page = Dashboard("host=/nonexistent port=1 connect_timeout=2").render(View(None, 10))
    check("no database: 503 with a page that says so and refreshes itself",
          status == 503 and "database unreachable" in page and 'http-equiv="refresh"' in page, f"status {status}")
except Exception:
    check("the resilience run", False, traceback.format_exc())
sys.exit(0 if all(results) else 1)
