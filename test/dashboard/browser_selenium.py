#!/usr/bin/env python3
"""The pg_claim dashboard in a real browser: Debian's headless Chromium driven
through ChromeDriver (chromium-driver) by python3-selenium. The same checks as
browser.mjs; test/dashboard_test.sh runs this one when playwright-core cannot
be installed from npm. Environment (set by test/dashboard_test.sh):
  DASH_URL      dashboard connected as a member of claim_admin
  DASH_RO_URL   dashboard connected as a role without claim_admin
  EXPECT        JSON {queue: {column: value}} read from claim.metrics()
  DEAD_QUEUE, DEAD_ID   a dead item to redrive
  ARTIFACTS     folder for the screenshots
Prints one "ok <what>" or "FAIL <what>: <why>" line per check.
"""
import json
import os
import shutil
import sys
import tempfile
import traceback
import urllib.error
import urllib.parse
import urllib.request

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as EC
from selenium.webdriver.support.ui import WebDriverWait

env = os.environ
expect = json.loads(env["EXPECT"])
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
            "--window-size=1500,1000", f"--user-data-dir={profile}"):
    opts.add_argument(arg)
driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=opts)
driver.set_page_load_timeout(60)


def find_all(css):
    return driver.find_elements(By.CSS_SELECTOR, css)


def text(css):
    els = find_all(css)
    return els[0].get_attribute("innerText") if els else ""


def cell(queue, col):
    return text(f'#queues tr[data-queue="{queue}"] td[data-col="{col}"]').strip()


def screenshot(name):
    # Full page: grow the window to the document's height first.
    height = driver.execute_script(
        "return Math.max(document.body.scrollHeight, document.documentElement.scrollHeight)")
    driver.set_window_size(1500, max(1000, int(height) + 100))
    driver.save_screenshot(os.path.join(env["ARTIFACTS"], name))
    driver.set_window_size(1500, 1000)


def submit(css):
    """Clicks a button that posts a form and waits for the page that follows."""
    old = driver.find_element(By.TAG_NAME, "html")
    driver.find_element(By.CSS_SELECTOR, css).click()
    WebDriverWait(driver, 30).until(EC.staleness_of(old))
    WebDriverWait(driver, 30).until(
        lambda d: d.execute_script("return document.readyState") == "complete")


def nav_status():
    return driver.execute_script(
        "const n = performance.getEntriesByType('navigation')[0];"
        "return n ? n.responseStatus : null")


try:
    # 1. The page and its counts.
    driver.get(env["DASH_URL"])
    status = nav_status()
    check("the page loads (200)", status == 200, f"status {status}")
    check("the admin dashboard offers actions", "actions enabled" in text("#mode"))
    for queue, cols in expect.items():
        for col, want in cols.items():
            got = cell(queue, col)
            check(f"queue {queue}: {col} = {want}", got == str(want), f'page shows "{got}"')
    dead_css = f'#dead tr[data-queue="{env["DEAD_QUEUE"]}"][data-id="{env["DEAD_ID"]}"]'
    dead = find_all(dead_css)
    check("the dead item is listed with its error",
          len(dead) == 1 and len(text(dead_css + " td.error")) > 0)
    check("claims are listed with their leases", len(find_all("#claims tbody tr")) > 0)
    check("blocked groups are listed", len(find_all("#blocked-groups tbody tr")) > 0)
    check("leases are listed", len(find_all("#leases tbody tr")) > 0)
    screenshot("dashboard.png")

    # 2. Redrive the dead item: it leaves the dead list and is ready again.
    ready_before = int(cell(env["DEAD_QUEUE"], "ready"))
    submit(f'[data-testid="redrive-{env["DEAD_QUEUE"]}-{env["DEAD_ID"]}"]')
    msg = text("#msg")
    check("redrive reports one item ready again", "1 item(s) ready again" in msg, f'message "{msg}"')
    check("the item left the dead items", len(find_all(dead_css)) == 0)
    ready_after = int(cell(env["DEAD_QUEUE"], "ready"))
    check("the queue has one more ready item", ready_after == ready_before + 1,
          f"ready {ready_before} -> {ready_after}")
    screenshot("dashboard-after-redrive.png")

    # 3. Pause and resume a queue.
    submit(f'[data-testid="pause-{env["DEAD_QUEUE"]}"]')
    check("pause shows the queue paused", cell(env["DEAD_QUEUE"], "paused") == "yes")
    submit(f'[data-testid="resume-{env["DEAD_QUEUE"]}"]')
    check("resume shows it running", cell(env["DEAD_QUEUE"], "paused") == "no")

    # 4. A role without claim_admin: no buttons, and a POST is refused.
    driver.get(env["DASH_RO_URL"])
    check("the read-only dashboard says so", "read only" in text("#mode"))
    check("the read-only dashboard has no buttons", len(find_all("button")) == 0)
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
