# test/lib/cluster.sh — sourced by the test scripts that start their own
# server (test/hardening/soak.sh, test/hardening/sqlsmith.sh, test/valgrind/valgrind.sh,
# test/valgrind/ubsan.sh, test/hardening/memory_flat.sh, test/major_dump.sh,
# test/ops/exporter_test.sh, test/ops/dashboard_test.sh, test/clients.sh).
#
# Gives each script a throwaway cluster owned by the unprivileged OS user
# (PGCLAIM_USER, default pgclaim) on a free port with a unix socket in its own
# directory, helpers to install missing Debian packages, and the pass/fail
# bookkeeping with the script's last line.
#
# harness NAME (first, as root):
#   pass MSG / fail MSG / check NAME EXPECTED ACTUAL   count a result
#   say MSG                                            a progress line
#   at exit: harness_cleanup (when the script defines it), the cluster stopped
#   and its directory removed (CL_KEEP=1 keeps it), the server log's tail when
#   something failed and HARNESS_LOG_TAIL=1, and the last line
#   "NAME: N passed, N failed" (exit status 1 if anything failed, or if the
#   script exited non-zero without a failure counted).
#
# After `cluster_init NAME`:
#   $CL_DIR      scratch directory (owned by the user), removed by cluster_cleanup
#   $CL_DATA     data directory
#   $CL_LOG      server log
#   $CL_PORT     port
#   as_user CMD  run CMD as the user with PostgreSQL's bin directory first in PATH
#   psql_cl ...  psql on the cluster (database $CL_DB, default postgres), no ~/.psqlrc
#   cluster_start / cluster_stop [mode] / cluster_crash
#   cluster_database DB  a database with pg_claim in it (CL_DB=DB)
#   claim_initdb ...     the initdb and settings of cluster_init (test/lib/initdb.sh)
#   debian_node_pg       Debian's node-pg for NODE_PATH (when npm is unreachable)

# PG_BIN from the caller, else the major test/pg-major.sh picks
[[ -n ${PG_BIN:-} ]] || . "$(dirname "${BASH_SOURCE[0]}")/../pg-major.sh"
# shellcheck source=lib/initdb.sh
. "$(dirname "${BASH_SOURCE[0]}")/initdb.sh"   # claim_initdb
PG_MAJOR=${PG_MAJOR:-$(basename "$(dirname "$PG_BIN")")}
RUN_USER="${PGCLAIM_USER:-pgclaim}"
CL_DB=${CL_DB:-postgres}

