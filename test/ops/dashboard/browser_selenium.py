#!/usr/bin/env python3
"""The pg_claim dashboard in a real browser: Debian's headless Chromium driven
through ChromeDriver (chromium-driver) by python3-selenium. The same checks as
browser.mjs; test/ops/dashboard_test.sh runs this one when playwright-core cannot
be installed from npm. Environment (set by test/ops/dashboard_test.sh):
  DASH_URL      dashboard connected as a member of claim_admin
  DASH_RO_URL   dashboard connected as a role without claim_admin
  EXPECT        JSON {queue: {column: value}} read from claim.metrics()
  DEAD_QUEUE, DEAD_ID   a dead item to redrive
  RELEASED_QUEUE, RELEASED_ID   an item given back with claim.release
  CLAIMED_ID    an item of DEAD_QUEUE under a live claim, to cancel
  ARTIFACTS     folder for the screenshots
Prints one "ok <what>" or "FAIL <what>: <why>" line per check. The page is
1366 px wide, a common laptop screen.
"""
import json
import os
import shutil
import sys
import tempfile
import time
import traceback
import urllib.error
import urllib.parse
import urllib.request

from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException, WebDriverException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

env = os.environ
expect = json.loads(env["EXPECT"])
WIDTH = 1366
results = []


def check(what, cond, why=""):
    results.append(bool(cond))
    print(f"ok    {what}" if cond else f"FAIL  {what}{': ' + why if why else ''}", flush=True)


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


def post_status(url, form):
    """Status of a form POST sent outside the page (no redirects followed)."""
    opener = urllib.request.build_opener(NoRedirect)
    data = urllib.parse.urlencode(form).encode()
    try:
        with opener.open(urllib.request.Request(url, data=data, method="POST"), timeout=30) as resp:
            return resp.status
    except urllib.error.HTTPError as e:
        return e.code


profile = tempfile.mkdtemp(prefix="pg_claim-chromium-")
# A fresh profile (--user-data-dir) per run, removed afterwards.
opts = webdriver.ChromeOptions()
opts.binary_location = "/usr/bin/chromium"
for arg in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            f"--window-size={WIDTH},900", f"--user-data-dir={profile}"):
    opts.add_argument(arg)
driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=opts)
driver.set_page_load_timeout(60)


def find_all(css):
    return driver.find_elements(By.CSS_SELECTOR, css)


def text(css):
    els = find_all(css)
    return els[0].get_attribute("innerText") if els else ""


def cell(queue, col):
    """A queue's gauge (#queues) or counter since server start (#counters)."""
    els = find_all(f':is(#queues, #counters) tr[data-queue="{queue}"] td[data-col="{col}"]')
    return els[0].get_attribute("textContent").strip() if els else "<no cell>"


def attr(css, name):
    els = find_all(css)
    return els[0].get_attribute(name) if els else None


def url(base, query):
    return urllib.parse.urljoin(base, query)


def rendered():
    try:
        return text("#rendered")
    except Exception:  # the page is being replaced
        return None


def screenshot(name):
    # Full page: grow the window to the document's height first.
    height = driver.execute_script(
        "return Math.max(document.body.scrollHeight, document.documentElement.scrollHeight)")
    driver.set_window_size(WIDTH, max(900, int(height) + 100))
    driver.save_screenshot(os.path.join(env["ARTIFACTS"], name))
    driver.set_window_size(WIDTH, 900)


def detached(element):
    """The element left the document (the page was replaced). ChromeDriver
    reports a node of a replaced document either as stale or, while the new
    one loads, as an inspector error about a node that does not belong to
    the document: both mean it is gone."""
    try:
        element.is_enabled()
        return False
    except StaleElementReferenceException:
        return True
    except WebDriverException as e:
        if "does not belong to the document" in str(e):
            return True
        raise


def submit(css):
    """Clicks a button that posts a form and waits for the page that follows."""
    old = driver.find_element(By.TAG_NAME, "html")
    driver.find_element(By.CSS_SELECTOR, css).click()
    WebDriverWait(driver, 30).until(lambda d: detached(old))
    WebDriverWait(driver, 30).until(
        lambda d: d.execute_script("return document.readyState") == "complete")


