#!/usr/bin/env bash
# test/drivers.sh — the worker loops of docs/drivers.md, run as written by each
# driver against a throwaway cluster whose tokens are as large as the design
# allows.
#
# Run as root from anywhere, after test/setup.sh installed the extension:
#
#   bash test/drivers.sh
#
#   1. installs the missing Debian packages: python3-psycopg, python3-asyncpg,
#      libpostgresql-jdbc-java and default-jdk-headless, golang-go and
#      golang-github-jackc-pgx-v4-dev (built in GOPATH mode), ruby-pg,
#      libdbd-pg-perl; node-postgres comes from npm (test/drivers/node's
#      package-lock.json), or from Debian's node-pg when npm cannot reach its
#      registry (the output says which);
#   2. checks that every snippet under test/drivers/ appears verbatim as a code
#      block of docs/drivers.md (one check per file);
#   3. starts a cluster as the unprivileged user "pgclaim" (preloaded, on a free
#      port), creates database "drivers" with the extension, a login role "app"
#      that is granted claim_worker, the user's table sent_mail and the queue
#      "emails"; puts the database in the highest partition (claim.set_partition),
#      hands out one token and moves claim.token_seq near its MAXVALUE, so that
#      every token the drivers see lies within 100,000 of 2^53 - 1, the largest
#      token the design allows;
#   4. for each driver: enqueues two items with an address and one without, runs
#      the worker as "app" with the libpq environment (PGHOST, PGPORT,
#      PGDATABASE, PGUSER), and checks its output (two "done", one "failed", one
#      "stale <token> PC001" for the replayed token) and the database (sent_mail
#      holds the printed tokens, exactly, above the floor; the completed items'
#      results; the failed item's error and attempt);
#   5. runs the trap checks of docs/drivers.md ("ok NAME" / "not ok NAME"
#      lines): pgjdbc's interval arguments, ruby-pg's booleans, node-postgres's
#      arrays.
# Prints "ok - ..." / "not ok - ..." per check; the last line is
# "drivers: N passed, N failed". Exits non-zero on any failure. The server is
# stopped and the scratch directory removed on exit, whatever happens.
#
# Environment: PGCLAIM_USER (default pgclaim), DRIVERS_ONLY (space-separated
# subset of: psycopg asyncpg jdbc pgx ruby perl node), DRIVERS_KEEP=1 keeps the
# scratch directory.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
. "$ROOT/test/pg-major.sh"   # PG_MAJOR, PG_BIN
. "$ROOT/test/lib/initdb.sh"   # claim_initdb
RUN_USER="${PGCLAIM_USER:-pgclaim}"
PY=/usr/bin/python3
DB=drivers
SNIPPETS="$ROOT/test/drivers"
ALL_DRIVERS=(psycopg asyncpg jdbc pgx ruby perl node)
DRIVERS=(${DRIVERS_ONLY:-${ALL_DRIVERS[@]}})
JAR=/usr/share/java/postgresql.jar

PASSED=0
FAILED=0
say() { printf '==> %s\n' "$*"; }
pass() { PASSED=$((PASSED + 1)); echo "ok - $*"; }
fail() { FAILED=$((FAILED + 1)); echo "not ok - $*"; }
finish_line() { echo "drivers: $PASSED passed, $FAILED failed"; }

if [[ $(id -u) -ne 0 ]]; then
    echo "test/drivers.sh must run as root (it installs packages and starts a server as $RUN_USER)" >&2
    FAILED=1; finish_line; exit 1
fi

# --- 1. packages --------------------------------------------------------------
PACKAGES=(python3 python3-psycopg python3-asyncpg libpostgresql-jdbc-java default-jdk-headless
          golang-go golang-github-jackc-pgx-v4-dev ruby ruby-pg perl libdbd-pg-perl
          iproute2 util-linux)
