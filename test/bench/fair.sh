#!/usr/bin/env bash
# pg_claim bench for fair queues (docs/fairness.md): claim + complete on a
# fair queue whose ready items belong to 1,000 active fair keys, against the
# same queue without fairness and against the hand-written SKIP LOCKED
# queue, all measured in the same run.
#
#   bash test/bench/fair.sh            10 s windows (~3 min on 2 cores)
#   QUICK=1 bash test/bench/fair.sh    5 s windows, 100k backlog (~1.5 min)
#
# Each queue holds BENCH_BACKLOG ready items. The fair queue and the queue
# without fairness get the same items, keys 'k0' .. 'k999', enqueued key by
# key with enqueue_many(fair_key => ...); the queue without fairness is
# created without `fair`, so its items carry the same keys but are handed
# out in queue order. Windows in the order fair, plain, SKIP LOCKED, SKIP
# LOCKED, plain, fair (each figure the mean of two), CLIENTS clients
# (pgbench -M prepared), one item per job: claim_next + complete (two
# statements); the hand-written queue's job is test/bench/lib.sh's
# base_one.sql (UPDATE ... SKIP LOCKED, then the completion UPDATE).
# Targets: fair >= 0.8x the queue without fairness; fair >= 2x SKIP LOCKED.
#
# Environment: BENCH_DURATION (seconds per window, 10; QUICK=1: 5),
# BENCH_BACKLOG (items per queue, 300000; QUICK=1: 100000), CLIENTS (16),
# FAIR_KEYS (1000), BENCH_FAIR_OUT (output directory, default
# test/bench/out/fair), BENCH_KEEP=1 keeps the cluster.
set -Eeuo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/lib.sh"
bench_init fair
OUT=${BENCH_FAIR_OUT:-$ROOT/test/bench/out/fair}
QUICK=${QUICK:-0}
DUR=${BENCH_DURATION:-$([[ $QUICK == 1 ]] && echo 5 || echo 10)}
BACKLOG=${BENCH_BACKLOG:-$([[ $QUICK == 1 ]] && echo 100000 || echo 300000)}
CLIENTS=${CLIENTS:-16}
KEYS=${FAIR_KEYS:-1000}
bench_setup

# fill_keyed QUEUE FAIR: BACKLOG items over KEYS keys, key by key.
fill_keyed() {
    local queue=$1 fair=$2 per=$(( BACKLOG / KEYS )) t0 t1 k
    t0=$(now_s)
    sql -c "SELECT claim.create_queue('$queue', fair => $fair)" >/dev/null
    for (( k = 0; k < KEYS; k++ )); do
        echo "SELECT count(*) FROM claim.enqueue_many('$queue', ARRAY(SELECT jsonb_build_object('i', g) FROM generate_series(1, $per) g), fair_key => 'k$k');"
    done | sql >/dev/null
    sql -c "VACUUM ANALYZE" >/dev/null
    t1=$(now_s)
    log "  '$queue' (fair => $fair): $(( per * KEYS )) items over $KEYS keys in $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')s"
}

log "== filling"
fill_keyed fairq true
fill_keyed plainq false
fill_baseline "$BACKLOG"

for q in fairq plainq; do
    printf '%s\n' "SELECT token FROM claim.claim_next('$q') \\gset" \
                  "SELECT claim.complete(:token::bigint);" >"$S/$q.sql"
done

declare -A SUM
window() { # SIDE N SCRIPT
    settle >/dev/null
    run_pgbench "$1_$2" "$CLIENTS" "$DUR" "$3"
    SUM[$1]=$(awk -v a="${SUM[$1]:-0}" -v b="$TPS" 'BEGIN { print a + b }')
}
log "== windows: $CLIENTS clients, ${DUR}s each"
window fair 1 "$S/fairq.sql"
window plain 1 "$S/plainq.sql"
window base 1 "$S/base_one.sql"
window base 2 "$S/base_one.sql"
window plain 2 "$S/plainq.sql"
window fair 2 "$S/fairq.sql"

FAIR=$(awk -v a="${SUM[fair]}" 'BEGIN { printf "%.0f", a / 2 }')
PLAIN=$(awk -v a="${SUM[plain]}" 'BEGIN { printf "%.0f", a / 2 }')
BASE=$(awk -v a="${SUM[base]}" 'BEGIN { printf "%.0f", a / 2 }')
R_PLAIN=$(fdiv "$FAIR" "$PLAIN")
R_BASE=$(fdiv "$FAIR" "$BASE")
ACTIVE=$(sql -c "SELECT count(*) FROM claim.fair_stats WHERE queue = 'fairq' AND active")
{
    echo "PostgreSQL $("$PGBIN/postgres" --version | awk '{print $3}'), $(nproc) cores, $CLIENTS clients, ${DUR}s windows (fair plain base base plain fair), backlog $BACKLOG per queue, $KEYS fair keys ($ACTIVE active at the end)"
    echo
    row_header
    row "claim+complete, fair queue vs same queue not fair" "$FAIR jobs/s" "$PLAIN jobs/s" "${R_PLAIN}x" ">= 0.8x" "$(verdict "$R_PLAIN" 0.8)"
    row "claim+complete, fair queue vs SKIP LOCKED" "$FAIR jobs/s" "$BASE jobs/s" "${R_BASE}x" ">= 2x" "$(verdict "$R_BASE" 2)"
} | tee "$OUT/summary.txt"
