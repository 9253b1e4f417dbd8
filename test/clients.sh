#!/usr/bin/env bash
# test/clients.sh — the client libraries' suites against a real server, directly
# and through PgBouncer in transaction pooling mode.
#
# Run as root from anywhere, after test/setup.sh installed the extension:
#
#   bash test/clients.sh
#
#   1. installs the missing Debian packages (python3-psycopg, python3-pytest,
#      pgbouncer; nodejs and npm when clients/node exists; golang-go and
#      golang-github-jackc-pgx-v4-dev when clients/go exists);
#   2. starts a throwaway cluster as the unprivileged user "pgclaim" on a free
#      port, with shared_preload_libraries = 'pg_claim' and the extension
#      created in database "clients";
#   3. starts PgBouncer (pool_mode = transaction) in front of it, with its own
#      configuration in the scratch directory;
#   4. runs the Python suite (clients/python/tests, pytest) directly and through
#      PgBouncer, `npm test` in clients/node (when clients/node/package.json
#      exists) and the Go suite of clients/go (when it exists: `go vet`, and
#      one test binary built with `go test -c` in GOPATH mode on Debian's
#      packages, run twice) the same two ways. Each suite reads the server's
#      URI from PG_CLAIM_DSN. The Node client's dependencies come from `npm ci`;
#      when npm cannot reach its registry (or a proxy's certificate is not
#      trusted), the suite runs on a copy of clients/node without node_modules
#      against Debian's node-pg (NODE_PATH, PGCLAIM_NODE_DEPS=debian), and the
#      TypeScript declarations test, which needs typescript and @types/pg from
#      npm, is skipped. The output says which: "node: npm ci" or
#      "node: Debian node-pg (npm unreachable)".
#   5. checks the install commands of the clients' READMEs: pip's offline
#      install into a virtualenv, and the `pg_claim` command it installs
#      (--help, and `pg_claim stats` through PG_CLAIM_DSN and through the PG*
#      variables); `npm install --install-links <clients/node>` in a fresh
#      directory, whose app then loads pg-claim and pg and reads the stats
#      (skipped, with its reason, when npm cannot reach its registry); the
#      packages of each README: the Python sdist and wheel built with Debian's
#      python3-build (--no-isolation, nothing fetched), each installed offline
#      into a fresh virtualenv; the Node client's `npm pack` tarball installed
#      in a fresh directory.
# Prints a summary; the last line is "clients: N passed, N failed" (pytest tests,
# node test cases and top-level Go tests; a suite that cannot run counts as one
# failure). Exits
# non-zero on any failure. The servers are stopped and the scratch directory
# removed on exit, whatever happens.
#
# Environment: PGCLAIM_USER (default pgclaim), CLIENTS_PYTEST_K (a pytest -k
# expression, e.g. "heartbeat or sigterm"), CLIENTS_ONLY=python, node or go (run
# one client's suites), CLIENTS_GO_RUN (a `go test -run` expression), CLIENTS_KEEP=1 keeps the scratch directory (logs) after the
# run.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=lib/cluster.sh
. "$ROOT/test/lib/cluster.sh"
PY=/usr/bin/python3
DB=clients
CL_KEEP=${CLIENTS_KEEP:-${CL_KEEP:-0}}
harness_cleanup() {
    if [[ -f "${CL_DIR:-}/pgbouncer.pid" ]]; then
        kill "$(cat "$CL_DIR/pgbouncer.pid")" 2>/dev/null || true
        sleep 0.2
    fi
    if (( FAILED > 0 )) && [[ -n "${CL_DIR:-}" ]]; then
        echo "  logs: server $CL_DIR/server.log, pgbouncer $CL_DIR/pgbouncer.log (CLIENTS_KEEP=1 keeps them)"
    fi
    return 0
}
harness clients

# --- 1. packages --------------------------------------------------------------
need_packages python3 python3-psycopg python3-pytest python3-pytest-timeout python3-pip python3-venv \
    python3-setuptools python3-build python3-wheel pgbouncer util-linux iproute2 || exit 1
