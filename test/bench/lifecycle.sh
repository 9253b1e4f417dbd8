#!/usr/bin/env bash
# pg_claim bench for the job lifecycle: every figure beside its baseline from the same run.
#
#   bash test/bench/lifecycle.sh              15 s windows, 60 s pinned-xmin run (~5 min)
#   QUICK=1 bash test/bench/lifecycle.sh      5 s windows, 20 s pinned-xmin run
#
# 1. The one-statement loop: `claim_next('bench', done => ARRAY[previous token])`, one item per
#    call, one commit per job, against the hand-written SKIP LOCKED queue (claim UPDATE + completion
#    UPDATE, two commits per job, as in run.sh). Beside it: the physical reference, one durable
#    single-row UPDATE per job. Target >= 3.0x.
# 2. claim_next + complete (two statements) on a queue with retain = '1 hour' against the same
#    with retain = 0. Target >= 0.8x.
# 3. The same retaining workload while a REPEATABLE READ transaction holds its snapshot for
#    BENCH_PIN_DURATION seconds: mean tps of the last BENCH_PIN_TAIL seconds against the clean
#    retaining run of 2. Target >= 0.70. n_dead_tup of claim.items and of the history slots
#    claim.finished_0..3 from pg_stat_user_tables at the end of the pinned run; then a queue that
#    retains 2 s, completed under the still pinned snapshot, shows the worker removing expired
#    history by truncating slots (the slots' rows go, and no dead tuples are left).
# 4. item_state(wait) wake latency (lifecycle/wake_state.py, python3-psycopg): p50/p99 over
#    BENCH_WAKE_SAMPLES samples, from the completer's COMMIT returning to the waiter's call
#    returning, beside a LISTEN waiter woken by the NOTIFY of the completing transaction, measured
#    the same way. Target p50 <= 1 ms, p99 <= 5 ms.
#
# Environment: CLIENTS (16), THREADS (2), BENCH_DURATION (15; QUICK: 5) seconds per window,
# WINDOWS (2: windows run A B B A, each side's figure the mean; 1: A B), BENCH_PIN_DURATION
# (60; QUICK: 20), BENCH_PIN_TAIL (15; QUICK: 5), BENCH_BACKLOG (200000: the least number of
# ready items a window starts with), BENCH_WAKE_SAMPLES (500), BENCH_ONLY ("1 2 3 4"; 3 implies 2),
# BENCH_WAITS=1 (sample the backends' wait events into logs/waits.txt), BENCH_STATS=1 (preload
# pg_stat_statements; each window's top statements into logs/stats.txt), BENCH_KEEP=1,
# BENCH_OUT (test/bench/out/lifecycle). Outputs: summary.txt, logs/, series/.
set -Eeuo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source-path=SCRIPTDIR
source "$HERE/lib.sh"
bench_windowed lifecycle 200000 "1 2 3 4"   # ROOT, OUT, DUR, CLIENTS, THREADS, WINDOWS, BACKLOG, ONLY; the cluster
[[ $ONLY == *" 3 "* && $ONLY != *" 2 "* ]] && ONLY+="2 "
if [[ ${QUICK:-0} == 1 ]]; then d_pin=20 d_tail=5; else d_pin=60 d_tail=15; fi
PIN_DUR=${BENCH_PIN_DURATION:-$d_pin}
PIN_TAIL=${BENCH_PIN_TAIL:-$d_tail}
WAKE_SAMPLES=${BENCH_WAKE_SAMPLES:-500}

make_ref
sql -c "SELECT 'done' FROM pg_proc WHERE proname = 'claim_next' AND 'done' = ANY(proargnames)" | grep -q 'done' \
    || die "the installed pg_claim has no claim_next(done): not 0.2.0 yet?"

# The one-statement loop: each call completes the previous call's token. The first call of a
# client passes an empty array (-D prev='{}'); \gset carries the token to the next transaction.
cat >"$S/claim_loop.sql" <<'EOF'
SELECT ARRAY[token] AS prev FROM claim.claim_next('bench', done => :prev::bigint[]) \gset
EOF

T_START=$(now_s)
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
# Backlog of a window: enough for 1.5 times its duration at twice the rate its side (or, for the
# pinned run, the faster side of 2) reached so far; at least BENCH_BACKLOG.
backlog() {
    local best
    best=$(printf '%s\n' 0 "${@:2}" | sort -g | tail -1)
    backlog_for "$(awk -v r="$best" 'BEGIN { print r * 2 }')" "$1" "$BACKLOG"
}
fill_base()   { fill_baseline "$(backlog "$DUR" "${R[base]:-}")"; }
fill_loop()   { fill_claim bench "$(backlog "$DUR" "${R[loop]:-}")"; }
fill_keep0()  { fill_claim bench "$(backlog "$DUR" "${R[keep0]:-}")"; }
fill_keep1h() { fill_claim bench "$(backlog "$DUR" "${R[keep1h]:-}")" "retain => '1 hour'"; }

