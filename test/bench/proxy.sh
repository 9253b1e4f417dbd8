#!/usr/bin/env bash
# pg_claim through a PL/Proxy front (docs/partitions.md): the cost of the hop.
# Four partition clusters and one front on this machine; the workload is
# claim_next(n => 1) + complete(token), one item per transaction pair, by
# BENCH_CLIENTS pgbench clients. Windows, each BENCH_DURATION seconds:
#   direct        on partition 0, queue q0 (which the front routes to partition 0)
#   front         the same queue through the front
#   direct x4     all four partitions at once, directly (clients split over them)
#   front x4      16 queues on all four partitions through the front
#   front spread  one queue spread over the four partitions, through the front
#                 (against "front": one queue on one partition, through the front)
#   py direct     the Python client (psycopg) calling partition 0 itself, queue q0
#   py routed     pg_claim.PartitionedClient routing the same calls to partition 0
#                 (against "py direct": the cost of routing in the client; skipped
#                 without python3 and psycopg; py direct, routed, routed, direct,
#                 each side the mean of its two windows)
# Each figure is the median over BENCH_ROUNDS rounds; the ratios compare
# windows of the same run. On one machine the four partitions share its
# cores, so x4 shows the aggregate does not grow here; on separate servers
# each partition does what one server does.
#
#   bash test/bench/proxy.sh              10 s per window, 3 rounds
#   QUICK=1 bash test/bench/proxy.sh      4 s per window, 1 round
#
# Environment: BENCH_DURATION, BENCH_ROUNDS, BENCH_CLIENTS (8), BENCH_PORT
# (first of five ports, default random in 20000-39000), PG_CONFIG,
# BENCH_OUT (default test/bench/out/proxy). Needs pg_claim and pg_claim_proxy
# installed (test/setup.sh) and, as root, the OS user pgclaim.
set -Eeuo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
OUT=${BENCH_OUT:-$HERE/out/proxy}
if [[ ${QUICK:-0} == 1 ]]; then d_dur=4; d_rounds=1; else d_dur=10; d_rounds=3; fi
DUR=${BENCH_DURATION:-$d_dur}
ROUNDS=${BENCH_ROUNDS:-$d_rounds}
CLIENTS=${BENCH_CLIENTS:-8}
PORT0=${BENCH_PORT:-$((20000 + RANDOM % 19000))}
RUN_USER=pgclaim
P=4