# Node: only when the Node client exists, and only what is missing (a node
# from elsewhere, e.g. NodeSource, brings its own npm and conflicts with
# Debian's npm package).
if [[ -f "$ROOT/clients/node/package.json" ]]; then
    command -v node >/dev/null 2>&1 || need_packages nodejs || exit 1
    command -v npm >/dev/null 2>&1 || need_packages npm || exit 1
fi
# Go: Debian 12 packages pgx v4 (not v5); the suite builds in GOPATH mode
# against /usr/share/gocode, nothing fetched.
if [[ -f "$ROOT/clients/go/go.mod" ]]; then
    need_packages golang-go golang-github-jackc-pgx-v4-dev || exit 1
fi
need_extension || exit 1
# Debian starts a pgbouncer service on install; this script runs its own.

# --- 2. a throwaway cluster ---------------------------------------------------
cluster_init clients <<'EOF' || exit 1
listen_addresses = '127.0.0.1'
max_connections = 150
EOF
SCRATCH=$CL_DIR
PGPORT=$CL_PORT
say "starting a throwaway cluster as $RUN_USER in $SCRATCH (port $PGPORT)"
if ! cluster_start; then
    tail -n 30 "$CL_LOG"
    exit 1
fi
cluster_database "$DB" || exit 1
say "pg_claim $(psql_cl -Atc "SELECT extversion FROM pg_extension WHERE extname = 'pg_claim'") in database $DB"

# --- 3. PgBouncer in transaction pooling mode ---------------------------------
BPORT="$(free_port)" || { echo "no free port" >&2; exit 1; }
printf '"%s" ""\n' "$RUN_USER" >"$SCRATCH/userlist.txt"
cat >"$SCRATCH/pgbouncer.ini" <<EOF
[databases]
$DB = host=127.0.0.1 port=$PGPORT dbname=$DB user=$RUN_USER

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $BPORT
unix_socket_dir =
auth_type = trust
auth_file = $SCRATCH/userlist.txt
pool_mode = transaction
; every claim or item_state that waits holds a server connection for its wait
default_pool_size = 60
max_client_conn = 300
ignore_startup_parameters = extra_float_digits
pidfile = $SCRATCH/pgbouncer.pid
logfile = $SCRATCH/pgbouncer.log
admin_users = $RUN_USER
EOF
chown "$RUN_USER:" "$SCRATCH"/pgbouncer.ini "$SCRATCH"/userlist.txt
bouncer_alive() {
    [[ -f "$SCRATCH/pgbouncer.pid" ]] && kill -0 "$(cat "$SCRATCH/pgbouncer.pid")" 2>/dev/null
}
start_bouncer() {
    runuser -u "$RUN_USER" -- pgbouncer -d "$SCRATCH/pgbouncer.ini" || return 1
    for _ in $(seq 1 50); do
        if as_user psql -X -Atq -h 127.0.0.1 -p "$BPORT" -d "$DB" -c "SELECT 1" >/dev/null 2>&1; then
            return 0
        fi
        sleep 0.1
    done
    return 1
}
if ! start_bouncer; then
    tail -n 20 "$SCRATCH/pgbouncer.log" 2>/dev/null
    exit 1
fi
# PgBouncer 1.18 (Debian 12) can exit on a cancel request that crosses the end
# of a statement ("server_proto: server in bad state"), or that the client
# closes before PgBouncer has sent it on ("disconnect_client(): bad client
# state"), both fixed upstream by 1.21; the clients cancel waiting claims
# when they stop, and wait for the answer. If it exited during a suite, say
# so, and start it again for the next one.
check_bouncer() {   # $1: the suite that just ran
    if ! bouncer_alive; then
        local why
        why="$(grep -E 'FATAL|fatal|bad state' "$SCRATCH/pgbouncer.log" | tail -n 1)"
        SUMMARY+=("pgbouncer exited during $1: ${why:-see $SCRATCH/pgbouncer.log}")
        say "PgBouncer exited during $1: ${why:-no message}; starting it again"
        rm -f "$SCRATCH/pgbouncer.pid"
        start_bouncer || say "PgBouncer did not start again"
    fi
}
say "PgBouncer $(pgbouncer --version | head -n1 | awk '{print $2}') on port $BPORT, pool_mode = transaction"