# --------------------------------------------------------------------------- 1. one-statement loop
if want 1; then
    log "== 1. one-statement loop (claim_next done => previous token) vs SKIP LOCKED queue, $CLIENTS clients"
    ab_windows base fill_base "$S/base_one.sql" loop fill_loop "$S/claim_loop.sql" -D "prev={}"
    settle
    measure update_ref "$CLIENTS" "$DUR" "$S/update_ref.sql"
fi

# --------------------------------------------------------------------------- 2. retention cost
if want 2; then
    log "== 2. claim + complete, retain = '1 hour' vs retain = 0, $CLIENTS clients"
    ab_windows keep0 fill_keep0 "$S/claim_one.sql" keep1h fill_keep1h "$S/claim_one.sql"
fi

# --------------------------------------------------------------------------- 3. pinned xmin
# n_live_tup/n_dead_tup/n_tup_del of claim.items and the history slots
dead_tuples() {
    sql -F ' ' -c "SELECT relname, n_live_tup, n_dead_tup, n_tup_del, n_tup_ins FROM pg_stat_user_tables
                   WHERE schemaname = 'claim' AND relname ~ '^(items|finished_[0-9]+)$'
                   ORDER BY relname"
}

if want 3; then
    log "== 3. retain = '1 hour' with an xmin pinned for ${PIN_DUR}s (figure: last ${PIN_TAIL}s vs clean)"
    fill_claim bench "$(backlog "$PIN_DUR" "${R[keep0]:-}" "${R[keep1h]:-}")" "retain => '1 hour'"
    settle
    sql -c "SELECT pg_stat_reset()" >/dev/null
    pin_start $((PIN_DUR + 120)) "$OUT/logs/pinner.log"
    log "  pinner holds xmin $PIN_XMIN (REPEATABLE READ, pg_sleep)"
    run_pgbench pinned "$CLIENTS" "$PIN_DUR" "$S/claim_one.sql"
    [[ $ABORTED == 1 ]] && R[pinned_invalid]=1
    R[pinned]=$(series_mean "$OUT/series/pinned.dat" $((PIN_DUR - PIN_TAIL)) "$PIN_DUR")
    R[pinned_first]=$(series_mean "$OUT/series/pinned.dat" 0 "$PIN_TAIL")
    sleep 1.5   # let the backends' statistics reach pg_stat_user_tables
    DEAD_PINNED=$(dead_tuples)
    log "  pinned: first ${PIN_TAIL}s $(fmt "${R[pinned_first]}") tps, last ${PIN_TAIL}s $(fmt "${R[pinned]}") tps"

    # Expiry under the same pinned snapshot: only a 2-second retention left, 2000 jobs completed,
    # then the worker's ring moves on (a third of the longest retention per slot) and truncates.
    sql -c "SELECT claim.drop_queue('bench')" >/dev/null
    fill_claim short 2000 "retain => '2 seconds'"
    sql -c "SELECT claim.complete_many(ARRAY(SELECT token FROM claim.claim_next('short', n => 2000)))" >/dev/null
    sleep 1.5
    DEAD_SHORT_BEFORE=$(dead_tuples)
    sleep 8
    DEAD_SHORT_AFTER=$(dead_tuples)
    SHORT_LEFT=$(sql -c "SELECT count(*) FROM claim.finished_items WHERE queue = 'short'")
    SHORT_ROWS=$(sql -c "SELECT count(*) FROM claim.finished")
    pin_stop
fi

# --------------------------------------------------------------------------- 4. wake latency
if want 4; then
    log "== 4. item_state(wait) wake latency, $WAKE_SAMPLES samples"
    "${PYTHON:-/usr/bin/python3}" "$HERE/lifecycle/wake_state.py" "$WAKE_SAMPLES" >"$OUT/logs/wake_state.log" 2>&1 \
        || { cat "$OUT/logs/wake_state.log" >&2; die "wake_state.py failed"; }
    cat "$OUT/logs/wake_state.log" >&2
    wake_field() { awk -v m="$1" -v f="$2" '$1 == m { for (i = 2; i <= NF; i++) { split($i, kv, "="); if (kv[1] == f) print kv[2] } }' "$OUT/logs/wake_state.log"; }
fi

