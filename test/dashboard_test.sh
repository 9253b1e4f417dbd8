#!/usr/bin/env bash
# test/dashboard_test.sh — the web dashboard (ops/dashboard) in a real browser.
#
# Run as root, after test/setup.sh installed the extension:
#
#   bash test/dashboard_test.sh
#
#   1. installs what is missing: python3-psycopg, chromium (Debian's headless
#      browser), nodejs/npm, and playwright-core from npm into
#      test/dashboard/node_modules (it drives /usr/bin/chromium; no browser
#      download). When npm cannot install playwright-core (no registry, or a
#      proxy whose certificate is not trusted), it installs Debian's
#      chromium-driver and python3-selenium instead;
#   2. starts a throwaway cluster as the unprivileged user "pgclaim" with
#      shared_preload_libraries = 'pg_claim' and a known workload: ready,
#      scheduled, claimed and dead items, a blocked group, a lease;
#   3. starts the dashboard twice, as a member of claim_admin and as a role
#      with only pg_monitor and claim_worker;
#   4. test/dashboard/browser.mjs (playwright-core), or
#      test/dashboard/browser_selenium.py (ChromeDriver) with the same checks,
#      loads the page in headless Chromium, checks
#      the counts, clicks redrive on a dead item and sees it ready again,
#      pauses and resumes a queue, and checks that the read-only dashboard has
#      no buttons and refuses a POST; the database confirms the item's state.
# Screenshots: test/artifacts/dashboard.png and dashboard-after-redrive.png.
# The last line is "dashboard: N passed, N failed". Servers are stopped and
# the scratch directory removed on exit (DASHBOARD_KEEP=1 keeps it).
# DASHBOARD_DRIVER=selenium uses ChromeDriver without trying npm.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
. "$ROOT/test/pg-major.sh"   # PG_MAJOR, PG_BIN
RUN_USER="${PGCLAIM_USER:-pgclaim}"
PY=/usr/bin/python3
ARTIFACTS="$ROOT/test/artifacts"
PASSED=0
FAILED=0

say() { printf '==> %s\n' "$*"; }
check() {  # check NAME EXPECTED ACTUAL
    if [[ "$2" == "$3" ]]; then
        PASSED=$((PASSED + 1)); printf 'ok    %s\n' "$1"
    else
        FAILED=$((FAILED + 1)); printf 'FAIL  %s: expected %s, got %s\n' "$1" "$2" "${3:-<none>}"
    fi
}
finish() { echo "dashboard: $PASSED passed, $FAILED failed"; [[ $FAILED -eq 0 ]]; exit $?; }
fail_setup() { echo "$*" >&2; FAILED=$((FAILED + 1)); finish; }

[[ $(id -u) -eq 0 ]] || { echo "test/dashboard_test.sh must run as root" >&2; exit 1; }