DIRECT="postgresql://$RUN_USER@127.0.0.1:$PGPORT/$DB"
POOLED="postgresql://$RUN_USER@127.0.0.1:$BPORT/$DB"

# --- 4. the suites --------------------------------------------------------------
SUMMARY=()

run_python() {   # $1 label, $2 dsn
    local label="$1" dsn="$2" xml="$SCRATCH/pytest-$1.xml" rc counts p f s
    say "Python suite, $label"
    local select=()
    if [[ -n "${CLIENTS_PYTEST_K:-}" ]]; then select=(-k "$CLIENTS_PYTEST_K"); fi
    (cd "$ROOT/clients/python" &&
        PG_CLAIM_DSN="$dsn" PYTHONDONTWRITEBYTECODE=1 timeout 900 \
        "$PY" -m pytest -p no:cacheprovider -q -rs --timeout=300 --junitxml="$xml" "${select[@]}" tests)
    rc=$?
    counts="$("$PY" - "$xml" <<'PYEOF' 2>/dev/null
import sys, xml.etree.ElementTree as ET
passed = failed = skipped = 0
for case in ET.parse(sys.argv[1]).getroot().iter("testcase"):
    tags = {child.tag for child in case}
    if tags & {"failure", "error"}:
        failed += 1
    elif "skipped" in tags:
        skipped += 1
    else:
        passed += 1
print(passed, failed, skipped)
PYEOF
)"
    if [[ -z "$counts" ]]; then
        p=0; f=1; s=0
    else
        read -r p f s <<<"$counts"
        if (( rc != 0 && f == 0 )); then f=1; fi
    fi
    PASSED=$((PASSED + p)); FAILED=$((FAILED + f))
    SUMMARY+=("python ($label): $p passed, $f failed, $s skipped")
}

NODE_DIR="$ROOT/clients/node"   # where the Node suite runs
NODE_ENV_EXTRA=()                # NODE_PATH etc. when on Debian's node-pg
run_node() {   # $1 label, $2 dsn
    local label="$1" dsn="$2" log="$SCRATCH/node-$1.log" rc p f s
    say "Node suite, $label"
    (cd "$NODE_DIR" && env "${NODE_ENV_EXTRA[@]}" PG_CLAIM_DSN="$dsn" timeout 900 npm test) 2>&1 | tee "$log"
    rc=${PIPESTATUS[0]}
    p=$(grep -E '^(# |ℹ )pass [0-9]+' "$log" | tail -n1 | grep -Eo '[0-9]+$' || true)
    f=$(grep -E '^(# |ℹ )fail [0-9]+' "$log" | tail -n1 | grep -Eo '[0-9]+$' || true)
    s=$(grep -E '^(# |ℹ )skipped [0-9]+' "$log" | tail -n1 | grep -Eo '[0-9]+$' || true)
    p=${p:-0}; f=${f:-0}; s=${s:-0}
    if (( rc != 0 && f == 0 )); then f=1; fi
    PASSED=$((PASSED + p)); FAILED=$((FAILED + f))
    SUMMARY+=("node ($label, $NODE_DEPS): $p passed, $f failed, $s skipped")
}

