# shellcheck shell=bash
# Shared bash for the pg_claim benches (sourced, not run).
#
#   source "$HERE/lib.sh"
#   bench_init NAME [OUT]      log prefix; finds pg_config, the binaries, the OS user for the server;
#                              ROOT (the checkout), and with OUT: OUT=${BENCH_OUT:-test/bench/out/OUT}
#   bench_cluster PORT CONF    throwaway cluster (own unix socket, no TCP), database `bench`,
#                              CREATE EXTENSION pg_claim; CONF: extra postgresql.conf lines.
#                              Stopped and removed at exit (BENCH_KEEP=1 keeps the directory).
#   bench_scripts              writes the shared pgbench scripts into $S (see below)
#   bench_setup                all three for a windowed bench, with $OUT emptied (see below)
#   bench_windowed NAME BACKLOG PARTS   the start of a windowed bench: bench_init NAME-bench NAME,
#                              bench_knobs BACKLOG, bench_only PARTS, bench_setup
#   bench_defaults NAME=DEFAULT...   each NAME from the environment, else DEFAULT
#   bench_small NAME           bench_init NAME and bench_cluster with shared_buffers = 256MB
#
# Then: sql, settle, run_pgbench, fill_baseline, fill_claim, series_mean, fdiv, fmt, ratio,
# pin_start / pin_stop (a snapshot held open), bench_knobs (the common settings),
# base_batch_script, summary_head, elapsed_s.
# As root the server runs as the unprivileged OS user `pgclaim`; clients run as the caller and
# connect through the private socket (PGHOST/PGPORT/PGUSER/PGDATABASE are exported).

log() { printf '[%s %s] %s\n' "${BENCH_NAME:-bench}" "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }
now_s() { date +%s.%N; }
fdiv() { awk -v a="$1" -v b="$2" 'BEGIN { if (b + 0 == 0 || a == "") print "nan"; else printf "%.2f", a / b }'; }
fmt()  { awk -v a="$1" 'BEGIN { if (a == "" || a == "nan") print "n/a"; else printf "%.0f", a }'; }
# verdict VALUE THRESHOLD [le]: "yes"/"NO" for VALUE >= THRESHOLD (or <= with le)
verdict() {
    awk -v v="$1" -v t="$2" -v op="${3:-ge}" 'BEGIN {
        if (v == "nan" || v == "") { print "n/a"; exit }
        ok = (op == "le") ? (v + 0 <= t + 0) : (v + 0 >= t + 0); print (ok ? "yes" : "NO") }'
}

bench_init() {
    BENCH_NAME=$1
    ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
    [[ -z ${2:-} ]] || OUT=${BENCH_OUT:-$ROOT/test/bench/out/$2}
    RUN_USER=${RUN_USER:-pgclaim}
    # PG_MAJOR / PG_CONFIG from the caller, else the major test/pg-major.sh picks
    . "$(dirname "${BASH_SOURCE[0]}")/../pg-major.sh" || die "no PostgreSQL found (run test/setup.sh)"
    [[ -x $PG_CONFIG ]] || PG_CONFIG=pg_config
    command -v "$PG_CONFIG" >/dev/null 2>&1 || die "pg_config not found (install postgresql-server-dev-$PG_MAJOR)"
    PGBIN=$("$PG_CONFIG" --bindir)
    local b
    for b in initdb pg_ctl psql pgbench; do [[ -x $PGBIN/$b ]] || die "$PGBIN/$b missing"; done
    if [[ $(id -u) == 0 ]]; then
        id "$RUN_USER" >/dev/null 2>&1 || die "OS user $RUN_USER missing (run test/setup.sh)"
        AS=(runuser -u "$RUN_USER" --)
        DBUSER=$RUN_USER
    else
        AS=()
        DBUSER=$(id -un)
    fi
}