# need_packages PKG...: apt-get install what is missing (apt-get update first).
need_packages() {
    local missing=() p
    for p in "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
    done
    (( ${#missing[@]} == 0 )) && return 0
    echo "installing: ${missing[*]}"
    local try
    for try in 1 2 3 4 5 6; do
        # another apt-get may hold the dpkg lock: wait and try again
        if DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null 2>&1 &&
           DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
               "${missing[@]}" </dev/null >/dev/null 2>&1; then
            return 0
        fi
        sleep 10
    done
    echo "could not install ${missing[*]}" >&2
    return 1
}

# need_extension: pg_claim is installed for this major (test/setup.sh).
need_extension() {
    [[ -f "$("$PG_BIN/pg_config" --sharedir)/extension/pg_claim.control" ]] && return 0
    echo "pg_claim is not installed: run test/setup.sh first" >&2
    return 1
}

ensure_user() {
    id "$RUN_USER" >/dev/null 2>&1 || useradd --system --create-home --shell /bin/bash "$RUN_USER"
}

# free_port: a random port in 20000-40000 that nothing listens on.
free_port() {
    local p i
    for i in $(seq 1 50); do
        p=$(( 20000 + RANDOM % 20000 ))
        if ! ss -Hltn "sport = :$p" 2>/dev/null | grep -q . &&
           ! ls /tmp/.s.PGSQL."$p" >/dev/null 2>&1 &&
           ! ls /var/run/postgresql/.s.PGSQL."$p" >/dev/null 2>&1; then
            echo "$p"; return 0
        fi
    done
    return 1
}

as_user() { runuser -u "$RUN_USER" -- env HOME="$CL_DIR" PATH="$PG_BIN:$PATH" "$@"; }
psql_cl() { as_user psql -X -q -v ON_ERROR_STOP=1 -h "$CL_DIR" -p "$CL_PORT" -d "$CL_DB" "$@"; }

# cluster_init NAME [extra postgresql.conf lines on stdin]
cluster_init() {
    ensure_user
    CL_DIR="$(mktemp -d "/tmp/pg_claim-$1.XXXXXX")"
    CL_DATA="$CL_DIR/data"
    CL_LOG="$CL_DIR/server.log"
    CL_PORT="$(free_port)"
    chown "$RUN_USER:" "$CL_DIR"
    chmod 755 "$CL_DIR"
    claim_initdb "$1" "$CL_DATA" "$CL_PORT" "$CL_DIR" '' "log_line_prefix = '%m [%p] '" || return 1
    if [[ ! -t 0 ]]; then cat >>"$CL_DATA/postgresql.conf"; fi
}

cluster_start() {
    as_user pg_ctl -D "$CL_DATA" -l "$CL_LOG" -w -t "${CL_START_TIMEOUT:-120}" start >/dev/null
}

cluster_stop() {
    [[ -n "${CL_DATA:-}" && -f "$CL_DATA/postmaster.pid" ]] || return 0
    as_user pg_ctl -D "$CL_DATA" -w -t "${CL_STOP_TIMEOUT:-60}" stop -m "${1:-fast}" >/dev/null 2>&1 ||
        as_user pg_ctl -D "$CL_DATA" stop -m immediate >/dev/null 2>&1 || true
}

# cluster_database DB: creates database DB with pg_claim in it; CL_DB=DB.
cluster_database() {
    CL_DB=postgres psql_cl -c "CREATE DATABASE $1" >/dev/null || { fail "CREATE DATABASE $1"; return 1; }
    CL_DB=$1
    psql_cl -c "CREATE EXTENSION pg_claim" >/dev/null || { fail "CREATE EXTENSION pg_claim"; return 1; }
}

# debian_node_pg: Debian's node-pg, for a Node script when npm is unreachable.
# Installed with apt-get; where that cannot be (a nodejs from elsewhere, e.g.
# NodeSource, does not satisfy Debian's node-* dependencies), node-pg and
# split2 are unpacked into $CL_DIR. Prints the folder for NODE_PATH.
debian_node_pg() {
    local dir deb
    dir="$(dpkg -L node-pg 2>/dev/null | grep -E '/nodejs/pg/package\.json$' | head -n1)"
    if [[ -z "$dir" ]]; then
        say "installing: node-pg" >&2
        need_packages node-pg >&2 &&
            dir="$(dpkg -L node-pg 2>/dev/null | grep -E '/nodejs/pg/package\.json$' | head -n1)"
    fi
    if [[ -z "$dir" ]]; then
        say "apt-get could not install node-pg: unpacking node-pg and node-split2 into $CL_DIR/debnode" >&2
        mkdir -p "$CL_DIR/debs" "$CL_DIR/debnode" && chmod 777 "$CL_DIR/debs"
        (cd "$CL_DIR/debs" && apt-get download node-pg node-split2 >&2) || return 1
        for deb in "$CL_DIR"/debs/*.deb; do dpkg-deb -x "$deb" "$CL_DIR/debnode" || return 1; done
        dir="$(find "$CL_DIR/debnode" -path '*/nodejs/pg/package.json' | head -n1)"
    fi
    [[ -n "$dir" ]] || return 1
    dirname "$(dirname "$dir")"
}

# cluster_crash: an immediate shutdown (no checkpoint: crash recovery at the
# next start, unlogged tables emptied) and a start.
cluster_crash() {
    as_user pg_ctl -D "$CL_DATA" -w stop -m immediate >/dev/null 2>&1 || true
    cluster_start
}

# cluster_cleanup: stop the server; remove the directory unless CL_KEEP=1.
cluster_cleanup() {
    cluster_stop fast
    if [[ -n "${CL_DIR:-}" && -d "$CL_DIR" ]]; then
        if [[ "${CL_KEEP:-0}" == 1 ]]; then
            echo "kept: $CL_DIR"
        else
            rm -rf "$CL_DIR"
        fi
    fi
}

# ---------------------------------------------------------------- harness
harness() {
    HARNESS_NAME=$1
    PASSED=0
    FAILED=0
    trap harness_finish EXIT
    trap 'exit 130' INT TERM
    if [[ $(id -u) -ne 0 ]]; then
        echo "$HARNESS_NAME must run as root (it installs packages and starts servers as $RUN_USER)" >&2
        exit 1
    fi
}

say() { printf '==> %s\n' "$*"; }
pass() { PASSED=$((PASSED + 1)); echo "ok: $*"; }
fail() { FAILED=$((FAILED + 1)); echo "FAILED: $*"; }
# check NAME EXPECTED ACTUAL
check() {
    if [[ "$2" == "$3" ]]; then pass "$1"; else fail "$1: expected $2, got ${3:-<none>}"; fi
}

harness_finish() {
    local rc=$?
    trap - EXIT
    if (( FAILED > 0 )) && [[ ${HARNESS_LOG_TAIL:-0} == 1 && -f "${CL_LOG:-}" ]]; then
        echo "--- server log (tail) ---"; tail -n 20 "$CL_LOG"
    fi
    if declare -F harness_cleanup >/dev/null; then harness_cleanup; fi
    cluster_cleanup
    (( rc != 0 && FAILED == 0 )) && FAILED=1
    echo "$HARNESS_NAME: $PASSED passed, $FAILED failed"
    (( FAILED == 0 )) && exit 0 || exit 1
}