# The package installs with pip from the folder, offline, next to Debian's psycopg.
if [[ -z "${CLIENTS_ONLY:-}" || "${CLIENTS_ONLY:-}" == python ]]; then
say "pip install clients/python (virtualenv with system site-packages, --no-index)"
cp -r "$ROOT/clients/python" "$SCRATCH/pysrc"
rm -rf "$SCRATCH/pysrc/build" "$SCRATCH"/pysrc/*.egg-info
if "$PY" -m venv --system-site-packages "$SCRATCH/venv" &&
   "$SCRATCH/venv/bin/pip" install -q --no-index --no-build-isolation "$SCRATCH/pysrc" &&
   (cd "$SCRATCH" && "$SCRATCH/venv/bin/python" -c "import pg_claim, os; assert pg_claim.__file__.startswith('$SCRATCH/venv'); assert os.path.exists(os.path.join(os.path.dirname(pg_claim.__file__), 'py.typed'))"); then
    PASSED=$((PASSED + 1)); SUMMARY+=("python: pip install: ok")
    # The command line that pip installed, from a directory without the source.
    PGC_ENV=()
    for kv in host=PGHOST port=PGPORT dbname=PGDATABASE user=PGUSER; do
        PGC_ENV+=("${kv#*=}=$("$PY" -c "from psycopg.conninfo import conninfo_to_dict as d; import sys; print(d(sys.argv[1]).get(sys.argv[2], ''))" "$DIRECT" "${kv%%=*}")")
    done
    if (cd "$SCRATCH" && "$SCRATCH/venv/bin/pg_claim" --help | grep -q "exit status" &&
        "$SCRATCH/venv/bin/pg_claim" work --help | grep -q "PG_CLAIM_ITEM_ID" &&
        env -u PG_CLAIM_DSN PG_CLAIM_DSN="$DIRECT" "$SCRATCH/venv/bin/pg_claim" stats >/dev/null &&
        env -u PG_CLAIM_DSN "${PGC_ENV[@]}" "$SCRATCH/venv/bin/pg_claim" stats >/dev/null); then
        PASSED=$((PASSED + 1)); SUMMARY+=("python: installed pg_claim command: ok")
    else
        FAILED=$((FAILED + 1)); SUMMARY+=("python: installed pg_claim command: FAILED")
    fi
else
    FAILED=$((FAILED + 1)); SUMMARY+=("python: pip install: FAILED")
fi
# The sdist and the wheel, built as the README says (Debian's python3-build,
# no PyPI), each installed offline into a fresh virtualenv.
say "python -m build --no-isolation clients/python; pip install the wheel, then the sdist"
cp -r "$ROOT/clients/python" "$SCRATCH/pybuild"
rm -rf "$SCRATCH/pybuild/build" "$SCRATCH"/pybuild/*.egg-info "$SCRATCH/pybuild/dist"
if (cd "$SCRATCH/pybuild" && "$PY" -m build --no-isolation --sdist --wheel --outdir dist . >"$SCRATCH/pybuild.log" 2>&1); then
    for dist in "$SCRATCH"/pybuild/dist/pg_claim-*.whl "$SCRATCH"/pybuild/dist/pg_claim-*.tar.gz; do
        kind=wheel; [[ $dist == *.tar.gz ]] && kind=sdist
        rm -rf "$SCRATCH/venv-$kind"
        if "$PY" -m venv --system-site-packages "$SCRATCH/venv-$kind" &&
           "$SCRATCH/venv-$kind/bin/pip" install -q --no-index --no-build-isolation "$dist" &&
           (cd "$SCRATCH" && env -u PG_CLAIM_DSN PG_CLAIM_DSN="$DIRECT" "$SCRATCH/venv-$kind/bin/pg_claim" stats >/dev/null); then
            PASSED=$((PASSED + 1)); SUMMARY+=("python: $kind ${dist##*/} installs: ok")
        else
            FAILED=$((FAILED + 1)); SUMMARY+=("python: $kind ${dist##*/} installs: FAILED")
        fi
    done
else
    FAILED=$((FAILED + 1)); SUMMARY+=("python: python3 -m build: FAILED (log: $SCRATCH/pybuild.log)")
fi
fi