log() { printf '[proxy bench %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

. "$HERE/../pg-major.sh" || true   # PG_MAJOR, PG_CONFIG (the caller's, else the picked major's)
PGBIN=$("$PG_CONFIG" --bindir)
SHARE=$("$PG_CONFIG" --sharedir)
[[ -f "$("$PG_CONFIG" --pkglibdir)/pg_claim.so" ]] || die "pg_claim is not installed (run test/setup.sh)"
[[ -f $SHARE/extension/pg_claim_proxy.control ]] || die "pg_claim_proxy is not installed (make -C proxy install)"
[[ -f $SHARE/extension/plproxy.control ]] || die "PL/Proxy is not installed (apt-get install postgresql-$PG_MAJOR-plproxy)"

if [[ $(id -u) == 0 ]]; then
    AS=(runuser -u "$RUN_USER" --)
    DBUSER=$RUN_USER
else
    AS=()
    DBUSER=$(id -un)
fi

WORK=$(mktemp -d /tmp/pg_claim_proxy_bench.XXXXXX)
chmod 755 "$WORK"
[[ $(id -u) == 0 ]] && chown "$RUN_USER" "$WORK"
mkdir -p "$OUT"
NODES=(p0 p1 p2 p3 front)
cleanup() {
    local rc=$? n
    set +e
    for n in "${NODES[@]}"; do
        [[ -f $WORK/$n/postmaster.pid ]] && "${AS[@]}" "$PGBIN/pg_ctl" -D "$WORK/$n" -m immediate -w stop >/dev/null 2>&1
    done
    rm -rf "$WORK"
    exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

port_of() { echo $((PORT0 + $1)); }
start_node() {  # index, name, preload
    local i=$1 n=$2 pre=$3
    "${AS[@]}" "$PGBIN/initdb" -D "$WORK/$n" -U "$DBUSER" -A trust -E UTF8 --no-locale --no-sync >"$OUT/initdb-$n.log" 2>&1 \
        || { cat "$OUT/initdb-$n.log" >&2; die "initdb $n failed"; }
    "${AS[@]}" tee -a "$WORK/$n/postgresql.conf" >/dev/null <<CONF
listen_addresses = ''
port = $(port_of "$i")
unix_socket_directories = '$WORK'
shared_preload_libraries = '$pre'
shared_buffers = 256MB
max_connections = 60
synchronous_commit = on
max_wal_size = 8GB
checkpoint_timeout = 30min
log_min_messages = warning
CONF
    "${AS[@]}" "$PGBIN/pg_ctl" -D "$WORK/$n" -l "$WORK/$n.log" -w -t 60 start >/dev/null \
        || { "${AS[@]}" cat "$WORK/$n.log" >&2; die "$n did not start"; }
}
sql() { local i=$1; shift; "$PGBIN/psql" -X -q -At -v ON_ERROR_STOP=1 -h "$WORK" -p "$(port_of "$i")" -U "$DBUSER" -d postgres "$@"; }

log "starting 4 partitions and a front (ports $PORT0..$((PORT0 + 4)))"
opts=()
for k in 0 1 2 3; do
    start_node "$k" "p$k" pg_claim
    sql "$k" -c "CREATE EXTENSION pg_claim" -c "SELECT claim.set_partition($k)"
    opts+=("p$k 'host=$WORK port=$(port_of "$k") dbname=postgres connect_timeout=2'")
done
start_node 4 front ''
F=4
sql $F -c "CREATE EXTENSION pg_claim_proxy CASCADE" \
    -c "CREATE SERVER claim_cluster FOREIGN DATA WRAPPER plproxy OPTIONS ($(IFS=,; echo "${opts[*]}"))" \
    -c "CREATE USER MAPPING FOR PUBLIC SERVER claim_cluster OPTIONS (user '$DBUSER')"
for q in $(seq 0 15); do sql $F -c "SELECT claim.create_queue('q$q', lease => '10 minutes')" >/dev/null; done
sql $F -c "SELECT claim.create_queue('hot', lease => '10 minutes', spread => true)" >/dev/null
PY=/usr/bin/python3
[[ -x $PY ]] || PY=python3
if "$PY" -c 'import psycopg' 2>/dev/null; then HAVE_PY=1; else HAVE_PY=0; log "no python3 with psycopg: the client windows are skipped"; fi
[[ $(sql $F -c "SELECT claim.route_hash('q0') & 3") == 0 ]] || die "q0 is expected on partition 0"

S=$WORK/scripts
mkdir -p "$S"
chmod 755 "$S"
# claim_complete_script FILE QUEUE_EXPR [FIRST_LINE]: a pgbench script that claims one item of
# the queue QUEUE_EXPR names (after FIRST_LINE) and completes it.
claim_complete_script() {
    {
        [[ -z ${3:-} ]] || printf '%s\n' "$3"
        printf '%s\n' "SELECT coalesce(max(token), 0) AS tok FROM claim.claim_next($2) \\gset" \
            '\if :tok' 'SELECT claim.complete(:tok::bigint);' '\endif'
    } >"$1"
}
claim_complete_script "$S/one.sql" "'q0'"
claim_complete_script "$S/spread.sql" "'q' || :q::int" '\set q random(0, 15)'
claim_complete_script "$S/hot.sql" "'hot'"
# claim_next(n => 1) + complete(token) by CLIENTS threads for DUR seconds, on
# partition 0 itself (direct) or through pg_claim.PartitionedClient (routed);
# prints items/s.
cat >"$S/client.py" <<'PYTHON'
import sys, threading, time
sys.path.insert(0, sys.argv[1])
import psycopg
from psycopg.rows import dict_row
from pg_claim.routing import PartitionedClient
mode, dur, clients, dsns = sys.argv[2], float(sys.argv[3]), int(sys.argv[4]), sys.argv[5:]
counts = [0] * clients
def direct(i, stop):  # the same statements and rows as the client's, on partition 0
    with psycopg.connect(dsns[0], autocommit=True, row_factory=dict_row) as c:
        while time.monotonic() < stop:
            r = c.execute("SELECT * FROM claim.claim_next(%s, %s, %s::interval, %s::interval)", ["q0", 1, None, "0"]).fetchall()
            if r:
                c.execute("SELECT claim.complete(%s, %s) AS n", [r[0]["token"], None]).fetchall()
                counts[i] += 1
def routed(i, stop):
    with PartitionedClient(dsns) as c:
        while time.monotonic() < stop:
            r = c.claim_next("q0", 1)
            if r:
                c.complete(r[0]["token"])
                counts[i] += 1
stop = time.monotonic() + dur
ts = [threading.Thread(target=direct if mode == "direct" else routed, args=(i, stop)) for i in range(clients)]
t0 = time.monotonic()
for t in ts: t.start()
for t in ts: t.join()
print(sum(counts) / (time.monotonic() - t0))
PYTHON
# The front's queue-to-partition map, for the direct x4 window.
declare -A HOME
for q in $(seq 0 15); do HOME[$q]=$(sql $F -c "SELECT claim.route_hash('q$q') & 3"); done
for k in 0 1 2 3; do
    ids=()
    for q in $(seq 0 15); do [[ ${HOME[$q]} == "$k" ]] && ids+=("$q"); done
    {
        echo "\\set j random(0, $((${#ids[@]} - 1)))"
        arr=$(printf "'q%s'," "${ids[@]}")
        echo "SELECT coalesce(max(token), 0) AS tok FROM claim.claim_next((ARRAY[${arr%,}])[:j::int + 1]) \\gset"
        echo "\\if :tok"
        echo "SELECT claim.complete(:tok::bigint);"
        echo "\\endif"
    } >"$S/direct$k.sql"
done

# Enough ready items in every queue for a window at any speed seen here.
fill() {
    local k q n
    for q in $(seq 0 15); do
        k=${HOME[$q]}
        if [[ $q == 0 ]]; then n=$((DUR * 36000)); else n=$((DUR * 1500)); fi
        sql "$k" -c "SELECT count(*) FROM claim.enqueue_many('q$q', ARRAY(SELECT '{}'::jsonb FROM generate_series(1, $n)))" >/dev/null
    done
    sql $F -c "SELECT count(*) FROM claim.enqueue_many('hot', ARRAY(SELECT '{}'::jsonb FROM generate_series(1, $((DUR * 12000)))))" >/dev/null
    for k in 0 1 2 3; do sql "$k" -c "VACUUM ANALYZE" >/dev/null; done
}
DSNS=()
for k in 0 1 2 3; do DSNS+=("host=$WORK port=$(port_of "$k") dbname=postgres user=$DBUSER"); done
client() {  # mode, log
    if [[ $HAVE_PY == 0 ]]; then echo nan; return; fi
    "${AS[@]}" "$PY" "$S/client.py" "$HERE/../../clients/python" "$1" "$DUR" "$CLIENTS" "${DSNS[@]}" 2>"$2" | tail -1
}
tps_of() { sed -n 's/^tps = \([0-9.]*\) (without initial connection time)/\1/p' "$1"; }
bench() {  # node, script, clients, log
    "$PGBIN/pgbench" -n -M prepared -h "$WORK" -p "$(port_of "$1")" -U "$DBUSER" -c "$3" -j 2 -T "$DUR" -f "$2" postgres >"$4" 2>&1 \
        || { cat "$4" >&2; die "pgbench failed"; }
    tps_of "$4"
}
median() { sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }

declare -A R
for r in $(seq 1 "$ROUNDS"); do
    log "round $r/$ROUNDS: filling queues"
    fill
    d=$(bench 0 "$S/one.sql" "$CLIENTS" "$OUT/direct-$r.log")
    f=$(bench $F "$S/one.sql" "$CLIENTS" "$OUT/front-$r.log")
    per=$(( (CLIENTS + 3) / 4 ))
    pids=()
    for k in 0 1 2 3; do
        bench "$k" "$S/direct$k.sql" "$per" "$OUT/direct4-$k-$r.log" >"$WORK/d4-$k" &
        pids+=($!)
    done
    wait "${pids[@]}"
    d4=$(cat "$WORK"/d4-* | awk '{s += $1} END {print s}')
    f4=$(bench $F "$S/spread.sql" "$CLIENTS" "$OUT/front4-$r.log")
    fs=$(bench $F "$S/hot.sql" "$CLIENTS" "$OUT/frontspread-$r.log")
    # A B B A: the mean of two windows each, so that drift in the machine's
    # load falls on both sides alike
    pd1=$(client direct "$OUT/pydirect-$r-1.log")
    pr1=$(client routed "$OUT/pyrouted-$r-1.log")
    pr2=$(client routed "$OUT/pyrouted-$r-2.log")
    pd2=$(client direct "$OUT/pydirect-$r-2.log")
    pd=$(awk -v a="$pd1" -v b="$pd2" 'BEGIN {print (a + b) / 2}')
    pr=$(awk -v a="$pr1" -v b="$pr2" 'BEGIN {print (a + b) / 2}')
    R[direct]+="$d "; R[front]+="$f "; R[direct4]+="$d4 "; R[front4]+="$f4 "
    R[fspread]+="$fs "; R[pydirect]+="$pd "; R[pyrouted]+="$pr "
    R[spread]+="$(awk -v a="$fs" -v b="$f" 'BEGIN {print a / b}') "
    R[route]+="$(awk -v a="$pr" -v b="$pd" 'BEGIN {print (b > 0) ? a / b : "nan"}') "
    # Ratios within a round (windows run back to back): steadier than ratios
    # of medians when neighbours load the machine unevenly.
    R[hop]+="$(awk -v a="$f" -v b="$d" 'BEGIN {print a / b}') "
    R[hop4]+="$(awk -v a="$f4" -v b="$d4" 'BEGIN {print a / b}') "
    R[grow]+="$(awk -v a="$d4" -v b="$d" 'BEGIN {print a / b}') "
    for k in 0 1 2 3; do
        [[ $(sql "$k" -c "SELECT count(*) FILTER (WHERE ready = 0) FROM claim.queue_stats") == 0 ]] \
            || die "a queue ran dry during round $r: raise the fill"
    done
    [[ $(sql $F -c "SELECT ready > 0 FROM claim.queue_stats WHERE queue = 'hot'") == t ]] \
        || die "the spread queue ran dry during round $r: raise the fill"
    log "round $r: direct $d front $f direct x4 $d4 front x4 $f4 front spread $fs py direct $pd py routed $pr"
done

m() { tr ' ' '\n' <<<"${R[$1]}" | grep . | median; }
d=$(m direct); f=$(m front); d4=$(m direct4); f4=$(m front4)
fs=$(m fspread); pd=$(m pydirect); pr=$(m pyrouted)
{
    echo "pg_claim through a PL/Proxy front: claim_next(n => 1) + complete(token), $CLIENTS clients,"
    echo "$DUR s windows, median of $ROUNDS rounds, $(nproc) cores shared by 4 partitions and the front"
    printf '%-44s %12s\n' "window" "items/s"
    printf '%-44s %12.0f\n' "direct, one partition (queue q0)" "$d"
    printf '%-44s %12.0f\n' "through the front, the same queue" "$f"
    printf '%-44s %12.0f\n' "direct, four partitions at once" "$d4"
    printf '%-44s %12.0f\n' "through the front, 16 queues on 4 partitions" "$f4"
    printf '%-44s %12.0f\n' "through the front, one queue spread over 4" "$fs"
    printf '%-44s %12.0f\n' "Python client, direct call on partition 0" "$pd"
    printf '%-44s %12.0f\n' "Python client, routed (PartitionedClient)" "$pr"
    echo "ratios (median of the per-round ratios):"
    printf 'front / direct (the cost of the hop):  %.2fx\n' "$(m hop)"
    printf 'front x4 / direct x4:                  %.2fx\n' "$(m hop4)"
    printf 'direct x4 / direct (one machine):      %.2fx\n' "$(m grow)"
    printf 'front spread / front (one partition):  %.2fx\n' "$(m spread)"
    printf 'py routed / py direct (target >= 0.9): %.2fx\n' "$(m route)"
} | tee "$OUT/summary.txt"