# --------------------------------------------------------------------------- summary
ELAPSED=$(elapsed_s)
{
    summary_head "lifecycle bench" "-c $CLIENTS " "fresh queue/table per window"
    want 1 && ratio_row "1. one-statement loop vs SKIP LOCKED, $CLIENTS cl" loop base 3.0 "jobs/s"
    want 2 && ratio_row "2. claim+complete retain 1h vs retain 0, $CLIENTS cl" keep1h keep0 0.8 "jobs/s"
    if want 3; then
        k=$(fdiv "${R[pinned]}" "${R[keep1h]}")
        met=$(verdict "$k" 0.70); [[ -n ${R[pinned_invalid]:-}${R[keep1h_invalid]:-} ]] && met=INVALID
        row "3. retain 1h, xmin pinned ${PIN_DUR}s, last ${PIN_TAIL}s" "$(fmt "${R[pinned]}") jobs/s" \
            "$(fmt "${R[keep1h]}") clean" "${k} kept" ">= 0.70" "$met"
    fi
    if want 4; then
        p50=$(wake_field commit_to_return p50); p99=$(wake_field commit_to_return p99)
        n50=$(wake_field notify_commit_to_return p50); n99=$(wake_field notify_commit_to_return p99)
        met=$(verdict "$p50" 1 le)/$(verdict "$p99" 5 le)
        row "4. item_state(wait) wake vs NOTIFY, p50" "$p50 ms" "$n50 ms" "$(fdiv "$p50" "$n50")x" "<= 1 ms" "${met%/*}"
        row "   p99" "$p99 ms" "$n99 ms" "$(fdiv "$p99" "$n99")x" "<= 5 ms" "${met#*/}"
    fi
    echo
    if want 1; then
        echo "1. windows in run order (jobs/s): ${W_LOG[base]}"
        echo "   physical reference, one durable single-row UPDATE per transaction, $CLIENTS clients: $(fmt "${R[update_ref]}") tps;"
        echo "   the loop reaches $(fdiv "${R[loop]}" "${R[update_ref]}") of it, the SKIP LOCKED queue $(fdiv "${R[base]}" "${R[update_ref]}") (3.0x the queue would be $(fdiv "$(awk -v b="${R[base]}" 'BEGIN { print 3 * b }')" "${R[update_ref]}"))"
    fi
    want 2 && echo "2. windows in run order (jobs/s): ${W_LOG[keep0]}"
    if want 3; then
        echo "3. pinned run: first ${PIN_TAIL}s $(fmt "${R[pinned_first]}"), last ${PIN_TAIL}s $(fmt "${R[pinned]}") jobs/s; clean retaining run of 2: $(fmt "${R[keep1h]}")"
        echo "   pg_stat_user_tables at the end of the pinned run (relname n_live_tup n_dead_tup n_tup_del n_tup_ins):"
        sed 's/^/     /' <<<"$DEAD_PINNED"
        echo "   retain '2 seconds', 2000 jobs completed under the same pinned snapshot, 1.5 s later:"
        sed 's/^/     /' <<<"$DEAD_SHORT_BEFORE"
        echo "   9.5 s later (history rows left: $SHORT_ROWS in claim.finished, $SHORT_LEFT visible in finished_items):"
        sed 's/^/     /' <<<"$DEAD_SHORT_AFTER"
    fi
    if want 4; then
        echo "4. $(grep "^commit_to_return" "$OUT/logs/wake_state.log")"
        echo "   $(grep "^precommit_to_return" "$OUT/logs/wake_state.log")"
        echo "   $(grep "^notify_commit_to_return" "$OUT/logs/wake_state.log")"
        echo "   $(grep "^item_state_nowait_call" "$OUT/logs/wake_state.log")"
        echo "   $(grep "^trivial_select_call" "$OUT/logs/wake_state.log")"
        echo "   commit_to_return: waiter's item_state call returned (its client) - completer's COMMIT returned (its client);"
        echo "   precommit_to_return: clock_timestamp() after item_state in the waiter - clock_timestamp() just before COMMIT (includes the WAL flush)"
        echo "   notify_commit_to_return (baseline): LISTEN waiter got the NOTIFY of the completing transaction - its COMMIT returned"
        echo "   item_state_nowait_call, trivial_select_call: round trip of item_state(wait => 0) on a completed item, of SELECT \$1::bigint"
    fi
    echo "load average at start: $LOAD_START, at end: $(cut -d' ' -f1-3 /proc/loadavg) (other work on the machine skews both sides alike)"
    echo "logs: $OUT/logs, per-second series: $OUT/series; bench wall time ${ELAPSED}s"
} | tee "$OUT/summary.txt"