# both_ways RUN SUITE: RUN (run_python or run_node) directly, then through
# PgBouncer. When PgBouncer exited during the pooled run (the 1.18 bug
# above, which a client that sends a cancel request can still meet), that
# run's counts are dropped, PgBouncer is started again and the pooled run is
# made once more: its counts are the ones that stand, failures included.
both_ways() {
    "$1" direct "$DIRECT"
    local passed=$PASSED failed=$FAILED nsummary=${#SUMMARY[@]}
    "$1" pgbouncer "$POOLED"
    if ! bouncer_alive; then
        PASSED=$passed FAILED=$failed
        SUMMARY=("${SUMMARY[@]:0:nsummary}")
        check_bouncer "$2 (its pooled run is made again)"
        "$1" pgbouncer "$POOLED"
    fi
    check_bouncer "$2"
}

ONLY="${CLIENTS_ONLY:-}"
if [[ -n "$ONLY" && "$ONLY" != python ]]; then
    :
elif [[ -d "$ROOT/clients/python/tests" ]]; then
    both_ways run_python "the Python suite"
else
    FAILED=$((FAILED + 1))
    SUMMARY+=("python: clients/python/tests missing")
fi

if [[ ( -z "$ONLY" || "$ONLY" == node ) && -f "$ROOT/clients/node/package.json" ]]; then
    say "npm install in clients/node"
    NODE_DEPS=""
    if (cd "$ROOT/clients/node" &&
        if [[ -f package-lock.json ]]; then timeout 300 npm ci --no-audit --no-fund; else timeout 300 npm install --no-audit --no-fund; fi); then
        NODE_DEPS="npm ci"
    elif NODE_LIB="$(debian_node_pg)"; then
        NODE_DEPS="Debian node-pg"
        # A copy without node_modules, so that only Debian's modules resolve.
        mkdir -p "$SCRATCH/nodesrc"
        tar -C "$ROOT/clients/node" --exclude=./node_modules -cf - . | tar -C "$SCRATCH/nodesrc" -xf -
        NODE_DIR="$SCRATCH/nodesrc"
        NODE_ENV_EXTRA=(NODE_PATH="$NODE_LIB" PGCLAIM_NODE_DEPS=debian)
        SUMMARY+=("node: npm unreachable; pg $(node -p "require('$NODE_LIB/pg/package.json').version") from Debian ($NODE_LIB)")
    fi
    # The README's install command in a fresh directory: an app that loads
    # pg-claim and pg, and reads the stats through PG_CLAIM_DSN.
    if [[ "$NODE_DEPS" == "npm ci" ]]; then
        say "npm install --install-links clients/node in a fresh directory"
        APP="$SCRATCH/freshapp"
        mkdir -p "$APP"
        if grep -q 'npm install --install-links ' "$ROOT/clients/node/README.md" &&
           (cd "$APP" && timeout 300 npm install --no-audit --no-fund --install-links "$ROOT/clients/node" >/dev/null &&
            [[ ! -L node_modules/pg-claim ]] &&
            PG_CLAIM_DSN="$DIRECT" timeout 60 node -e "
require('pg');
const { Client } = require('pg-claim');
const c = new Client();
c.stats().then(() => c.close()).then(() => console.log('fresh app: ok'), (e) => { console.error(e); process.exit(1); });"); then
            PASSED=$((PASSED + 1)); SUMMARY+=("node: npm install --install-links in a fresh directory: ok")
        else
            FAILED=$((FAILED + 1)); SUMMARY+=("node: npm install --install-links in a fresh directory: FAILED")
        fi
        # The README's npm pack tarball, installed in another fresh directory.
        say "npm pack clients/node; npm install the tarball in a fresh directory"
        APP="$SCRATCH/packapp"
        mkdir -p "$APP" "$SCRATCH/npmpack"
        if (cd "$ROOT/clients/node" && npm pack --silent --pack-destination "$SCRATCH/npmpack" >/dev/null) &&
           (cd "$APP" && timeout 300 npm install --no-audit --no-fund "$SCRATCH"/npmpack/pg-claim-*.tgz >/dev/null &&
            PG_CLAIM_DSN="$DIRECT" timeout 60 node -e "
const { Client } = require('pg-claim');
const c = new Client();
c.stats().then(() => c.close()).then(() => console.log('packed app: ok'), (e) => { console.error(e); process.exit(1); });"); then
            PASSED=$((PASSED + 1)); SUMMARY+=("node: npm pack tarball in a fresh directory: ok")
        else
            FAILED=$((FAILED + 1)); SUMMARY+=("node: npm pack tarball in a fresh directory: FAILED")
        fi
    elif [[ -n "$NODE_DEPS" ]]; then
        SUMMARY+=("node: fresh-directory install skipped: npm cannot reach its registry")
    fi
    if [[ -n "$NODE_DEPS" ]]; then
        if [[ "$NODE_DEPS" == "npm ci" ]]; then say "node: npm ci"; else say "node: Debian node-pg (npm unreachable)"; fi
        both_ways run_node "the Node suite"
    else
        FAILED=$((FAILED + 1))
        SUMMARY+=("node: npm install failed, and Debian's node-pg could not be installed")
    fi
fi

# The Go client: go vet, one test binary (GOPATH mode: Debian's pgx under
# /usr/share/gocode, the client linked in as import path "pgclaim", as its
# README says), run directly and through PgBouncer; then the README's build
# of an app of one's own that imports it.
GOP="$SCRATCH/gopath"
GO_ENV=(GO111MODULE=off GOFLAGS= GOPATH="$GOP:/usr/share/gocode")
run_go() {   # $1 label, $2 dsn
    local label="$1" dsn="$2" log="$SCRATCH/go-$1.log" rc p f s
    say "Go suite, $label"
    local select=()
    if [[ -n "${CLIENTS_GO_RUN:-}" ]]; then select=(-test.run "$CLIENTS_GO_RUN"); fi
    local via=""; [[ $label == pgbouncer ]] && via=1
    (cd "$ROOT/clients/go" && PG_CLAIM_DSN="$dsn" PG_CLAIM_VIA_PGBOUNCER="$via" timeout 300 "$SCRATCH/pgclaim.test" \
        -test.v -test.count=1 -test.timeout=240s "${select[@]}") >"$log" 2>&1
    rc=$?
    # The verdicts, and under each failed test its messages (indented lines).
    awk '/^--- FAIL/ { print; fail = 1; n = 0; next }
         /^(--- |FAIL|ok|PASS|panic)/ { fail = 0; if ($0 !~ /^--- PASS/) print; next }
         fail && /^ / && n++ < 20 { print }' "$log"
    p=$(grep -c '^--- PASS' "$log"); f=$(grep -c '^--- FAIL' "$log"); s=$(grep -c '^--- SKIP' "$log")
    if (( rc != 0 && f == 0 )); then f=1; tail -n 30 "$log"; fi
    PASSED=$((PASSED + p)); FAILED=$((FAILED + f))
    SUMMARY+=("go ($label): $p passed, $f failed, $s skipped")
}
if [[ ( -z "$ONLY" || "$ONLY" == go ) && -f "$ROOT/clients/go/go.mod" ]]; then
    mkdir -p "$GOP/src/goapp"
    ln -sfn "$ROOT/clients/go" "$GOP/src/pgclaim"
    say "go vet and go test -c in clients/go ($(go version | awk '{print $3}'), GOPATH mode)"
    if (cd "$GOP/src/pgclaim" && env "${GO_ENV[@]}" go vet . &&
        env "${GO_ENV[@]}" go test -c -o "$SCRATCH/pgclaim.test" .); then
        PASSED=$((PASSED + 1)); SUMMARY+=("go: go vet and build: ok")
        both_ways run_go "the Go suite"
    else
        FAILED=$((FAILED + 1)); SUMMARY+=("go: go vet or build FAILED")
    fi
    cat >"$GOP/src/goapp/main.go" <<'GOEOF'
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"pgclaim"
)

func main() {
	ctx := context.Background()
	c, err := pgclaim.Connect(ctx, "")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer c.Close(ctx)
	if _, err := c.Once(ctx, fmt.Sprintf("goapp:%d", time.Now().UnixNano()), time.Minute); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println("app: ok")
}
GOEOF
    if grep -q 'GO111MODULE=off GOPATH=$HOME/go:/usr/share/gocode go build' "$ROOT/clients/go/README.md" &&
       (cd "$GOP/src/goapp" && env "${GO_ENV[@]}" go build -o "$SCRATCH/goapp" . &&
        PG_CLAIM_DSN="$DIRECT" timeout 60 "$SCRATCH/goapp" | grep -q 'app: ok'); then
        PASSED=$((PASSED + 1)); SUMMARY+=("go: an app of one's own built in GOPATH mode: ok")
    else
        FAILED=$((FAILED + 1)); SUMMARY+=("go: an app of one's own built in GOPATH mode: FAILED")
    fi
fi

echo
echo "== summary"
for line in "${SUMMARY[@]}"; do echo "  $line"; done
