"""The dashboard's defences and its dead-items page under many dead items,
over HTTP (no browser): run by test/ops/dashboard_test.sh, or by hand:

    PG_CLAIM_DSN=postgresql://... DASHBOARD_DEAD_ITEMS=1000000 \\
        python3 test/ops/dashboard/hardening.py

It needs a superuser DSN (it makes dead items directly in claim.items) and
checks, printing one "ok"/"FAIL" line each:
  - a request whose Host is not an allowed name is refused (421), GET and POST;
  - form tokens are per session: a token from one session's page is refused
    with another session's cookie, accepted with its own;
  - the dashboard's connections run with its statement_timeout;
  - DASHBOARD_DEAD_ITEMS dead items (20000 by default, 1000000 by hand): the
    page loads in under a second, the dead-items section shows 200 rows and
    an "older" link, the next page continues below the last id shown, and
    the queue filter applies to the section.
Exits non-zero on a failure; the last line is "hardening: N passed, N failed".
"""
from __future__ import annotations

import http.client
import os
import re
import subprocess
import sys
import time
import urllib.parse
import uuid

import psycopg

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
DSN = os.environ["PG_CLAIM_DSN"]
N = int(os.environ.get("DASHBOARD_DEAD_ITEMS", "20000"))
passed = failed = 0


def check(what: str, ok: bool, detail: str = "") -> None:
    global passed, failed
    if ok:
        passed += 1
        print(f"ok   {what}")
    else:
        failed += 1
        print(f"FAIL {what} {detail}")


def request(port: int, method: str, path: str, host: str = "127.0.0.1", body: str = "",
            cookie: str = "") -> "tuple[int, dict, str, float]":
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    headers = {"Host": host}
    if cookie:
        headers["Cookie"] = cookie
    if body:
        headers["Content-Type"] = "application/x-www-form-urlencoded"
    t0 = time.monotonic()
    conn.request(method, path, body=body or None, headers=headers)
    resp = conn.getresponse()
    text = resp.read().decode()
    took = time.monotonic() - t0
    conn.close()
    return resp.status, dict(resp.getheaders()), text, took


def dead_section(page: str) -> str:
    return page.split('<section id="dead">', 1)[-1].split("</section>", 1)[0]