ext_installed() {
    command -v "$PG_CONFIG" >/dev/null 2>&1 || return 1
    [[ -f "$("$PG_CONFIG" --pkglibdir)/pg_claim.so" && -f "$("$PG_CONFIG" --sharedir)/extension/pg_claim.control" ]]
}

# A port in 20000-40000 that nothing listens on (TCP or a unix socket in /tmp).
free_port() {
    local p _
    for _ in $(seq 1 50); do
        p=$(( 20000 + RANDOM % 20000 ))
        ss -Hltn "sport = :$p" 2>/dev/null | grep -q . && continue
        ls /tmp/.s.PGSQL."$p" >/dev/null 2>&1 && continue
        echo "$p"; return 0
    done
    die "no free port found"
}

# Background processes to end at exit (their pids).
BENCH_PIDS=()

bench_cleanup() {
    local rc=$? p
    set +e
    for p in "${BENCH_PIDS[@]}"; do kill "$p" 2>/dev/null; done
    if [[ -n ${DATA:-} && -f $DATA/postmaster.pid ]]; then
        "${AS[@]}" "$PGBIN/pg_ctl" -D "$DATA" -m immediate -w stop >/dev/null 2>&1
    fi
    if [[ -n ${WORK:-} ]]; then
        if [[ ${BENCH_KEEP:-0} == 1 ]]; then log "cluster kept in $WORK"; else rm -rf "$WORK"; fi
    fi
    exit $rc
}