def nav_status():
    return driver.execute_script(
        "const n = performance.getEntriesByType('navigation')[0];"
        "return n ? n.responseStatus : null")


try:
    # 1. The page and its counts (auto-refresh off, so nothing reloads under the checks).
    driver.get(url(env["DASH_URL"], "/?refresh=0"))
    status = nav_status()
    check("the page loads (200)", status == 200, f"status {status}")
    check("the admin dashboard offers actions", "actions enabled" in text("#mode"))
    errors = [e.get_attribute("innerText") for e in find_all(".section-error")]
    check("no section failed", not errors, " | ".join(errors))
    for queue, cols in expect.items():
        for col, want in cols.items():
            got = cell(queue, col)
            check(f"queue {queue}: {col} = {want}", got == str(want), f'page shows "{got}"')
    dead_css = f'#dead tr[data-queue="{env["DEAD_QUEUE"]}"][data-id="{env["DEAD_ID"]}"]'
    dead = find_all(dead_css)
    check("the dead item is listed with its error",
          len(dead) == 1 and len(text(dead_css + " td.error")) > 0)
    check("claims are listed with their leases", len(find_all("#claims tbody tr")) > 0)
    check("the released item is not listed as claimed",
          not find_all(f'#claims tr[data-queue="{env["RELEASED_QUEUE"]}"][data-id="{env["RELEASED_ID"]}"]'))
    check("blocked groups are listed", len(find_all("#blocked-groups tbody tr")) > 0)
    check("leases are listed", len(find_all("#leases tbody tr")) > 0)
    check("schedules are listed", len(find_all("#schedules tbody tr")) > 0)

    # 2. Finished items with their results.
    done = find_all('#finished tr[data-state="completed"]')
    check("finished items: a completed item with its result",
          done and '"rows":42' in text('#finished tr[data-state="completed"] td.result'), f"{len(done)} completed rows")
    check("finished items: the cancelled item", len(find_all('#finished tr[data-state="cancelled"]')) == 1)
    check("finished items: dead items are in their own section only", len(find_all('#finished tr[data-state="dead"]')) == 0)

    # 3. Charts of the last hour: a line per series, the last point the gauge of the table.
    ready_all = sum(int(e.get_attribute("textContent")) for e in find_all('#queues td[data-col="ready"]'))
    depth_ready = '#chart-depth polyline[data-series="ready"]'
    points = attr(depth_ready, "data-points")
    check("depth chart: a line of ready items with at least two samples", int(points or 0) >= 2, f"data-points {points}")
    last = attr(depth_ready, "data-last")
    check("depth chart: its last point is the ready count of all queues", last == str(ready_all), f"{last} vs {ready_all}")
    for s in ("in_flight", "scheduled", "dead_items"):
        check(f"depth chart: a line of {s}", len(find_all(f'#chart-depth polyline[data-series="{s}"]')) == 1)
    for s in ("enqueued", "completed", "failed"):
        check(f"throughput chart: a line of {s}/s with points",
              int(attr(f'#chart-throughput polyline[data-series="{s}"]', "data-points") or 0) >= 1)
    check("the charts are drawn (svg with axes)",
          len(find_all("#chart-depth > svg text")) >= 10 and len(find_all("#chart-throughput > svg")) == 1)
    links = [a for a in find_all("#charts .chart-nav a") if a.get_attribute("textContent") == env["DEAD_QUEUE"]]
    if links:
        old = driver.find_element(By.TAG_NAME, "html")
        links[0].click()
        WebDriverWait(driver, 30).until(lambda d: detached(old))
    check(f"depth chart of queue {env['DEAD_QUEUE']} alone",
          links and attr(depth_ready, "data-last") == cell(env["DEAD_QUEUE"], "ready"),
          f"{attr(depth_ready, 'data-last')} vs {cell(env['DEAD_QUEUE'], 'ready')}")
    driver.get(url(env["DASH_URL"], "/?refresh=0"))

    # 4. At 1366 px every action button is on screen, and the page does not scroll sideways.
    off = [b.get_attribute("data-testid") for b in find_all("#queues button, #dead button, #claims button")
           if b.rect["x"] < 0 or b.rect["x"] + b.rect["width"] > WIDTH]
    n = len(find_all("#queues button, #dead button, #claims button"))
    check(f"all {n} action buttons are within {WIDTH} px", n > 0 and not off, f"off screen: {' '.join(off)}")
    scroll_width = driver.execute_script("return document.documentElement.scrollWidth")
    check(f"the page is not wider than {WIDTH} px", scroll_width <= WIDTH, f"scrollWidth {scroll_width}")
    screenshot("dashboard.png")

    # 5. Auto-refresh reloads the page, and stops when paused.
    driver.get(url(env["DASH_URL"], "/?refresh=4"))
    check("auto-refresh is on by its link", "every 4 s" in text("#refresh-state"))
    submit("#refresh-toggle")
    check("pausing says so", "paused" in text("#refresh-state"))
    paused = rendered()
    time.sleep(5)
    check("a paused page is not reloaded", rendered() == paused)
    driver.get(url(env["DASH_URL"], "/?refresh=1"))
    first = rendered()
    reloaded = False
    for _ in range(40):
        time.sleep(0.25)
        now = rendered()
        if now is not None and now != first:
            reloaded = True
            break
    check("auto-refresh reloads the page", reloaded)
    driver.get(url(env["DASH_URL"], "/?refresh=0"))

    # 6. Redrive the dead item: it leaves the dead list and is ready again.
    ready_before = int(cell(env["DEAD_QUEUE"], "ready"))
    submit(f'[data-testid="redrive-{env["DEAD_QUEUE"]}-{env["DEAD_ID"]}"]')
    msg = text("#msg")
    check("redrive reports one item ready again", "1 item(s) ready again" in msg, f'message "{msg}"')
    check("after an action the page stays without auto-refresh", "paused" in text("#refresh-state"))
    check("the item left the dead items", len(find_all(dead_css)) == 0)
    ready_after = int(cell(env["DEAD_QUEUE"], "ready"))
    check("the queue has one more ready item", ready_after == ready_before + 1,
          f"ready {ready_before} -> {ready_after}")
    screenshot("dashboard-after-redrive.png")

    # 7. Pause and resume a queue.
    submit(f'[data-testid="pause-{env["DEAD_QUEUE"]}"]')
    check("pause shows the queue paused", cell(env["DEAD_QUEUE"], "paused") == "yes")
    submit(f'[data-testid="resume-{env["DEAD_QUEUE"]}"]')
    check("resume shows it running", cell(env["DEAD_QUEUE"], "paused") == "no")

    # 8. Cancel a claimed item: its claim goes.
    claim_css = f'#claims tr[data-queue="{env["DEAD_QUEUE"]}"][data-id="{env["CLAIMED_ID"]}"]'
    check("the claimed item is listed", len(find_all(claim_css)) == 1)
    submit(f'[data-testid="cancel-{env["DEAD_QUEUE"]}-{env["CLAIMED_ID"]}"]')
    cmsg = text("#msg")
    check("cancel reports one item cancelled", "1 item(s) cancelled" in cmsg, f'message "{cmsg}"')
    check("the cancelled item is no longer claimed", len(find_all(claim_css)) == 0)

    # 9. A role without claim_admin: no buttons, and a POST is refused.
    driver.get(url(env["DASH_RO_URL"], "/?refresh=0"))
    check("the read-only dashboard says so", "read only" in text("#mode"))
    check("the read-only dashboard has no buttons", len(find_all("button")) == 0)
    check("the read-only dashboard draws the depth chart",
          len(find_all('#chart-depth polyline[data-series="ready"]')) == 1)
    denied = post_status(urllib.parse.urljoin(env["DASH_RO_URL"], "/action"),
                         {"action": "redrive", "queue": env["DEAD_QUEUE"], "csrf": "x"})
    check("a POST to the read-only dashboard is refused (403)", denied == 403, f"status {denied}")
    # The admin dashboard refuses a form without its token (another site's form).
    forged = post_status(urllib.parse.urljoin(env["DASH_URL"], "/action"),
                         {"action": "pause", "queue": env["DEAD_QUEUE"], "csrf": "forged"})
    check("a POST without the page token is refused (403)", forged == 403, f"status {forged}")
except Exception:
    check("the browser run", False, traceback.format_exc())
finally:
    driver.quit()
    shutil.rmtree(profile, ignore_errors=True)
sys.exit(0 if all(results) else 1)