missing=()
for p in "${PACKAGES[@]}"; do
    if [[ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" != "install ok installed" ]]; then
        missing+=("$p")
    fi
done
# A node from elsewhere (e.g. NodeSource) brings its own npm and conflicts with
# Debian's npm package: install only what is missing.
command -v node >/dev/null 2>&1 || missing+=(nodejs)
command -v npm >/dev/null 2>&1 || missing+=(npm)
if ((${#missing[@]})); then
    say "installing: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    { apt-get update -q && apt-get install -y -q --no-install-recommends "${missing[@]}" </dev/null; } || {
        echo "could not install ${missing[*]}" >&2
        FAILED=1; finish_line; exit 1
    }
else
    say "packages: all present"
fi
if ! id -u "$RUN_USER" >/dev/null 2>&1; then
    useradd --create-home --shell /bin/bash "$RUN_USER"
fi
if [[ ! -f "$("$PG_BIN/pg_config" --sharedir)/extension/pg_claim.control" ]]; then
    echo "pg_claim is not installed: run test/setup.sh first" >&2
    FAILED=1; finish_line; exit 1
fi

SCRATCH="$(mktemp -d /tmp/pg_claim-drivers.XXXXXX)"
chmod 755 "$SCRATCH"
# Commands run as the unprivileged user start where that user may be (a
# checkout under /root is not): the compilers (go build) need their cwd.
cd "$SCRATCH" || exit 1
PGDATA="$SCRATCH/data"
as_user() { runuser -u "$RUN_USER" -- env HOME="$SCRATCH/home" PATH="$PG_BIN:$PATH" "$@"; }
cleanup() {
    local rc=$?
    if [[ -f "$PGDATA/postmaster.pid" ]]; then
        as_user pg_ctl -D "$PGDATA" stop -m fast -w >/dev/null 2>&1 || true
    fi
    if [[ "${DRIVERS_KEEP:-0}" == 1 ]]; then
        echo "scratch directory kept: $SCRATCH" >&2
    else
        rm -rf "$SCRATCH"
    fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- 2. the snippets are the documentation's code blocks ------------------------
# Every file under test/drivers (but package files) must be one fenced code
# block of docs/drivers.md, byte for byte.
doc_blocks="$SCRATCH/blocks"
mkdir -p "$doc_blocks"
"$PY" - "$ROOT/docs/drivers.md" "$doc_blocks" <<'PYEOF'
import pathlib, re, sys
text = pathlib.Path(sys.argv[1]).read_text(encoding="utf-8")
for i, m in enumerate(re.finditer(r"^```[a-z]*\n(.*?)^```$", text, re.S | re.M)):
    pathlib.Path(sys.argv[2], "%03d" % i).write_text(m.group(1), encoding="utf-8")
PYEOF
while IFS= read -r f; do
    rel="${f#"$ROOT/"}"
    found=""
    for b in "$doc_blocks"/*; do
        if cmp -s "$f" "$b"; then found=1; break; fi
    done
    if [[ -n "$found" ]]; then pass "docs/drivers.md shows $rel verbatim"; else fail "docs/drivers.md shows $rel verbatim"; fi
done < <(find "$SNIPPETS" -type f \( -name '*.py' -o -name '*.java' -o -name '*.go' -o -name '*.rb' \
             -o -name '*.pl' -o -name '*.js' \) -not -path '*/node_modules/*' | sort)

# --- 3. the cluster -------------------------------------------------------------
mkdir -p "$SCRATCH/home"
chown -R "$RUN_USER:" "$SCRATCH"
free_port() {
    local port
    for _ in $(seq 1 200); do
        port=$((20000 + RANDOM % 20000))
        if ! ss -Htan "( sport = :$port )" 2>/dev/null | grep -q . &&
           "$PY" -c "import socket,sys; s=socket.socket(); s.bind(('127.0.0.1', int(sys.argv[1]))); s.close()" "$port" 2>/dev/null; then
            echo "$port"; return 0
        fi
    done
    return 1
}
PGPORT="$(free_port)" || { echo "no free port" >&2; FAILED=$((FAILED + 1)); finish_line; exit 1; }
say "starting a throwaway cluster as $RUN_USER in $SCRATCH (port $PGPORT)"
claim_initdb drivers "$PGDATA" "$PGPORT" "$SCRATCH" 127.0.0.1
if ! as_user pg_ctl -D "$PGDATA" -l "$SCRATCH/server.log" -w start >/dev/null; then
    tail -n 30 "$SCRATCH/server.log"
    FAILED=$((FAILED + 1)); finish_line; exit 1
fi
sql() { as_user psql -X -Atq -v ON_ERROR_STOP=1 -h "$SCRATCH" -p "$PGPORT" "$@"; }
sql -d postgres -c "CREATE DATABASE $DB" >/dev/null
if ! sql -d "$DB" >/dev/null <<'EOF'
CREATE EXTENSION pg_claim;
CREATE ROLE app LOGIN;
GRANT claim_worker, claim_producer TO app;
CREATE TABLE public.sent_mail (item_id bigint PRIMARY KEY, token bigint NOT NULL, address text NOT NULL);
GRANT SELECT, INSERT ON public.sent_mail TO app;
SELECT claim.create_queue('emails', lease => '30 seconds', max_attempts => 3, backoff => '1 hour',
                          retain => '1 hour');
SELECT claim.create_queue('traps');
EOF
then
    fail "set-up of database $DB"; finish_line; exit 1
fi

# Large tokens: the highest partition (the one of the token 2^53 - 1, set with
# the admin operation claim.set_partition where the extension has it), then
# one grant (the first grant after a server start moves the sequence: README,
# "Tokens"), then claim.token_seq moved to 100,000 below its MAXVALUE.
# FLOOR: a token handed out after the move; every token the drivers see is
# higher. TOP: the largest token of the partition (a token is a constant of
# the partition plus the sequence value, in every layout).
if [[ "$(sql -d "$DB" -c "SELECT pg_catalog.to_regprocedure('claim.set_partition(integer)') IS NOT NULL")" == t ]]; then
    sql -d "$DB" -c "SELECT claim.set_partition(claim.token_partition(9007199254740991))" >/dev/null ||
        { fail "claim.set_partition"; finish_line; exit 1; }
fi
FLOOR_AND_TOP="$(sql -d "$DB" <<'EOF'
SELECT claim.guard_begin('drivers: first grant', '1 second') IS NOT NULL;
SELECT pg_catalog.setval('claim.token_seq', s.max_value - 100000, true)
FROM pg_catalog.pg_sequences s WHERE s.schemaname = 'claim' AND s.sequencename = 'token_seq';
SELECT t.token, t.token + s.max_value - s.last_value
FROM (SELECT claim.guard_begin('drivers: floor', '1 second') AS token) t,
     pg_catalog.pg_sequences s WHERE s.schemaname = 'claim' AND s.sequencename = 'token_seq';
EOF
)"
FLOOR_AND_TOP="$(tail -n 1 <<<"$FLOOR_AND_TOP")"
FLOOR="${FLOOR_AND_TOP%%|*}"
TOP="${FLOOR_AND_TOP##*|}"
if [[ "$FLOOR" =~ ^[0-9]+$ && "$TOP" =~ ^[0-9]+$ ]] && (( TOP - FLOOR < 100000 )); then
    pass "tokens start at $FLOOR, within 100000 of the largest token $TOP"
else
    fail "large tokens: floor '$FLOOR', top '$TOP'"
    finish_line; exit 1
fi
if (( TOP == 9007199254740991 )); then
    pass "the largest token of the partition is 2^53 - 1"
else
    fail "the largest token of the partition is $TOP, not 2^53 - 1"
fi

DRIVER_ENV=(PGHOST=127.0.0.1 PGPORT="$PGPORT" PGDATABASE="$DB" PGUSER=app)
as_app() { runuser -u "$RUN_USER" -- env -i PATH="/usr/bin:/bin" HOME="$SCRATCH/home" LANG=C.UTF-8 "${DRIVER_ENV[@]}" "$@"; }

# --- 4. each driver's worker ----------------------------------------------------
# Per driver: a fresh set of items, the worker run as written, then the checks.
# enqueue_items prints the ids of the two items with an address, then the one without.
enqueue_items() {
    sql -d "$DB" <<'EOF'
TRUNCATE public.sent_mail;
SELECT claim.enqueue('emails', '{"to": "a@example.com"}');
SELECT claim.enqueue('emails', '{"to": "b@example.com"}');
SELECT claim.enqueue('emails', '{}');
EOF
}

# check_worker NAME LOG IDS...: the output and the database after a run.
check_worker() {
    local name=$1 log=$2 a=$3 b=$4 c=$5 out
    out="$("$PY" - "$log" "$a" "$b" "$c" "$FLOOR" "$TOP" <<'PYEOF'
import sys
log, a, b, c, floor, top = sys.argv[1], *map(int, sys.argv[2:])
lines = [l.split() for l in open(log, encoding="utf-8", errors="replace").read().splitlines()
         if l.split()[:1] in (["done"], ["failed"], ["stale"])]
done = {int(l[1]): int(l[2]) for l in lines if l[0] == "done" and len(l) == 3}
failed = [(int(l[1]), int(l[2])) for l in lines if l[0] == "failed" and len(l) == 3]
stale = [l[1:] for l in lines if l[0] == "stale"]
problems = []
if sorted(done) != sorted([a, b]) or len(lines) != 4:
    problems.append("expected done %d, %d, failed %d and one stale line; got %r" % (a, b, c, lines))
if [f[0] for f in failed] != [c]:
    problems.append("failed: %r" % failed)
tokens = list(done.values()) + [f[1] for f in failed]
if not all(floor < t <= top for t in tokens) or len(set(tokens)) != len(tokens):
    problems.append("tokens %r not distinct within (%d, %d]" % (tokens, floor, top))
if len(stale) != 1 or len(stale[0]) != 2 or stale[0][1] != "PC001" or int(stale[0][0]) not in done.values():
    problems.append("stale line: %r" % stale)
print("; ".join(problems) if problems else "ok")
for i, t in sorted(done.items()):
    print(i, t)
PYEOF
)"
    if [[ "$(head -n 1 <<<"$out")" == ok ]]; then
        pass "$name: output (done, failed, stale PC001), tokens in ($FLOOR, $TOP]"
    else
        fail "$name: output: $(head -n 1 <<<"$out")"
        sed 's/^/    /' "$log" | tail -n 20
        return
    fi
    local want got
    want="$(tail -n +2 <<<"$out" | sort)"
    got="$(sql -d "$DB" -F ' ' -c "SELECT item_id, token FROM public.sent_mail ORDER BY 1" | sort)"
    if [[ "$got" == "$want" ]]; then
        pass "$name: sent_mail holds the printed tokens"
    else
        fail "$name: sent_mail holds [$got], the worker printed [$want]"
    fi
    got="$(sql -d "$DB" -F ' ' <<EOF
SELECT id, state, result::text FROM claim.finished_items WHERE queue = 'emails' AND id IN ($a, $b) ORDER BY id;
SELECT id, state, attempt, error FROM claim.item_state('emails', $c) s, (SELECT $c AS id) i;
EOF
)"
    want="$a completed [\"a@example.com\"]
$b completed [\"b@example.com\"]
$c scheduled 1 no address"
    if [[ "$got" == "$want" ]]; then
        pass "$name: results of the completed items, error of the failed one"
    else
        fail "$name: items: got [$got], want [$want]"
    fi
}

# run_worker NAME COMMAND...: enqueue, run the worker (as "app"), check.
run_worker() {
    local name=$1 log="$SCRATCH/$1.log" ids rc
    shift
    mapfile -t ids < <(enqueue_items)
    say "$name worker"
    (cd "$SCRATCH/home" && as_app timeout 120 "$@") >"$log" 2>&1
    rc=$?
    sed 's/^/    /' "$log" | head -n 40
    if (( rc == 0 )); then pass "$name: the worker ran"; else fail "$name: the worker exited $rc"; fi
    check_worker "$name" "$log" "${ids[@]}"
    # The failed item waits an hour: drop the queue's items for the next driver.
    sql -d "$DB" -c "SELECT claim.drop_queue('emails')" \
        -c "SELECT claim.create_queue('emails', lease => '30 seconds', max_attempts => 3, backoff => '1 hour', retain => '1 hour')" >/dev/null
}

# run_traps NAME COMMAND...: a trap check printing "ok NAME" / "not ok NAME" lines.
run_traps() {
    local name=$1 log="$SCRATCH/$1-traps.log" rc line n=0
    shift
    (cd "$SCRATCH/home" && as_app timeout 120 "$@") >"$log" 2>&1
    rc=$?
    while IFS= read -r line; do
        case "$line" in
            "ok "*) pass "$name: ${line#ok }"; n=$((n + 1)) ;;
            "not ok "*) fail "$name: ${line#not ok }"; n=$((n + 1)) ;;
        esac
    done <"$log"
    if (( rc != 0 || n == 0 )); then
        fail "$name traps exited $rc after $n checks"
        sed 's/^/    /' "$log" | tail -n 20
    fi
}

# The snippets are copied where "app"'s processes can read them.
cp -r "$SNIPPETS" "$SCRATCH/home/snippets"
rm -rf "$SCRATCH/home/snippets/node/node_modules"
chown -R "$RUN_USER:" "$SCRATCH/home"
S="$SCRATCH/home/snippets"

node_ready() {   # node-postgres for the Node worker: npm ci, else Debian's node-pg
    if (cd "$S/node" && as_user timeout 300 npm ci --no-audit --no-fund >"$SCRATCH/npm.log" 2>&1); then
        say "node: pg $(node -p "require('$S/node/node_modules/pg/package.json').version") from npm"
        return 0
    fi
    tail -n 5 "$SCRATCH/npm.log"
    local dir
    dir="$(dpkg -L node-pg 2>/dev/null | grep -E '/nodejs/pg/package\.json$' | head -n1)"
    if [[ -z "$dir" ]]; then
        say "npm unreachable: installing Debian's node-pg"
        { DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends node-pg </dev/null; } >/dev/null 2>&1
        dir="$(dpkg -L node-pg 2>/dev/null | grep -E '/nodejs/pg/package\.json$' | head -n1)"
    fi
    if [[ -z "$dir" ]]; then
        say "npm unreachable: unpacking Debian's node-pg and node-split2"
        mkdir -p "$SCRATCH/debs" "$SCRATCH/debnode" && chmod 777 "$SCRATCH/debs"
        (cd "$SCRATCH/debs" && apt-get download node-pg node-split2 >/dev/null 2>&1) &&
            for deb in "$SCRATCH"/debs/*.deb; do dpkg-deb -x "$deb" "$SCRATCH/debnode"; done
        dir="$(find "$SCRATCH/debnode" -path '*/nodejs/pg/package.json' | head -n1)"
    fi
    [[ -n "$dir" ]] || return 1
    DRIVER_ENV+=(NODE_PATH="$(dirname "$(dirname "$dir")")")
    say "node: npm unreachable; pg $(node -p "require('$dir').version") from Debian"
}

for d in "${DRIVERS[@]}"; do
    case "$d" in
        psycopg) run_worker psycopg "$PY" "$S/psycopg/worker.py" ;;
        asyncpg) run_worker asyncpg "$PY" "$S/asyncpg/worker.py" ;;
        jdbc)
            run_worker jdbc java -cp "$JAR" "$S/jdbc/Worker.java"
            run_traps jdbc java -cp "$JAR" "$S/jdbc/Strings.java" ;;
        pgx)
            # GOPATH mode: Debian's Go packages under /usr/share/gocode.
            if as_user env GO111MODULE=off GOPATH="$SCRATCH/home/go:/usr/share/gocode" \
                   GOCACHE="$SCRATCH/home/gocache" GOFLAGS= \
                   go build -o "$SCRATCH/home/pgx-worker" "$S/pgx/worker.go" >"$SCRATCH/go.log" 2>&1; then
                pass "pgx: go build (GOPATH mode)"
                run_worker pgx "$SCRATCH/home/pgx-worker"
            else
                fail "pgx: go build"; sed 's/^/    /' "$SCRATCH/go.log" | tail -n 20
            fi ;;
        ruby)
            run_worker ruby ruby "$S/ruby/worker.rb"
            run_traps ruby ruby "$S/ruby/booleans.rb" ;;
        perl) run_worker perl perl "$S/perl/worker.pl" ;;
        node)
            if node_ready; then
                run_worker node node "$S/node/worker.js"
                run_traps node node "$S/node/arrays.js"
            else
                fail "node: neither npm nor Debian's node-pg could provide pg"
            fi ;;
        *) fail "unknown driver $d" ;;
    esac
done

echo
finish_line
(( FAILED == 0 ))