# bench_setup: the start of a windowed bench: the extension is installed, $OUT/logs,
# $OUT/series and $OUT/summary.txt emptied, the cluster with room for CLIENTS + 30
# connections (BENCH_STATS=1: pg_stat_statements preloaded), the shared pgbench scripts.
bench_setup() {
    ext_installed || die "pg_claim is not installed"
    mkdir -p "$OUT/logs" "$OUT/series"
    rm -f "$OUT"/logs/* "$OUT"/series/* "$OUT/summary.txt"
    export BENCH_MAX_CONNECTIONS=$(( CLIENTS + 30 > 100 ? CLIENTS + 30 : 100 ))
    if [[ ${BENCH_STATS:-0} == 1 ]]; then
        bench_cluster "$(free_port)" "pg_stat_statements.track = all" "pg_claim,pg_stat_statements"
    else
        bench_cluster "$(free_port)"
    fi
    bench_scripts
}

# bench_windowed NAME BACKLOG PARTS: the start of a windowed bench: log prefix NAME-bench,
# OUT=${BENCH_OUT:-test/bench/out/NAME}, the common settings (bench_knobs, BACKLOG the default of
# BENCH_BACKLOG), the parts to run (bench_only, PARTS the default of BENCH_ONLY), the cluster and
# the shared pgbench scripts (bench_setup).
bench_windowed() {
    bench_init "$1-bench" "$1"
    bench_knobs "$2"
    bench_only "$3"
    bench_setup
}

# bench_defaults NAME=DEFAULT...: each NAME keeps its value from the environment (when not
# empty), else it is set to DEFAULT.
bench_defaults() {
    local kv name
    for kv in "$@"; do
        name=${kv%%=*}
        [[ -n ${!name:-} ]] || printf -v "$name" '%s' "${kv#*=}"
    done
}

# bench_small NAME: the start of a bench that is not windowed: bench_init NAME (log prefix NAME,
# no OUT) and its throwaway cluster with shared_buffers = 256MB (BENCH_MAX_CONNECTIONS from the
# caller, else 100).
bench_small() {
    bench_init "$1"
    BENCH_SHARED_BUFFERS=256MB bench_cluster "$(free_port)"
}

# pin_start SECONDS LOG: a session (application_name bench_pinner) that holds a REPEATABLE READ
# snapshot (read from table ref) for SECONDS, its output in LOG; returns once its xmin shows
# (PIN_XMIN). pin_stop ends it.
pin_start() {
    local secs=$1 out=$2 _
    PGAPPNAME=bench_pinner "$PGBIN/psql" -X -q -v ON_ERROR_STOP=1 >"$out" 2>&1 <<EOF &
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT count(*) FROM ref;
SELECT pg_sleep($secs);
COMMIT;
EOF
    PINNER_PID=$!
    BENCH_PIDS=("$PINNER_PID")
    PIN_XMIN=
    for _ in $(seq 1 100); do
        PIN_XMIN=$(sql -c "SELECT backend_xmin FROM pg_stat_activity WHERE application_name = 'bench_pinner' AND backend_xmin IS NOT NULL")
        [[ -n $PIN_XMIN ]] && break
        sleep 0.1
    done
    [[ -n $PIN_XMIN ]] || die "the pinner session did not take a snapshot"
}

pin_stop() {
    sql -c "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'bench_pinner'" >/dev/null
    wait "$PINNER_PID" 2>/dev/null || true
    PINNER_PID=
    BENCH_PIDS=()
}

# bench_cluster PORT [EXTRA_CONF] [PRELOAD]   (PRELOAD: shared_preload_libraries, default pg_claim;
# the extensions pg_claim and pg_stat_statements are created when they are preloaded)
bench_cluster() {
    local port=$1 extra=${2:-} preload=${3-pg_claim}
    WORK=$(mktemp -d "/tmp/pg_claim-${BENCH_NAME}.XXXXXX")
    chmod 755 "$WORK"
    [[ $(id -u) == 0 ]] && chown "$RUN_USER" "$WORK"
    DATA=$WORK/data
    SOCK=$WORK/sock
    S=$WORK/scripts
    trap bench_cleanup EXIT
    trap 'exit 130' INT TERM
    "${AS[@]}" mkdir -p "$SOCK"
    mkdir -p "$S"
    "${AS[@]}" "$PGBIN/initdb" -D "$DATA" -U "$DBUSER" -A trust -E UTF8 --no-locale --no-sync >"$WORK/initdb.log" 2>&1 \
        || { cat "$WORK/initdb.log" >&2; die "initdb failed"; }
    "${AS[@]}" tee -a "$DATA/postgresql.conf" >/dev/null <<EOF

# ---- pg_claim bench ($BENCH_NAME)
listen_addresses = ''
port = $port
unix_socket_directories = '$SOCK'
shared_preload_libraries = '$preload'
shared_buffers = ${BENCH_SHARED_BUFFERS:-1GB}
max_connections = ${BENCH_MAX_CONNECTIONS:-100}
max_locks_per_transaction = 256
synchronous_commit = on
# Equal for both sides: no checkpoint inside a window (each window starts with an explicit CHECKPOINT).
max_wal_size = 16GB
checkpoint_timeout = 30min
logging_collector = off
log_min_messages = warning
$extra
EOF
    log "starting server (port $port, socket $SOCK${preload:+, preload $preload})"
    "${AS[@]}" "$PGBIN/pg_ctl" -D "$DATA" -l "$WORK/server.log" -w -t 60 start >/dev/null \
        || { "${AS[@]}" cat "$WORK/server.log" >&2; die "server did not start"; }
    export PGHOST=$SOCK PGPORT=$port PGUSER=$DBUSER PGDATABASE=bench
    "$PGBIN/psql" -X -q -d postgres -c "CREATE DATABASE bench" >/dev/null
    if [[ ,$preload, == *,pg_claim,* ]]; then
        sql -c "CREATE EXTENSION pg_claim" >/dev/null || die "CREATE EXTENSION pg_claim failed"
    fi
    if [[ ,$preload, == *,pg_stat_statements,* ]]; then sql -c "CREATE EXTENSION pg_stat_statements" >/dev/null; fi
}

sql() { "$PGBIN/psql" -X -q -At -v ON_ERROR_STOP=1 "$@"; }
# pgbench on the bench's cluster, its report on stdout (errors too).
pgbench_() { "$PGBIN/pgbench" -n "$@" 2>&1; }

# Wait until no autovacuum worker is busy (at most 30 s) so one side's cleanup does not run in
# the other's window, then checkpoint so every window starts from the same state.
settle() {
    local _
    for _ in $(seq 1 60); do
        [[ $(sql -c "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'autovacuum worker'") == 0 ]] && break
        sleep 0.5
    done
    sql -c "CHECKPOINT"
}

# run_pgbench NAME CLIENTS DURATION SCRIPT [PGBENCH_ARGS...]  ->  sets TPS, WALB (WAL bytes per
# transaction), ABORTED;
# writes $OUT/logs/NAME.log and $OUT/series/NAME.dat (second, tps).
# BENCH_WAITS=1 (or BENCH_STATS=1): samples what the pgbench backends wait on every 0.1 s (each
# sample its own short transaction, so it pins no xmin) and appends the shares to
# $OUT/logs/waits.txt. BENCH_STATS=1 (pg_stat_statements preloaded, track = all): the top
# statements of the window go to $OUT/logs/stats.txt.
run_pgbench() {
    local name=$1 clients=$2 dur=$3 script=$4 threads=${THREADS:-2} sampler=
    shift 4
    (( clients < threads )) && threads=$clients
    mkdir -p "$OUT/logs" "$OUT/series"
    log "run $name: $clients clients, ${dur}s"
    [[ ${BENCH_STATS:-0} == 1 ]] && sql -c "SELECT pg_stat_statements_reset()" >/dev/null
    if [[ ${BENCH_WAITS:-0} == 1 || ${BENCH_STATS:-0} == 1 ]]; then
        printf '%s\n' "SELECT coalesce(wait_event_type || ':' || wait_event, 'CPU'),
                             left(regexp_replace(query, '\s+', ' ', 'g'), 50), count(*)
                      FROM pg_stat_activity WHERE application_name = 'pgbench' AND state = 'active'
                      GROUP BY 1, 2 \\watch 0.1" \
            | "$PGBIN/psql" -X -q -At -F '|' >"$WORK/waits_$name.txt" 2>/dev/null &
        sampler=$!
    fi
    local lsn0 lsn1 xacts
    lsn0=$(sql -c "SELECT pg_current_wal_insert_lsn()")
    "$PGBIN/pgbench" -n -M prepared -c "$clients" -j "$threads" -T "$dur" -P 1 -f "$script" "$@" \
        >"$OUT/logs/$name.log" 2>&1 || true
    lsn1=$(sql -c "SELECT pg_current_wal_insert_lsn()")
    if [[ -n $sampler ]]; then kill "$sampler" 2>/dev/null; wait "$sampler" 2>/dev/null || true; fi
    TPS=$(awk '/^tps = / { print $3; exit }' "$OUT/logs/$name.log")
    TPS=${TPS:-0}
    # WAL bytes per transaction of the window (the server's whole WAL over pgbench's transactions)
    xacts=$(awk '/^number of transactions actually processed: / { split($6, a, "/"); print a[1]; exit }' "$OUT/logs/$name.log")
    WALB=$(sql -c "SELECT CASE WHEN ${xacts:-0} > 0 THEN round(pg_wal_lsn_diff('$lsn1', '$lsn0') / ${xacts:-0}) END")
    ABORTED=0
    if grep -qE 'aborted|Run was aborted|FATAL|ERROR' "$OUT/logs/$name.log"; then
        ABORTED=1
        log "WARNING: $name had errors/aborted clients:"
        grep -E 'aborted|ERROR|FATAL' "$OUT/logs/$name.log" | head -5 >&2
    fi
    awk '/^progress: / { printf "%d %.1f\n", $2 + 0, $4 + 0 }' "$OUT/logs/$name.log" >"$OUT/series/$name.dat"
    log "  $name: $(fmt "$TPS") tps, ${WALB:-?} WAL bytes/transaction"
    if [[ -n $sampler ]]; then
        {
            echo "--- wait events of the pgbench backends during $name (share of active samples)"
            awk -F'|' 'NF == 3 { n[$1 "  in  " $2] += $3; t += $3 }
                 END { for (e in n) printf "%6.1f%%  %s\n", 100 * n[e] / t, e }' "$WORK/waits_$name.txt" \
                | sort -rn | head -8
        } | tee -a "$OUT/logs/waits.txt" >&2
    fi
    if [[ ${BENCH_STATS:-0} == 1 ]]; then
        {
            echo "--- pg_stat_statements for $name (top 8 by total time)"
            echo "calls | total_ms | mean_ms | rows | buffer hits/call | WAL bytes/call | query"
            sql -F ' | ' -c "SELECT calls, round(total_exec_time::numeric, 0) AS total_ms,
                                    round(mean_exec_time::numeric, 3) AS mean_ms, rows,
                                    shared_blks_hit / greatest(calls, 1), round(wal_bytes / greatest(calls, 1)),
                                    left(regexp_replace(query, '\s+', ' ', 'g'), 110)
                             FROM pg_stat_statements
                             WHERE query NOT LIKE '%pg_stat_activity%' AND query NOT LIKE '%pg_stat_statements_reset%'
                             ORDER BY total_exec_time DESC LIMIT 8"
        } | tee -a "$OUT/logs/stats.txt" >&2
    fi
}

# run_pgbench NAME CLIENTS DUR SCRIPT, its tps into R[NAME] (the caller's
# `declare -A R`), R[NAME_invalid]=1 when a client aborted.
measure() {
    run_pgbench "$@"
    R[$1]=$TPS
    if [[ $ABORTED == 1 ]]; then R[$1_invalid]=1; fi
}

# Runs the Python script on stdin after bench_common.py (conn(), pct()); the
# arguments are the command before python3 (env, as_user ...).
bench_python() { cat "$(dirname "${BASH_SOURCE[0]}")/bench_common.py" - | "$@" /usr/bin/python3 -; }

# The parts of a bench to run: BENCH_ONLY, or the default "$1"; `want N`
# says whether part N runs.
bench_only() { ONLY=" ${BENCH_ONLY:-$1} "; }
want() { [[ $ONLY == *" $1 "* ]]; }

# mean of a per-second series file over seconds (FROM, TO]
series_mean() {
    awk -v a="$2" -v b="$3" '$1 > a && $1 <= b { s += $2; n++ } END { if (n) printf "%.1f", s / n; else print 0 }' "$1"
}

# ---------------------------------------------------------------- baseline (the hand-written SKIP LOCKED queue)
# The hand-written SKIP LOCKED queue's table, reduced to what the queue needs, with the same payload as the pg_claim items.
# Indexes, as a competent user would write them for this query: the primary key on id, and a
# partial index on id WHERE status = 'new' (only the unclaimed part of the queue is indexed, the
# claim's ORDER BY id LIMIT 1 is an index scan of it). Index built after the bulk load.
# Sets FILL_SECS.
fill_baseline() {
    local n=$1 t0 t1
    t0=$(now_s)
    sql <<EOF
DROP TABLE IF EXISTS q;
CREATE TABLE q (
    id          bigserial PRIMARY KEY,
    status      text NOT NULL DEFAULT 'new'
                CHECK (status IN ('new', 'in-progress', 'complete', 'error')),
    process_id  text,
    payload     jsonb NOT NULL DEFAULT '{}',
    created_at  timestamptz NOT NULL DEFAULT now()
);
INSERT INTO q (payload) SELECT jsonb_build_object('i', g) FROM generate_series(1, $n) g;
CREATE INDEX q_new ON q (id) WHERE status = 'new';
VACUUM ANALYZE q;
EOF
    t1=$(now_s)
    FILL_SECS=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
    log "  baseline: filled $n rows in ${FILL_SECS}s (INSERT ... SELECT + index + VACUUM ANALYZE)"
}
baseline_left() { sql -c "SELECT count(*) FROM q WHERE status = 'new'"; }

# ---------------------------------------------------------------- pg_claim queues
# fill_claim QUEUE N [CREATE_ARGS] [GROUP_EXPR]
# Fresh queue (dropped first), created with `claim.create_queue('QUEUE'[, CREATE_ARGS])`, filled
# with claim.enqueue_many in chunks of $FILL_CHUNK (10000); GROUP_EXPR, an SQL expression of the item
# number g, gives each item's group key. Then VACUUM ANALYZE. Sets FILL_SECS, FILL_RATE.
fill_claim() {
    local queue=$1 n=$2 args=${3:-} gexpr=${4:-} chunk=${FILL_CHUNK:-10000} t0 t1 done_=0 c keys
    t0=$(now_s)
    sql -c "SELECT claim.drop_queue('$queue') FROM claim.queue_stats WHERE queue = '$queue'" >/dev/null 2>&1 || true
    sql -c "SELECT claim.create_queue('$queue'${args:+, $args})" >/dev/null
    while (( done_ < n )); do
        c=$(( n - done_ < chunk ? n - done_ : chunk ))
        keys=
        [[ -n $gexpr ]] && keys=", ARRAY(SELECT ($gexpr)::text FROM generate_series($((done_ + 1)), $((done_ + c))) g)"
        echo "SELECT count(*) FROM claim.enqueue_many('$queue', ARRAY(SELECT jsonb_build_object('i', g) FROM generate_series($((done_ + 1)), $((done_ + c))) g)$keys);"
        done_=$(( done_ + c ))
    done | sql >/dev/null
    t1=$(now_s)
    sql -c "VACUUM ANALYZE" >/dev/null
    FILL_SECS=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
    FILL_RATE=$(awk -v a="$t0" -v b="$t1" -v n="$n" 'BEGIN { printf "%.0f", n / (b - a) }')
    log "  pg_claim: enqueued $n items into '$queue' in ${FILL_SECS}s (${FILL_RATE}/s) + VACUUM ANALYZE"
}
claim_left() { sql -c "SELECT coalesce(sum(ready), 0) FROM claim.queue_stats WHERE queue = '$1'"; }

# ---------------------------------------------------------------- shared pgbench scripts
# $S/claim_one.sql      claim_next('bench') + complete(token): two statements, two commits per job
# $S/base_one.sql       the hand-written queue's job: claim UPDATE ... SKIP LOCKED + completion UPDATE
# $S/update_ref.sql     one durable single-row UPDATE (table ref, made by make_ref)
# $S/durable_job_ref.sql  a trivial SELECT and a one-row UPDATE: two round trips, one durable commit
bench_scripts() {
    cat >"$S/claim_one.sql" <<'EOF'
SELECT token FROM claim.claim_next('bench') \gset
SELECT claim.complete(:token::bigint);
EOF
    # the hand-written queue's claim without its "line in the sand" (`AND id > $2`, which only moves after a
    # rollback and is 0 in steady state): with it the planner prefers the primary key and walks
    # every completed row from the head of the table; without it the claim is an index scan of
    # the partial index.
    cat >"$S/base_one.sql" <<'EOF'
UPDATE q SET status = 'in-progress', process_id = gen_random_uuid()::text
 WHERE id = (SELECT id FROM q WHERE status = 'new'
              ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED)
 RETURNING id \gset
UPDATE q SET status = 'complete' WHERE id = :id;
EOF
    cat >"$S/update_ref.sql" <<'EOF'
\set id random(1, 100000)
UPDATE ref SET n = n + 1 WHERE id = :id;
EOF
    cat >"$S/durable_job_ref.sql" <<'EOF'
\set id random(1, 100000)
SELECT 1 AS one \gset
UPDATE ref SET n = n + 1 WHERE id = :id;
EOF
}

# The hand-written queue's batch of $1 items (claim, then complete them all)
# into the file $2.
base_batch_script() {
    cat >"$2" <<EOF
WITH c AS (
  UPDATE q SET status = 'in-progress', process_id = gen_random_uuid()::text
   WHERE id IN (SELECT id FROM q WHERE status = 'new'
                 ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED)
   RETURNING id)
SELECT array_agg(id) AS ids FROM c \gset
UPDATE q SET status = 'complete' WHERE id = ANY(:ids::bigint[]);
EOF
}

# The windowed benches' common settings from the environment: DUR
# (BENCH_DURATION; 15 s, 5 s with QUICK=1), CLIENTS (16), THREADS (2), WINDOWS
# (2: A B B A), BACKLOG (BENCH_BACKLOG, default $1).
bench_knobs() {
    if [[ ${QUICK:-0} == 1 ]]; then DUR=${BENCH_DURATION:-5}; else DUR=${BENCH_DURATION:-15}; fi
    CLIENTS=${CLIENTS:-16}
    THREADS=${THREADS:-2}
    WINDOWS=${WINDOWS:-2}
    BACKLOG=${BENCH_BACKLOG:-$1}
}

# The head of a windowed bench's summary: "pg_claim $1", the server and pgbench
# settings ($2: extra pgbench options, $3: how each window starts), the
# library's install time, the table's header.
summary_head() {
    echo "pg_claim $1  $(date -u '+%Y-%m-%d %H:%M UTC')  commit $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')  $(nproc) cores"
    echo "PostgreSQL $("$PGBIN/postgres" --version | awk '{print $3}'), shared_buffers 1GB, synchronous_commit on, pgbench -M prepared $2-j $THREADS, ${DUR}s windows ($([[ $WINDOWS == 2 ]] && echo "A B B A, mean per side" || echo "A B")), $3"
    echo "pg_claim.so installed $(date -u -r "$("$PG_CONFIG" --pkglibdir)/pg_claim.so" '+%Y-%m-%d %H:%M UTC')"
    echo
    row_header
}

# Seconds since T_START.
elapsed_s() { awk -v a="$T_START" -v b="$(now_s)" 'BEGIN { printf "%.0f", b - a }'; }

# Reference table for the one-row UPDATE transactions.
make_ref() {
    sql <<'EOF'
CREATE TABLE IF NOT EXISTS ref (id int PRIMARY KEY, n bigint NOT NULL DEFAULT 0);
INSERT INTO ref (id) SELECT g FROM generate_series(1, 100000) g ON CONFLICT DO NOTHING;
VACUUM ANALYZE ref;
EOF
}

# backlog for a run that may do RATE per second for DUR seconds: 1.5 times that, at least MIN
backlog_for() {
    awk -v r="$1" -v d="$2" -v m="$3" 'BEGIN { n = int(r * d * 1.5); print (n > m ? n : m) }'
}

# ---------------------------------------------------------------- alternated windows
# ab_windows A FILL_A SCRIPT_A B FILL_B SCRIPT_B [PGBENCH_ARGS...]
# Windows of $DUR seconds with $CLIENTS clients in the order A B B A ($WINDOWS = 2, the default)
# or A B ($WINDOWS = 1), each from a fresh fill: FILL_X is a command (a function name and its
# words) run before each window of X. A drift of the machine over the run weighs on both sides
# alike. Sets R[A], R[B] (mean tps of their windows so far), R[X_invalid] when a window had client
# errors (for example a drained backlog), and appends "X tps" to W_LOG[A] in run order.
declare -A R W_LOG
ab_windows() {
    local a=$1 fa=$2 sa=$3 b=$4 fb=$5 sb=$6 side fill script k
    shift 6
    local -A sum=() n=()
    local order=("$a" "$b" "$b" "$a")
    (( ${WINDOWS:-2} == 1 )) && order=("$a" "$b")
    for side in "${order[@]}"; do
        if [[ $side == "$a" ]]; then fill=$fa script=$sa; else fill=$fb script=$sb; fi
        k=$(( ${n[$side]:-0} + 1 ))
        $fill
        settle
        run_pgbench "${side}_$k" "$CLIENTS" "$DUR" "$script" "$@"
        [[ $ABORTED == 1 ]] && R[${side}_invalid]=1
        sum[$side]=$(awk -v a="${sum[$side]:-0}" -v t="$TPS" 'BEGIN { print a + t }')
        n[$side]=$k
        R[$side]=$(awk -v s="${sum[$side]}" -v n="$k" 'BEGIN { print s / n }')
        W_LOG[$a]+="${W_LOG[$a]:+, }$side $(fmt "$TPS") (${WALB:-?} B WAL/txn)"
    done
}

# summary table rows: row FIGURE PG_CLAIM BASELINE RATIO TARGET MET
row() { printf '| %-52s | %-16s | %-16s | %-10s | %-10s | %-7s |\n' "$@"; }
row_header() {
    row "figure" "pg_claim" "baseline" "ratio" "target" "met?"
    row "----------------------------------------------------" "----------------" "----------------" "----------" "----------" "-------"
}
# ratio_row LABEL KEY BASEKEY TARGET UNIT
ratio_row() {
    local c=${R[$2]:-} b=${R[$3]:-} r met
    r=$(fdiv "$c" "$b")
    met=$(verdict "$r" "$4")
    [[ -n ${R[${2}_invalid]:-}${R[${3}_invalid]:-} ]] && met=INVALID
    row "$1" "$(fmt "$c") $5" "$(fmt "$b") $5" "${r}x" ">= ${4}x" "$met"
}

# --- a scratch cluster for the benches that skip bench_init (steps.sh, wake.sh) ---
#   scratch_cluster NAME PORT [EXTRA_CONF]
#                                       ROOT (the checkout), PG_MAJOR and PG_BIN (test/pg-major.sh),
#                                       RUN_USER=${PGCLAIM_USER:-pgclaim}, PORT;
#                                       WORK=/tmp/pg_claim-NAME.XXXXXX (removed at exit), a cluster
#                                       in $WORK/data on port PORT, unix socket in $WORK only,
#                                       pg_claim preloaded, started
#   as_user CMD...                      CMD as RUN_USER when run as root, else as the caller
#   psql_ ARGS...                       psql -XAtq on database postgres of that cluster
as_user() {
    if [[ $(id -u) -eq 0 ]]; then runuser -u "$RUN_USER" -- "$@"; else "$@"; fi
}
scratch_cleanup() {
    as_user "$PG_BIN/pg_ctl" -D "$WORK/data" stop -m fast >/dev/null 2>&1 || true
    rm -rf "$WORK"
}
scratch_cluster() {
    local name=$1 extra=${3:-}
    PORT=$2
    ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
    . "$ROOT/test/pg-major.sh"
    RUN_USER=${PGCLAIM_USER:-pgclaim}
    WORK="$(mktemp -d "/tmp/pg_claim-$name.XXXXXX")"
    chmod 755 "$WORK"
    [[ $(id -u) -eq 0 ]] && chown "$RUN_USER:" "$WORK"
    trap scratch_cleanup EXIT
    as_user "$PG_BIN/initdb" -D "$WORK/data" -A trust >/dev/null
    cat >>"$WORK/data/postgresql.conf" <<CONF
port = $PORT
listen_addresses = ''
unix_socket_directories = '$WORK'
shared_preload_libraries = 'pg_claim'
max_locks_per_transaction = 256
shared_buffers = 256MB
$extra
CONF
    as_user "$PG_BIN/pg_ctl" -D "$WORK/data" -l "$WORK/server.log" start -w >/dev/null
}
psql_() { as_user "$PG_BIN/psql" -XAtq -h "$WORK" -p "$PORT" -d postgres "$@"; }
