#!/usr/bin/env bash
# test/ops/dashboard_test.sh — the web dashboard (ops/dashboard) in a real browser.
#
# Run as root, after test/setup.sh installed the extension:
#
#   bash test/ops/dashboard_test.sh
#
#   1. installs what is missing: python3-psycopg, chromium (Debian's headless
#      browser), nodejs/npm, and playwright-core and pg (node-postgres) from
#      npm into test/ops/dashboard/node_modules (it drives /usr/bin/chromium; no
#      browser download). When npm cannot install them (no registry, or a
#      proxy whose certificate is not trusted), it installs Debian's
#      chromium-driver and python3-selenium instead, and takes Debian's
#      node-pg;
#   2. starts a throwaway cluster as the unprivileged user "pgclaim" with
#      shared_preload_libraries = 'pg_claim' and a known workload: ready,
#      scheduled, claimed and dead items, a blocked group, a lease, a
#      schedule, and in a retaining queue a completed item with its result,
#      an expired lease, an item given back with release, a cancelled item,
#      then the queue paused; and a second database on pg_claim 0.2.0 whose
#      claimed_items lists a released claim with lease_until -infinity;
#   3. reads every view of the extension with psycopg
#      (test/ops/dashboard/views_read.py) and node-postgres (views_read.mjs), and
#      checks that the dashboard never fails as a whole
#      (test/ops/dashboard/resilience.py: the 0.2.0 database, sections that
#      fail, no database);
#   4. starts the dashboard twice, as a member of claim_admin and as a role
#      with only pg_monitor and claim_worker;
#   5. test/ops/dashboard/browser.mjs (playwright-core), or
#      test/ops/dashboard/browser_selenium.py (ChromeDriver) with the same checks,
#      loads the page 1366 px wide in headless Chromium, checks the counts,
#      the charts of the last hour, the finished items with their results,
#      that every action button is on screen, that auto-refresh reloads the
#      page and stops when paused; clicks redrive on a dead item and sees it
#      ready again, pauses and resumes a queue, cancels a claimed item, and
#      checks that the read-only dashboard has no buttons and refuses a POST;
#      the database confirms the items' states.
# Screenshots (kept): test/artifacts/dashboard.png (the page as first shown,
# charts included) and test/artifacts/dashboard-after-redrive.png.
# The last line is "dashboard: N passed, N failed". Servers are stopped and
# the scratch directory removed on exit (DASHBOARD_KEEP=1 keeps it).
# DASHBOARD_DRIVER=selenium uses ChromeDriver without trying npm.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
# shellcheck source=lib/cluster.sh
. "$ROOT/test/lib/cluster.sh"
PY=/usr/bin/python3
ARTIFACTS="$ROOT/test/artifacts"
CL_KEEP=${DASHBOARD_KEEP:-${CL_KEEP:-0}}
PIDS=()
harness_cleanup() {
    local pid
    for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null; done
    return 0
}
fail_setup() { fail "$*"; exit 1; }
harness dashboard