# --- 1. what it needs -----------------------------------------------------------
missing=()
for p in python3-psycopg chromium iproute2; do
    [[ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" == "install ok installed" ]] || missing+=("$p")
done
command -v node >/dev/null 2>&1 || missing+=(nodejs)
command -v npm >/dev/null 2>&1 || missing+=(npm)
if ((${#missing[@]})); then
    say "installing: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    { apt-get update -q && apt-get install -y -q --no-install-recommends "${missing[@]}" </dev/null; } ||
        fail_setup "could not install ${missing[*]}"
fi
DRIVER=playwright
if [[ "${DASHBOARD_DRIVER:-}" == selenium ]]; then
    DRIVER=selenium
elif [[ ! -f "$ROOT/test/dashboard/node_modules/playwright-core/package.json" ]]; then
    say "npm: playwright-core"
    if ! (cd "$ROOT/test/dashboard" && timeout 300 npm install --no-audit --no-fund --loglevel=error); then
        say "npm could not install playwright-core: using Debian's chromium-driver and python3-selenium"
        DRIVER=selenium
    fi
fi
if [[ $DRIVER == selenium ]]; then
    missing=()
    for p in chromium-driver python3-selenium; do
        [[ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" == "install ok installed" ]] || missing+=("$p")
    done
    if ((${#missing[@]})); then
        say "installing: ${missing[*]}"
        export DEBIAN_FRONTEND=noninteractive
        { apt-get update -q && apt-get install -y -q --no-install-recommends "${missing[@]}" </dev/null; } ||
            fail_setup "could not install ${missing[*]}"
    fi
fi
say "browser driver: $DRIVER"
id -u "$RUN_USER" >/dev/null 2>&1 || useradd --create-home --shell /bin/bash "$RUN_USER"
[[ -f "$("$PG_BIN/pg_config" --sharedir)/extension/pg_claim.control" ]] ||
    fail_setup "pg_claim is not installed: run test/setup.sh first"

# --- 2. cluster and workload ------------------------------------------------------
free_port() {
    local p
    while :; do
        p=$((20000 + RANDOM % 20000))
        ss -ltn "( sport = :$p )" 2>/dev/null | grep -q ":$p" || { echo "$p"; return; }
    done
}
SCRATCH="$(mktemp -d /tmp/pg_claim-dashboard.XXXXXX)"
chown "$RUN_USER" "$SCRATCH"
chmod 755 "$SCRATCH"
PGPORT="$(free_port)"
as_user() { runuser -u "$RUN_USER" -- env HOME="$SCRATCH" "$@"; }
PIDS=()
cleanup() {
    for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null; done
    as_user "$PG_BIN/pg_ctl" -D "$SCRATCH/data" stop -m fast -w >/dev/null 2>&1
    if [[ "${DASHBOARD_KEEP:-}" == 1 ]]; then echo "kept: $SCRATCH"; else rm -rf "$SCRATCH"; fi
}
trap cleanup EXIT

say "cluster on port $PGPORT"
as_user "$PG_BIN/initdb" -D "$SCRATCH/data" --auth=trust -E UTF8 --locale=C >/dev/null || fail_setup "initdb failed"
cat >> "$SCRATCH/data/postgresql.conf" <<CONF
port = $PGPORT
listen_addresses = ''
unix_socket_directories = '$SCRATCH'
shared_preload_libraries = 'pg_claim'
CONF
as_user "$PG_BIN/pg_ctl" -D "$SCRATCH/data" -l "$SCRATCH/server.log" -w start >/dev/null || fail_setup "the server did not start"
as_user "$PG_BIN/createdb" -h "$SCRATCH" -p "$PGPORT" ops
psql_run() { as_user "$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 -h "$SCRATCH" -p "$PGPORT" -d ops "$@"; }
psql_run >/dev/null <<'SQL' || fail_setup "the workload failed"
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
SQL
DEAD_ID="$(psql_run -Atc "SELECT min(id) FROM claim.dead_items WHERE queue = 'emails'")"

# --- 3. dashboards ------------------------------------------------------------------
start_dashboard() {  # start_dashboard ROLE LOG: sets URL (runs in this shell, so PIDS keeps the pid)
    (cd "$ROOT/ops/dashboard" && exec "$PY" -m pg_claim_dashboard \
        --dsn "host=$SCRATCH port=$PGPORT dbname=ops user=$1" --port 0 --sample 1 >"$2" 2>&1) &
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
say "dashboards: $ADMIN_URL (claim_admin), $RO_URL (read only)"
check "the dashboard answers /healthz" ok "$(curl -s "${ADMIN_URL}healthz" 2>/dev/null | tr -d '\n' || "$PY" -c 'import sys,urllib.request; print(urllib.request.urlopen(sys.argv[1]).read().decode().strip())' "${ADMIN_URL}healthz")"

# --- 4. the browser -----------------------------------------------------------------
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
out="$(cd "$ROOT/test/dashboard" && DASH_URL="$ADMIN_URL" DASH_RO_URL="$RO_URL" EXPECT="$EXPECT" \
       DEAD_QUEUE=emails DEAD_ID="$DEAD_ID" ARTIFACTS="$ARTIFACTS" PYTHONDONTWRITEBYTECODE=1 \
       timeout 180 "${BROWSER_CMD[@]}" 2>&1)"
echo "$out"
PASSED=$((PASSED + $(grep -c '^ok ' <<<"$out")))
FAILED=$((FAILED + $(grep -c '^FAIL ' <<<"$out")))
grep -qE '^(ok|FAIL) ' <<<"$out" || { FAILED=$((FAILED + 1)); echo "FAIL  the browser script produced no result"; }

# --- 5. the database agrees ---------------------------------------------------------
check "the redriven item is ready in the database" ready \
    "$(psql_run -Atc "SELECT state FROM claim.item_state('emails', $DEAD_ID)")"
check "the other dead item is still dead" 1 \
    "$(psql_run -Atc "SELECT count(*) FROM claim.dead_items WHERE queue = 'emails'")"
check "the queue runs (resumed)" f "$(psql_run -Atc "SELECT paused FROM claim.queue_stats WHERE queue = 'emails'")"
check "the screenshot was taken" yes "$([[ -s "$ARTIFACTS/dashboard.png" ]] && echo yes || echo no)"
finish
