#!/usr/bin/env bash
# pg_claim bench for flow control: what a limit costs, each figure beside the same queue without
# it, measured in the same run.
#
#   bash test/bench/limits.sh              15 s windows (~4 min)
#   QUICK=1 bash test/bench/limits.sh      5 s windows
#
# 1. claim_next + complete (two statements, one item per call) on a queue with
#    max_active = 1000000 (a limit that never binds) against the same queue without limits.
#    Target >= 0.9x.
# 2. The same on a queue with group_limit = 4 whose items spread over 10000 groups
#    (group = item number mod 10000, so neighbours in the queue belong to different groups)
#    against the same items without group keys on a queue without limits. Target >= 0.5x.
#
# Environment: CLIENTS (16), THREADS (2), BENCH_DURATION (15; QUICK: 5) seconds per window,
# WINDOWS (2: A B B A, each side's figure the mean; 1: A B), BENCH_BACKLOG (300000: the least
# number of ready items a window starts with), BENCH_GROUPS (10000), BENCH_ONLY ("1 2"),
# BENCH_WAITS=1 (sample the backends' wait events into logs/waits.txt), BENCH_STATS=1 (preload
# pg_stat_statements; each window's top statements into logs/stats.txt), BENCH_KEEP=1,
# BENCH_OUT (test/bench/out/limits). Outputs: summary.txt, logs/, series/.
set -Eeuo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source-path=SCRIPTDIR
source "$HERE/lib.sh"
bench_windowed limits 300000 "1 2"   # ROOT, OUT, DUR, CLIENTS, THREADS, WINDOWS, BACKLOG, ONLY; the cluster
NGROUPS=${BENCH_GROUPS:-10000}

sql -c "SELECT 'ok' FROM pg_proc WHERE proname = 'create_queue' AND 'group_limit' = ANY(proargnames)" | grep -q ok \
    || die "the installed pg_claim has no create_queue(max_active, group_limit): flow control not installed yet?"

T_START=$(now_s)
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
# Backlog of a window: enough for 1.5 times its duration at twice the best rate seen so far.
backlog() {
    local best
    best=$(printf '%s\n' 0 "${R[plain]:-0}" "${R[active]:-0}" "${R[nogroups]:-0}" "${R[groups]:-0}" | sort -g | tail -1)
    backlog_for "$(awk -v r="$best" 'BEGIN { print r * 2 }')" "$DUR" "$BACKLOG"
}
fill_plain()    { fill_claim bench "$(backlog)"; }
fill_active()   { fill_claim bench "$(backlog)" "max_active => 1000000"; }
fill_groups()   { fill_claim bench "$(backlog)" "group_limit => 4" "g % $NGROUPS"; }

if want 1; then
    log "== 1. claim + complete, max_active = 1000000 vs no limits, $CLIENTS clients"
    ab_windows plain fill_plain "$S/claim_one.sql" active fill_active "$S/claim_one.sql"
fi
if want 2; then
    log "== 2. claim + complete, group_limit = 4 over $NGROUPS groups vs the same items without groups, $CLIENTS clients"
    ab_windows nogroups fill_plain "$S/claim_one.sql" groups fill_groups "$S/claim_one.sql"
fi

ELAPSED=$(elapsed_s)
{
    summary_head "limits bench" "-c $CLIENTS " "fresh queue per window"
    want 1 && ratio_row "1. max_active 1000000 vs no limits, $CLIENTS cl" active plain 0.9 "jobs/s"
    want 2 && ratio_row "2. group_limit 4, $NGROUPS groups vs no groups, $CLIENTS cl" groups nogroups 0.5 "jobs/s"
    echo
    want 1 && echo "1. windows in run order (jobs/s): ${W_LOG[plain]}"
    want 2 && echo "2. windows in run order (jobs/s): ${W_LOG[nogroups]}"
    echo "load average at start: $LOAD_START, at end: $(cut -d' ' -f1-3 /proc/loadavg) (other work on the machine skews both sides alike)"
    echo "logs: $OUT/logs, per-second series: $OUT/series; bench wall time ${ELAPSED}s"
} | tee "$OUT/summary.txt"