# --- 1. what it needs -----------------------------------------------------------
need_packages python3-psycopg chromium iproute2 || fail_setup "could not install python3-psycopg, chromium"
# a node from elsewhere (e.g. NodeSource) brings its own npm: only what is missing
missing=()
command -v node >/dev/null 2>&1 || missing+=(nodejs)
command -v npm >/dev/null 2>&1 || missing+=(npm)
if ((${#missing[@]})); then need_packages "${missing[@]}" || fail_setup "could not install ${missing[*]}"; fi
DRIVER=playwright
if [[ "${DASHBOARD_DRIVER:-}" == selenium ]]; then
    DRIVER=selenium
elif [[ ! -f "$ROOT/test/ops/dashboard/node_modules/playwright-core/package.json" ||
        ! -f "$ROOT/test/ops/dashboard/node_modules/pg/package.json" ]]; then
    say "npm: playwright-core, pg"
    if ! (cd "$ROOT/test/ops/dashboard" && timeout 300 npm ci --no-audit --no-fund --loglevel=error); then
        say "npm could not install playwright-core and pg: using Debian's chromium-driver, python3-selenium and node-pg"
        DRIVER=selenium
    fi
fi
if [[ $DRIVER == selenium ]]; then
    need_packages chromium-driver python3-selenium || fail_setup "could not install chromium-driver, python3-selenium"
fi
say "browser driver: $DRIVER"
need_extension || fail_setup "pg_claim is not installed"

# --- 2. cluster and workload ------------------------------------------------------
cluster_init dashboard </dev/null || fail_setup "initdb failed"
SCRATCH=$CL_DIR
PGPORT=$CL_PORT
CL_DB=ops
# node-postgres for views_read.mjs: from npm (test/ops/dashboard/node_modules), or
# Debian's node-pg, installed with apt-get or, where that cannot be (a nodejs
# from elsewhere does not satisfy Debian's node-* dependencies), unpacked into
# the scratch directory. Prints the folder for NODE_PATH ("" for npm's).
node_pg_path() {
    if [[ -f "$ROOT/test/ops/dashboard/node_modules/pg/package.json" ]]; then echo ""; return 0; fi
    debian_node_pg
}
say "cluster on port $PGPORT"
cluster_start || fail_setup "the server did not start"
as_user createdb -h "$SCRATCH" -p "$PGPORT" ops
psql_cl >/dev/null <<'SQL' || fail_setup "the workload failed"
CREATE EXTENSION pg_claim;
CREATE ROLE dash_admin LOGIN IN ROLE claim_admin;
CREATE ROLE dash_viewer LOGIN IN ROLE pg_monitor, claim_worker;
SELECT claim.create_queue('emails', lease => '1 hour', max_attempts => 1);
SELECT claim.create_queue('reports', lease => '1 hour');
SELECT claim.enqueue('emails', jsonb_build_object('to', 'user' || g || '@example.com')) FROM generate_series(1, 8) g;
SELECT claim.fail(token, 'SMTP 550: mailbox unavailable') FROM claim.claim_next('emails', n => 2);
SELECT count(*) FROM claim.claim_next('emails', n => 1, worker => 'mailer-1');
SELECT claim.enqueue('reports', '{"report": "daily"}', group_key => 'tenant-7',
                     run_at => clock_timestamp() + interval '1 hour');
SELECT claim.enqueue('reports', '{"report": "weekly"}', group_key => 'tenant-7');
SELECT claim.lease_acquire('nightly-import', '10 minutes', 'importer-1');
SELECT claim.schedule('nightly-report', '0 3 * * *', 'reports', '{"report": "nightly"}');
-- A retaining queue: a completed item with its result, an expired lease, an
-- item given back with release (as a worker that stops does), a cancelled
-- item; then the queue is paused, so nothing claims the released item again.
SELECT claim.create_queue('archive', lease => '1 hour', retain => '1 hour');
CREATE TABLE archive_ids AS
    SELECT g AS n, claim.enqueue('archive', jsonb_build_object('n', g)) AS id FROM generate_series(1, 4) g;
SELECT claim.complete(token, '{"rows": 42}') FROM claim.claim_next('archive', worker => 'archiver-1');
SELECT count(*) FROM claim.claim_next('archive', lease => '0.2 seconds', worker => 'slow-1');
SELECT claim.release(token) FROM claim.claim_next('archive', worker => 'stopping-1');
DO $$ BEGIN  -- claim.cancel(queue, id), or the array form of pg_claim 0.2.0
    IF pg_catalog.to_regprocedure('claim.cancel(text, bigint)') IS NOT NULL THEN
        PERFORM claim.cancel('archive', (SELECT id FROM archive_ids WHERE n = 4));
    ELSE
        EXECUTE 'SELECT claim.cancel(''archive'', ARRAY[(SELECT id FROM archive_ids WHERE n = 4)])';
    END IF;
END $$;
SELECT claim.pause('archive');
SELECT pg_sleep(0.5);
SQL
DEAD_ID="$(psql_cl -Atc "SELECT min(id) FROM claim.dead_items WHERE queue = 'emails'")"
RELEASED_ID="$(psql_cl -Atc "SELECT id FROM archive_ids WHERE n = 3")"
CLAIMED_ID="$(psql_cl -Atc "SELECT id FROM claim.claimed_items WHERE worker = 'mailer-1'")"
# pg_claim 0.2.0 lists a released claim in claimed_items with lease_until
# -infinity, which psycopg cannot load: the dashboard must still show the page.
as_user "$PG_BIN/createdb" -h "$SCRATCH" -p "$PGPORT" old
as_user "$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 -h "$SCRATCH" -p "$PGPORT" -d old >/dev/null <<'SQL' || fail_setup "the 0.2.0 workload failed"
CREATE EXTENSION pg_claim VERSION '0.2.0';
SELECT claim.create_queue('old', lease => '1 hour');
SELECT claim.enqueue('old', '{}') FROM generate_series(1, 3);
SELECT claim.release(token) FROM claim.claim_next('old');
SELECT claim.pause('old');
SQL
OLD_RELEASED="$(as_user "$PG_BIN/psql" -X -Atq -h "$SCRATCH" -p "$PGPORT" -d old -c "SELECT min(id) FROM claim.items")"

# --- 3. every view in every driver; a page that never fails as a whole -------------
VIEWS="blocked_groups claimed_items dead_items finished_items leases queue_stats schedules"
DSN="host=$SCRATCH port=$PGPORT dbname=ops user=dash_admin"
run_checks() {  # run_checks WHAT COMMAND...: adds its ok/FAIL lines to the counts
    local what="$1" out
    shift
    out="$("$@" 2>&1)"
    echo "$out"
    PASSED=$((PASSED + $(grep -c '^ok ' <<<"$out")))
    FAILED=$((FAILED + $(grep -c '^FAIL ' <<<"$out")))
    grep -qE '^(ok|FAIL) ' <<<"$out" || fail "$what produced no result"
}
say "every view, read with psycopg and with node-postgres"
run_checks views_read.py env DSN="$DSN" VIEWS="$VIEWS" RELEASED="archive:$RELEASED_ID" PYTHONDONTWRITEBYTECODE=1 \
    timeout 120 "$PY" "$ROOT/test/ops/dashboard/views_read.py"
if NODE_LIB="$(node_pg_path)"; then
    run_checks views_read.mjs env DSN="$DSN" VIEWS="$VIEWS" ${NODE_LIB:+NODE_PATH="$NODE_LIB"} \
        timeout 120 node "$ROOT/test/ops/dashboard/views_read.mjs"
else
    fail "node-postgres: neither npm nor Debian's node-pg could be installed"
fi
say "the page never fails as a whole"
run_checks resilience.py env PYTHONPATH="$ROOT/ops/dashboard" PYTHONDONTWRITEBYTECODE=1 \
    OLD_DSN="host=$SCRATCH port=$PGPORT dbname=old user=dash_admin" OLD_RELEASED="$OLD_RELEASED" \
    DSN="$DSN" timeout 120 "$PY" "$ROOT/test/ops/dashboard/resilience.py"

# --- 4. dashboards ------------------------------------------------------------------
# The admin dashboard connects with PG_CLAIM_DSN, the read-only one with
# libpq's PG* variables alone (no DSN at all).
start_dashboard() {  # start_dashboard ROLE LOG: sets URL (runs in this shell, so PIDS keeps the pid)
    local conn
    if [[ $1 == dash_admin ]]; then
        conn=(PG_CLAIM_DSN="host=$SCRATCH port=$PGPORT dbname=ops user=$1")
    else
        conn=(PGHOST="$SCRATCH" PGPORT="$PGPORT" PGDATABASE=ops PGUSER="$1")
    fi
    (cd "$ROOT/ops/dashboard" && exec env -u PG_CLAIM_DSN -u PGHOST -u PGPORT -u PGDATABASE -u PGUSER -u PGSERVICE \
        "${conn[@]}" "$PY" -m pg_claim_dashboard --port 0 --sample 1 >"$2" 2>&1) &
    PIDS+=($!)
    URL=""
    for _ in $(seq 100); do
        URL="$(grep -o 'http://[^ ]*' "$2" 2>/dev/null)" && [[ -n "$URL" ]] && return 0
        sleep 0.1
    done
    return 1
}
start_dashboard dash_admin "$SCRATCH/dash-admin.log" || { cat "$SCRATCH/dash-admin.log"; fail_setup "the dashboard did not start"; }
ADMIN_URL="$URL"
start_dashboard dash_viewer "$SCRATCH/dash-viewer.log" || { cat "$SCRATCH/dash-viewer.log"; fail_setup "the read-only dashboard did not start"; }
RO_URL="$URL"
say "dashboards: $ADMIN_URL (claim_admin, PG_CLAIM_DSN), $RO_URL (read only, PG* variables)"
page_of() { curl -s "$1?refresh=0" 2>/dev/null || "$PY" -c 'import sys,urllib.request; print(urllib.request.urlopen(sys.argv[1]).read().decode())' "$1?refresh=0"; }
check "PG_CLAIM_DSN: the dashboard connects as its user" yes \
    "$(grep -q 'id="role">dash_admin<' <<<"$(page_of "$ADMIN_URL")" && echo yes || echo no)"
check "PG* variables: the dashboard without a DSN connects as PGUSER to PGDATABASE" yes \
    "$(grep -q 'database <b>ops</b> as <b id="role">dash_viewer<' <<<"$(page_of "$RO_URL")" && echo yes || echo no)"
check "a DSN it cannot use ends the dashboard at once (exit 2)" 2 \
    "$(cd "$ROOT/ops/dashboard" && PG_CLAIM_DSN="host=$SCRATCH port=1 dbname=ops connect_timeout=2" timeout 30 "$PY" -m pg_claim_dashboard --port 0 >/dev/null 2>&1; echo $?)"
check "the dashboard answers /healthz" ok "$(curl -s "${ADMIN_URL}healthz" 2>/dev/null | tr -d '\n' || "$PY" -c 'import sys,urllib.request; print(urllib.request.urlopen(sys.argv[1]).read().decode().strip())' "${ADMIN_URL}healthz")"

# --- 5. the browser -----------------------------------------------------------------
# The charts need samples (the dashboards take one a second): five seconds of
# traffic in a queue of its own, then a pause, so the page's counts hold still.
psql_cl >/dev/null <<'SQL' || fail "the traffic for the charts"
SELECT claim.create_queue('traffic', lease => '1 hour');
DO $$ BEGIN
    FOR i IN 1 .. 25 LOOP
        PERFORM claim.enqueue('traffic', pg_catalog.jsonb_build_object('i', i)) FROM generate_series(1, 8);
        PERFORM claim.complete(token) FROM claim.claim_next('traffic', n => 5);
        COMMIT;
        PERFORM pg_sleep(0.2);
    END LOOP;
END $$;
SQL
sleep 2
mkdir -p "$ARTIFACTS"
EXPECT='{"emails": {"ready": 5, "in_flight": 1, "dead_items": 2, "scheduled": 0, "paused": "no",
                    "enqueued_total": 8, "claimed_total": 3, "failed_total": 2, "dead_total": 2},
         "reports": {"ready": 1, "scheduled": 1, "in_flight": 0, "dead_items": 0}}'
say "headless Chromium ($(/usr/bin/chromium --version 2>/dev/null | head -1)), driven by $DRIVER"
if [[ $DRIVER == selenium ]]; then
    BROWSER_CMD=("$PY" browser_selenium.py)
else
    BROWSER_CMD=(node browser.mjs)
fi
out="$(cd "$ROOT/test/ops/dashboard" && DASH_URL="$ADMIN_URL" DASH_RO_URL="$RO_URL" EXPECT="$EXPECT" \
       DEAD_QUEUE=emails DEAD_ID="$DEAD_ID" RELEASED_QUEUE=archive RELEASED_ID="$RELEASED_ID" CLAIMED_ID="$CLAIMED_ID" \
       ARTIFACTS="$ARTIFACTS" PYTHONDONTWRITEBYTECODE=1 \
       timeout 180 "${BROWSER_CMD[@]}" 2>&1)"
echo "$out"
PASSED=$((PASSED + $(grep -c '^ok ' <<<"$out")))
FAILED=$((FAILED + $(grep -c '^FAIL ' <<<"$out")))
grep -qE '^(ok|FAIL) ' <<<"$out" || { FAILED=$((FAILED + 1)); echo "FAIL  the browser script produced no result"; }

# --- 6. the database agrees ---------------------------------------------------------
check "the redriven item is ready in the database" ready \
    "$(psql_cl -Atc "SELECT state FROM claim.item_state('emails', $DEAD_ID)")"
check "the other dead item is still dead" 1 \
    "$(psql_cl -Atc "SELECT count(*) FROM claim.dead_items WHERE queue = 'emails'")"
check "the queue runs (resumed)" f "$(psql_cl -Atc "SELECT paused FROM claim.queue_stats WHERE queue = 'emails'")"
check "the screenshot was taken" yes "$([[ -s "$ARTIFACTS/dashboard.png" ]] && echo yes || echo no)"
check "the cancelled item is no longer claimed in the database" 0 \
    "$(psql_cl -Atc "SELECT count(*) FROM claim.claimed_items WHERE id = $CLAIMED_ID")"
check "the queue archive stays paused" t "$(psql_cl -Atc "SELECT paused FROM claim.queue_stats WHERE queue = 'archive'")"
# --- 7. Host allow-list, per-session tokens, statement timeout, many dead items ---
# DASHBOARD_DEAD_ITEMS (default 20000 here; 1000000 by hand) dead items made
# directly in claim.items, so it runs as the superuser.
say "hardening: Host, session tokens, statement timeout, ${DASHBOARD_DEAD_ITEMS:-20000} dead items"
run_checks hardening.py env PG_CLAIM_DSN="host=$SCRATCH port=$PGPORT dbname=ops user=$RUN_USER" \
    DASHBOARD_DEAD_ITEMS="${DASHBOARD_DEAD_ITEMS:-20000}" PYTHONDONTWRITEBYTECODE=1 \
    timeout 300 "$PY" "$ROOT/test/ops/dashboard/hardening.py"
say "screenshot: $ARTIFACTS/dashboard.png"