def main() -> int:
    big, small = "hd_" + uuid.uuid4().hex[:8], "hs_" + uuid.uuid4().hex[:8]
    with psycopg.connect(DSN, autocommit=True) as c:
        for q in (big, small):
            c.execute("SELECT claim.create_queue(%s)", (q,))
        t0 = time.monotonic()
        c.execute("INSERT INTO claim.items (queue_id, state, failures, last_error, died_at, payload) "
                  "SELECT q.queue_id, 'd', 3, 'boom ' || g, pg_catalog.now(), '{}' "
                  "FROM claim.queues q, pg_catalog.generate_series(1, %s) g WHERE q.name = %s", (N, big))
        c.execute("INSERT INTO claim.items (queue_id, state, failures, last_error, died_at, payload) "
                  "SELECT q.queue_id, 'd', 1, 'small', pg_catalog.now(), '{}' "
                  "FROM claim.queues q, pg_catalog.generate_series(1, 3) g WHERE q.name = %s", (small,))
        c.execute("ANALYZE claim.items")
        print(f"     {N} dead items made in {time.monotonic() - t0:.1f} s")
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "ops", "dashboard"))
    proc = subprocess.Popen([sys.executable, "-m", "pg_claim_dashboard", "--dsn", DSN, "--port", "0",
                             "--refresh", "0", "--statement-timeout", "3"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        m = re.search(r":(\d+)/", line)
        if not m:
            check("the dashboard starts", False, line + proc.stdout.read())
            return 1
        port = int(m.group(1))
        status, _, _, _ = request(port, "GET", "/", host="attacker.example")
        check("GET with a foreign Host is refused", status == 421, str(status))
        status, _, _, _ = request(port, "POST", "/action", host="attacker.example:8080",
                                  body="action=pause&queue=" + small)
        check("POST with a foreign Host is refused", status == 421, str(status))
        status, headers, page_a, _ = request(port, "GET", "/", host=f"localhost:{port}")
        cookie_a = headers.get("Set-Cookie", "").split(";")[0]
        token_a = re.search(r'name="csrf" value="([^"]+)"', page_a)
        check("a page sets a session cookie and carries its form token", bool(cookie_a and token_a),
              str(headers))
        status, headers, page_b, _ = request(port, "GET", "/")
        cookie_b = headers.get("Set-Cookie", "").split(";")[0]
        token_b = re.search(r'name="csrf" value="([^"]+)"', page_b)
        check("each session has its own token", bool(token_a and token_b and token_a.group(1) != token_b.group(1)))
        if token_a:
            form = urllib.parse.urlencode({"action": "pause", "queue": small, "csrf": token_a.group(1)})
            status, _, _, _ = request(port, "POST", "/action", body=form, cookie=cookie_b)
            check("session A's token is refused with session B's cookie", status == 403, str(status))
            status, _, _, _ = request(port, "POST", "/action", body=form, cookie=cookie_a)
            check("session A's token is accepted with its own cookie", status == 303, str(status))
            status, _, _, _ = request(port, "POST", "/action", body=form)
            check("a token without its cookie is refused", status == 403, str(status))
        with psycopg.connect(DSN, autocommit=True) as c:
            row = c.execute("SELECT count(*) FROM pg_catalog.pg_stat_activity a "
                            "WHERE a.application_name = '' AND a.pid <> pg_backend_pid()").fetchone()
        # The timeout itself: the dashboard's connect() sets it on each connection.
        sys.path.insert(0, os.path.join(ROOT, "ops", "dashboard"))
        import pg_claim_dashboard as d
        dash = d.Dashboard(DSN, statement_timeout=3)
        with dash.connect() as c:
            value = c.execute("SHOW statement_timeout").fetchone()[0]
        check("the dashboard's connections have statement_timeout 3 s", value == "3s", value)
        request(port, "GET", "/")   # warm
        times = []
        for _ in range(3):
            status, _, page, took = request(port, "GET", "/", cookie=cookie_a)
            times.append(took)
        best = min(times)
        rows = dead_section(page).count("<tr data-queue=")
        check(f"the page with {N} dead items loads in under a second ({best * 1000:.0f} ms)",
              status == 200 and best < 1.0, f"{times}")
        check("the dead-items section shows one page of 200 and says more are older",
              rows == 200 and 'id="dead-next"' in page, f"rows {rows}")
        nxt = re.search(r'id="dead-next" href="([^"]+)"', page)
        ids = [int(i) for i in re.findall(r'<tr data-queue="' + big + r'" data-id="(\d+)"', dead_section(page))]
        if nxt and ids:
            status, _, page2, took2 = request(port, "GET", nxt.group(1).replace("&amp;", "&"), cookie=cookie_a)
            ids2 = [int(i) for i in re.findall(r'<tr data-queue="' + big + r'" data-id="(\d+)"',
                                               dead_section(page2))]
            check(f"the next page continues below the last id shown ({took2 * 1000:.0f} ms)",
                  bool(ids2) and max(ids2) < min(ids) and len(ids2) == min(200, N - len(ids)), f"{len(ids2)}")
        status, _, page3, _ = request(port, "GET", "/?queue=" + small, cookie=cookie_a)
        dead3 = dead_section(page3)
        check("the queue filter applies to the dead items",
              dead3.count("<tr data-queue=") == 3 and big not in dead3, dead3[:300])
    finally:
        proc.terminate()
        proc.wait(10)
        with psycopg.connect(DSN, autocommit=True) as c:
            for q in (big, small):
                c.execute("SELECT claim.drop_queue(%s)", (q,))
    print(f"hardening: {passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
