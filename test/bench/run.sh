#!/usr/bin/env bash
# pg_claim bench: every pg_claim figure beside its baseline, measured in the same run.
#
#   bash test/bench/run.sh              default run (15 s windows, 60 s pinned-xmin run; ~8 min)
#   QUICK=1 bash test/bench/run.sh      5 s windows, 20 s pinned-xmin run (~3 min)
#
# Environment:
#   BENCH_DURATION=15        seconds per measurement window (QUICK=1: 5)
#   BENCH_PIN_DURATION=60    length of the pinned-xmin runs (QUICK=1: 20)
#   BENCH_PIN_TAIL=15        the pinned figure is the mean tps over the last N seconds (QUICK=1: 5)
#   BENCH_WINDOWS1=2         windows per side for workload 1, run as baseline, pg_claim, pg_claim,
#                            baseline; each side's figure is their mean (QUICK=1: 1)
#   BENCH_BACKLOG=1000000    ready items in the queue when a run starts (at least)
#   BENCH_BASELINE_ONLY=1    run the baselines only (also automatic when pg_claim is not installed)
#   BENCH_SETUP=1            run test/setup.sh first (build + install); default: only if needed
#   BENCH_ONLY="1 3"         run only these workloads (2 implies 1, whose clean run it is compared with)
#   BENCH_BATCH_CLIENTS=16   clients of workload 3 (batches of 500)
#   BENCH_STATS=1            preload pg_stat_statements (track = all, so the extension's own SQL shows)
#                            and write the top statements of each run to logs/stats.txt, the
#                            pgbench backends' wait events (sampled every 0.1 s) to logs/waits.txt
#   BENCH_WAITS=1            the wait events alone
#   BENCH_KEEP=1             keep the cluster directory at exit (for post-mortems)
#   BENCH_OUT=dir            output directory (default test/bench/out)
#   CLIENTS="16 64 128"      client counts (default 16): one whole run per count, see below
#   BENCH_THREADS=2          pgbench threads (-j)
#
# As root the server runs as the unprivileged OS user `pgclaim` (created by test/setup.sh).
# The cluster lives in a temp directory with its own unix socket (no TCP) and is removed at exit.
# Outputs: $BENCH_OUT/summary.txt, pinned_xmin.dat, pinned_xmin.png, logs/*.log, series/*.dat
set -Eeuo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
OUT=${BENCH_OUT:-$HERE/out}
QUICK=${QUICK:-0}
if [[ $QUICK == 1 ]]; then d_dur=5 d_pin=20 d_tail=5; else d_dur=15 d_pin=60 d_tail=15; fi
DUR=${BENCH_DURATION:-$d_dur}
WINDOWS1=${BENCH_WINDOWS1:-$([[ $QUICK == 1 ]] && echo 1 || echo 2)}
[[ $WINDOWS1 == 1 || $WINDOWS1 == 2 ]] || { echo "BENCH_WINDOWS1 must be 1 or 2" >&2; exit 2; }
PIN_DUR=${BENCH_PIN_DURATION:-$d_pin}
PIN_TAIL=${BENCH_PIN_TAIL:-$d_tail}
BACKLOG=${BENCH_BACKLOG:-1000000}
# CLIENTS="16 64 128": the whole bench once per client count, each with its own cluster, output
# in $OUT/clients_N/ and the summaries one after the other in $OUT/summary.txt.
read -r -a CLIENTS_LIST <<<"${CLIENTS:-16}"
for c in "${CLIENTS_LIST[@]}"; do [[ $c =~ ^[1-9][0-9]*$ ]] || { echo "CLIENTS: '$c' is not a client count" >&2; exit 2; }; done
if (( ${#CLIENTS_LIST[@]} > 1 )); then
    rc=0
    for c in "${CLIENTS_LIST[@]}"; do
        CLIENTS=$c BENCH_OUT=$OUT/clients_$c bash "${BASH_SOURCE[0]}" || rc=1
    done
    for c in "${CLIENTS_LIST[@]}"; do
        echo "=== CLIENTS=$c"
        cat "$OUT/clients_$c/summary.txt" 2>/dev/null || echo "(no summary: the run failed)"
        echo
    done | tee "$OUT/summary.txt"
    exit $rc
fi
CLIENTS=${CLIENTS_LIST[0]}
THREADS=${BENCH_THREADS:-2}
BATCH=500
BATCH_CLIENTS=${BENCH_BATCH_CLIENTS:-16}
FILL_CHUNK=10000
PORT=5499
RUN_USER=pgclaim

# shellcheck source-path=SCRIPTDIR
source "$HERE/lib.sh"   # log, die, cluster, sql, settle, run_pgbench, fills, shared scripts
bench_only "1 2 3 4"
[[ $ONLY == *" 2 "* && $ONLY != *" 1 "* ]] && ONLY+="1 "
BENCH_NAME=bench

# --------------------------------------------------------------------------- prerequisites
PG_CONFIG=${PG_CONFIG:-}
if [[ -z $PG_CONFIG ]]; then
    . "$HERE/../pg-major.sh" || PG_CONFIG=pg_config
fi

if [[ ${BENCH_SETUP:-} == 1 ]] || { [[ ${BENCH_BASELINE_ONLY:-0} != 1 ]] && ! ext_installed; } \
   || { [[ $(id -u) == 0 ]] && ! id "$RUN_USER" >/dev/null 2>&1; }; then
    if [[ -f $ROOT/test/setup.sh ]]; then
        log "running test/setup.sh (install packages, build, install pg_claim)"
        bash "$ROOT/test/setup.sh" >&2 || log "test/setup.sh failed; continuing with what is installed"
    fi
fi
command -v "$PG_CONFIG" >/dev/null 2>&1 || die "pg_config not found (install postgresql-server-dev-${PG_MAJOR:-N} or run test/setup.sh)"
PGBIN=$("$PG_CONFIG" --bindir)
for b in initdb pg_ctl psql pgbench; do [[ -x $PGBIN/$b ]] || die "$PGBIN/$b missing"; done
command -v gnuplot >/dev/null 2>&1 || log "gnuplot not found: no PNG will be drawn (apt-get install gnuplot-nox)"

WITH_EXT=1
if [[ ${BENCH_BASELINE_ONLY:-0} == 1 ]]; then WITH_EXT=0
elif ! ext_installed; then log "pg_claim is not installed: running the baselines only"; WITH_EXT=0; fi

if [[ $(id -u) == 0 ]]; then
    if ! id "$RUN_USER" >/dev/null 2>&1; then
        log "creating OS user $RUN_USER"
        useradd --system --create-home --shell /bin/bash "$RUN_USER"
    fi
    AS=(runuser -u "$RUN_USER" --)
    DBUSER=$RUN_USER
else
    AS=()
    DBUSER=$(id -un)
fi

# --------------------------------------------------------------------------- cluster
mkdir -p "$OUT/logs" "$OUT/series"
rm -f "$OUT"/logs/* "$OUT"/series/* "$OUT/pinned_xmin.dat" "$OUT/pinned_xmin.png" "$OUT/summary.txt"
preload=()
[[ $WITH_EXT == 1 ]] && preload+=(pg_claim)
[[ ${BENCH_STATS:-0} == 1 ]] && preload+=(pg_stat_statements)
preload_csv=$(IFS=,; echo "${preload[*]:-}")
BENCH_MAX_CONNECTIONS=$(( CLIENTS + 30 > 100 ? CLIENTS + 30 : 100 ))
bench_cluster "$PORT" "$([[ ${BENCH_STATS:-0} == 1 ]] && echo "pg_stat_statements.track = all")" "$preload_csv"

# --------------------------------------------------------------------------- scripts
bench_scripts   # claim_one, base_one, update_ref, durable_job_ref (lib.sh)
cat >"$S/claim_batch.sql" <<EOF
SELECT array_agg(token) AS tokens FROM claim.claim_next('bench', n => $BATCH) \gset
SELECT claim.complete_many(:tokens::bigint[]);
EOF
base_batch_script "$BATCH" "$S/base_batch.sql"
cat >"$S/claim_enqueue.sql" <<'EOF'
SELECT claim.enqueue('bench2', '{"n":1}');
EOF
cat >"$S/base_insert.sql" <<'EOF'
INSERT INTO plain_jobs (payload) VALUES ('{"n":1}');
EOF

make_ref   # table ref for the one-row UPDATE transactions

declare -A R   # results
T_START=$(now_s)
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
GIT_REV=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')

# one_run SIDE NAME CLIENTS DUR SCRIPT FILLN [ITEMS_PER_TXN] -> sets TPS; refills (to what the
# measured rate needs) and retries, at most twice, if drained
one_run() {
    local side=$1 name=$2 clients=$3 dur=$4 script=$5 filln=$6 per_txn=${7:-1} left attempt need
    for attempt in 1 2 3; do
        if [[ $side == claim ]]; then fill_claim bench "$filln"; else fill_baseline "$filln"; fi
        R[fill_${name}]=$FILL_SECS
        settle
        run_pgbench "$name" "$clients" "$dur" "$script"
        if [[ $side == claim ]]; then left=$(claim_left bench); else left=$(baseline_left); fi
        if [[ $left -gt 0 && $ABORTED == 0 ]]; then return 0; fi
        if [[ $left -le 0 ]]; then
            # what the measured rate needs for a whole window, with room to spare
            need=$(awk -v t="$TPS" -v p="$per_txn" -v d="$dur" 'BEGIN { printf "%d", t * p * d * 1.5 }')
            (( need > filln * 2 )) || need=$((filln * 2))
            log "  $name drained the backlog of $filln; refilling with $need and running again"
            filln=$need
        else
            [[ $attempt == 3 ]] || log "  $name: client errors; running once more"
        fi
    done
    R[${name}_invalid]=1
}

# --------------------------------------------------------------------------- 1. claim + complete
if want 1; then
log "== 1. claim + complete, one item per call, $CLIENTS clients, backlog >= $BACKLOG"
# Windows in the order baseline, pg_claim, pg_claim, baseline (each from a fresh table or
# queue): a drift of the machine over the run weighs on both sides alike. Each side's figure is
# the mean of its windows.
W1_ORDER=(base claim claim base)
(( WINDOWS1 == 1 )) && W1_ORDER=(base claim)
W1_LOG=
declare -A W1_SUM W1_N
for side in "${W1_ORDER[@]}"; do
    [[ $side == claim && $WITH_EXT != 1 ]] && continue
    k=$(( ${W1_N[$side]:-0} + 1 ))
    name=${side}_one
    (( ${#W1_ORDER[@]} > 2 )) && name=${side}_one_$k
    one_run "$side" "$name" "$CLIENTS" "$DUR" "$S/${side}_one.sql" "$BACKLOG"
    [[ -n ${R[${name}_invalid]:-} ]] && R[${side}_one_invalid]=1
    W1_SUM[$side]=$(awk -v a="${W1_SUM[$side]:-0}" -v b="$TPS" 'BEGIN { print a + b }')
    W1_N[$side]=$k
    W1_LOG+="${W1_LOG:+, }$side $(fmt "$TPS")"
done
for side in base claim; do
    [[ -n ${W1_N[$side]:-} ]] && R[${side}_one]=$(awk -v a="${W1_SUM[$side]}" -v n="${W1_N[$side]}" 'BEGIN { print a / n }')
done
settle
measure update_ref "$CLIENTS" "$DUR" "$S/update_ref.sql"
settle
measure durable_job_ref "$CLIENTS" "$DUR" "$S/durable_job_ref.sql"
fi

# --------------------------------------------------------------------------- 2. pinned xmin
# Another session opens a REPEATABLE READ transaction, takes its snapshot with a SELECT, then
# sleeps; its xmin stays pinned for the whole run. The figure is the mean tps of the last
# $PIN_TAIL seconds, compared with the clean run of workload 1.
pinned_run() {
    local side=$1 name=$2 script=$3 filln=$4
    if [[ $side == claim ]]; then fill_claim bench "$filln"; else fill_baseline "$filln"; fi
    R[fill_${name}]=$FILL_SECS
    settle
    pin_start $((PIN_DUR + 30)) "$OUT/logs/${name}_pinner.log"
    log "  pinner holds xmin $PIN_XMIN (REPEATABLE READ, pg_sleep)"
    run_pgbench "$name" "$CLIENTS" "$PIN_DUR" "$script"
    pin_stop
    BENCH_PIDS=()
    R[$name]=$(series_mean "$OUT/series/$name.dat" $((PIN_DUR - PIN_TAIL)) "$PIN_DUR")
    R[${name}_first]=$(series_mean "$OUT/series/$name.dat" 0 "$PIN_TAIL")
    [[ $ABORTED == 1 ]] && R[${name}_invalid]=1
    log "  $name: first ${PIN_TAIL}s $(fmt "${R[${name}_first]}") tps, last ${PIN_TAIL}s $(fmt "${R[$name]}") tps"
}

if want 2; then
log "== 2. the same with a REPEATABLE READ transaction open for ${PIN_DUR}s (figure: last ${PIN_TAIL}s)"
pinned_run base base_pinned "$S/base_one.sql" "$(backlog_for "${R[base_one]}" "$PIN_DUR" "$BACKLOG")"
if [[ $WITH_EXT == 1 ]]; then
    pinned_run claim claim_pinned "$S/claim_one.sql" "$(backlog_for "${R[claim_one]}" "$PIN_DUR" "$BACKLOG")"
fi

# per-second data file + PNG
DAT=$OUT/pinned_xmin.dat
PNG=$OUT/pinned_xmin.png
{
    echo "# second  pg_claim_tps  baseline_tps   (pinned-xmin run, $CLIENTS clients, jobs/s; clean runs: pg_claim ${R[claim_one]:-n/a}, baseline ${R[base_one]})"
    join -a 1 -a 2 -e NaN -o 0,1.2,2.2 \
        <(sort -k1,1 "$OUT/series/claim_pinned.dat" 2>/dev/null || true) \
        <(sort -k1,1 "$OUT/series/base_pinned.dat") | sort -n
} >"$DAT"
if command -v gnuplot >/dev/null 2>&1; then
    term="pngcairo noenhanced size 1000,560 font 'sans,10'"
    gnuplot -e "set terminal $term" -e "quit" 2>/dev/null || term="png noenhanced size 1000,560"
    gnuplot <<EOF 2>"$OUT/logs/gnuplot.log" || log "gnuplot failed (see $OUT/logs/gnuplot.log)"
set terminal $term
set output '$PNG'
set title "Jobs/s (claim + complete, $CLIENTS clients) while a REPEATABLE READ transaction pins xmin for ${PIN_DUR} s"
set xlabel 'seconds into the run'
set ylabel 'jobs per second'
set grid
set key top right box opaque
set object 1 rect from $((PIN_DUR - PIN_TAIL)),graph 0 to $PIN_DUR,graph 1 fc rgb '#eeeeee' fs solid 0.5 noborder behind
set label 1 'measured window' at $((PIN_DUR - PIN_TAIL)),graph 0.04 offset 0.5,0
set yrange [0:*]
set xrange [0:$PIN_DUR]
clean_c = ${R[claim_one]:-NaN}
clean_b = ${R[base_one]}
plot '$DAT' using 1:2 with lines lw 2 lc rgb '#1f77b4' title 'pg_claim (pinned)', \
     '$DAT' using 1:3 with lines lw 2 lc rgb '#d62728' title 'SKIP LOCKED baseline (pinned)', \
     clean_c with lines dt 2 lc rgb '#1f77b4' title 'pg_claim clean run', \
     clean_b with lines dt 2 lc rgb '#d62728' title 'baseline clean run'
EOF
fi
fi

# --------------------------------------------------------------------------- 3. batched
if want 3; then
log "== 3. batched: claim $BATCH + complete(array), $BATCH_CLIENTS clients"
# Size the backlog so a 4-client run cannot drain it (a drained run is refilled and repeated).
BATCH_BACKLOG=$(backlog_for 120000 "$DUR" "$BACKLOG")
one_run base base_batch "$BATCH_CLIENTS" "$DUR" "$S/base_batch.sql" "$BATCH_BACKLOG"
R[base_batch]=$(awk -v t="$TPS" -v b="$BATCH" 'BEGIN { print t * b }')
if [[ $WITH_EXT == 1 ]]; then
    one_run claim claim_batch "$BATCH_CLIENTS" "$DUR" "$S/claim_batch.sql" \
        "$(backlog_for "$(awk -v r="${R[base_batch]}" 'BEGIN { r *= 2.5; print (r > 250000 ? r : 250000) }')" "$DUR" "$BACKLOG")" "$BATCH"
    R[claim_batch]=$(awk -v t="$TPS" -v b="$BATCH" 'BEGIN { print t * b }')
fi
fi

# --------------------------------------------------------------------------- 4. enqueue
if want 4; then
log "== 4. enqueue, one per transaction, $CLIENTS clients"
sql <<'EOF'
DROP TABLE IF EXISTS plain_jobs;
CREATE TABLE plain_jobs (
    id          bigserial PRIMARY KEY,
    payload     jsonb NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    status      text NOT NULL DEFAULT 'new'
);
EOF
settle
measure base_insert "$CLIENTS" "$DUR" "$S/base_insert.sql"
if [[ $WITH_EXT == 1 ]]; then
    sql -c "SELECT claim.create_queue('bench2')" >/dev/null
    settle
    measure claim_enqueue "$CLIENTS" "$DUR" "$S/claim_enqueue.sql"
fi
fi

# --------------------------------------------------------------------------- summary
ELAPSED=$(elapsed_s)

row() { # workload claim base ratio target met
    printf '| %-44s | %-18s | %-18s | %-12s | %-16s | %-4s |\n' "$@"
}
verdict() { # value op threshold invalid
    if [[ $4 == 1 ]]; then echo "INVALID"; return; fi
    awk -v v="$1" -v t="$3" 'BEGIN { if (v == "nan" || v == "") print "n/a"; else print (v >= t ? "yes" : "NO") }'
}
ratio_row() { # label claimkey basekey target unit
    local c=${R[$2]:-} b=${R[$3]:-} r met inv=0
    [[ -n ${R[${2}_invalid]:-} || -n ${R[${3}_invalid]:-} ]] && inv=1
    if [[ -n $c ]]; then r=$(fdiv "$c" "$b"); met=$(verdict "$r" ge "$4" "$inv"); else r=n/a; met=n/a; fi
    row "$1" "$(fmt "$c") $5" "$(fmt "$b") $5" "${r}x" ">= ${4}x" "$met"
}

{
    echo "pg_claim bench  $(date -u '+%Y-%m-%d %H:%M UTC')  commit $GIT_REV  $(nproc) cores"
    echo "PostgreSQL $("$PGBIN/postgres" --version | awk '{print $3}'), shared_buffers 1GB, synchronous_commit on, pgbench -M prepared -j $THREADS, ${DUR}s windows, pinned run ${PIN_DUR}s (last ${PIN_TAIL}s)"
    echo "backlog >= $BACKLOG items at the start of each run (fresh table/queue per run, VACUUM ANALYZE, CHECKPOINT)"
    echo "baseline: the hand-written SKIP LOCKED queue, table q(id bigserial PK, status text, process_id text, payload jsonb, created_at), partial index q(id) WHERE status='new'"
    if [[ $WITH_EXT == 1 ]]; then
        echo "pg_claim.so installed $(date -u -r "$("$PG_CONFIG" --pkglibdir)/pg_claim.so" '+%Y-%m-%d %H:%M UTC') (BENCH_SETUP=1 rebuilds and reinstalls from this checkout first)"
    else
        echo "pg_claim not installed: baselines only"
    fi
    echo
    row "workload" "pg_claim" "baseline" "ratio" "target" "met?"
    row "--------------------------------------------" "------------------" "------------------" "------------" "----------------" "----"
    want 1 && ratio_row "1. claim+complete, 1/call, $CLIENTS clients" claim_one base_one 2.0 "jobs/s"
    # pinned row: ratio = pg_claim pinned / pg_claim clean
    pc=${R[claim_pinned]:-}; pb=${R[base_pinned]:-}
    kb=$(fdiv "$pb" "${R[base_one]:-}")
    if ! want 2; then :
    elif [[ -n $pc ]]; then
        kc=$(fdiv "$pc" "${R[claim_one]}")
        inv=0; [[ -n ${R[claim_pinned_invalid]:-} ]] && inv=1
        row "2. pinned xmin ${PIN_DUR}s, last ${PIN_TAIL}s (vs clean)" \
            "$(fmt "$pc") ($(awk -v k="$kc" 'BEGIN{printf "%.0f", k*100}')%)" \
            "$(fmt "$pb") ($(awk -v k="$kb" 'BEGIN{printf "%.0f", k*100}')%)" \
            "${kc} of clean" ">= 0.70 of clean" "$(verdict "$kc" ge 0.70 "$inv")"
    else
        row "2. pinned xmin ${PIN_DUR}s, last ${PIN_TAIL}s (vs clean)" "n/a" \
            "$(fmt "$pb") ($(awk -v k="$kb" 'BEGIN{printf "%.0f", k*100}')%)" "n/a" ">= 0.70 of clean" "n/a"
    fi
    want 3 && ratio_row "3. batched $BATCH, $BATCH_CLIENTS clients" claim_batch base_batch 2.5 "items/s"
    want 4 && ratio_row "4. enqueue, 1/txn, $CLIENTS clients" claim_enqueue base_insert 0.8 "items/s"
    echo
    want 1 && echo "1. windows in run order (jobs/s): $W1_LOG"
    want 1 && echo "reference: one-row UPDATE per transaction, $CLIENTS clients: $(fmt "${R[update_ref]}") tps"
    want 1 && echo "reference: a job of a trivial SELECT and a one-row UPDATE (two round trips, one durable commit): $(fmt "${R[durable_job_ref]}") jobs/s; pg_claim's claim+complete reaches $(fdiv "${R[claim_one]:-0}" "${R[durable_job_ref]}") of it, 2.0x the baseline would be $(fdiv "$(awk -v b="${R[base_one]}" 'BEGIN { print 2 * b }')" "${R[durable_job_ref]}") of it"
    [[ -n $pc ]] && echo "pinned run, pg_claim vs baseline over the last ${PIN_TAIL}s: $(fdiv "$pc" "$pb")x"
    want 2 && echo "pinned run, first ${PIN_TAIL}s: pg_claim $(fmt "${R[claim_pinned_first]:-}"), baseline $(fmt "${R[base_pinned_first]}") jobs/s"
    fills="fill times (s):"
    for k in "${!R[@]}"; do [[ $k == fill_* ]] && fills+=" ${k#fill_}=${R[$k]}"; done
    echo "$fills"
    want 2 && echo "pinned-xmin plot: $PNG (data $DAT)"
    echo "load average at start: $LOAD_START, at end: $(cut -d' ' -f1-3 /proc/loadavg) (other work on the machine skews both sides alike)"
    echo "logs: $OUT/logs, per-second series: $OUT/series; bench wall time ${ELAPSED}s"
} | tee "$OUT/summary.txt"
