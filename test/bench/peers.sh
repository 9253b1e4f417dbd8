#!/usr/bin/env bash
# pg_claim against a peer queue on the same server: pgmq 1.5.1 (pure SQL, installed from
# test/bench/peers/vendor/pgmq/pgmq-1.5.1.sql, see its README), the same backlog in both,
# alternating windows (A B B A, each side's figure the mean of its two).
#
#   bash test/bench/peers.sh               15 s windows (~3 min)
#   QUICK=1 bash test/bench/peers.sh       5 s windows
#
# 1. single claim: claim_next + complete(token), against pgmq.read(q, 30, 1) + pgmq.delete(q, id);
#    CLIENTS (16) clients.
# 2. batch of BENCH_BATCH (500): claim_next(n => 500) + complete_many(tokens), against
#    pgmq.read(q, 30, 500) + pgmq.delete(q, ids); BENCH_BATCH_CLIENTS (4) clients. Target >= 1.5x.
# 3. enqueue, one item per transaction: claim.enqueue(q, payload) against pgmq.send(q, payload);
#    CLIENTS clients.
# 4. (only with BENCH_ONLY naming it) the batch of 2. against the hand-written SKIP LOCKED batch
#    of test/bench/run.sh (one UPDATE ... FOR UPDATE SKIP LOCKED of 500 rows, one UPDATE of their
#    ids), at each of BENCH_HAND_CLIENTS ("4 16") clients. Target >= 2.5x.
#
# Environment: CLIENTS (16), THREADS (2), BENCH_DURATION (15; QUICK: 5), WINDOWS (2), BENCH_BACKLOG
# (300000: the least number of ready items a window starts with), BENCH_ONLY ("1 2 3"),
# BENCH_WAITS=1, BENCH_STATS=1, BENCH_KEEP=1, BENCH_OUT (test/bench/out/peers).
set -Eeuo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source-path=SCRIPTDIR
source "$HERE/lib.sh"
bench_windowed peers 300000 "1 2 3"   # ROOT, OUT, DUR, CLIENTS, THREADS, WINDOWS, BACKLOG, ONLY; the cluster
BATCH=${BENCH_BATCH:-500}
BATCH_CLIENTS=${BENCH_BATCH_CLIENTS:-4}
PGMQ_SQL=$HERE/peers/vendor/pgmq/pgmq-1.5.1.sql

sql -f "$PGMQ_SQL" >/dev/null || die "installing pgmq from $PGMQ_SQL failed"

cat >"$S/pgmq_one.sql" <<'EOF'
SELECT msg_id FROM pgmq.read('bench', 30, 1) \gset
SELECT count(*) FROM pgmq.delete('bench', ARRAY[:msg_id::bigint]);
EOF
cat >"$S/claim_batch.sql" <<EOF
SELECT array_agg(token) AS tokens FROM claim.claim_next('bench', n => $BATCH) \gset
SELECT claim.complete_many(:tokens::bigint[]);
EOF
cat >"$S/pgmq_batch.sql" <<EOF
SELECT array_agg(msg_id) AS ids FROM pgmq.read('bench', 30, $BATCH) \gset
SELECT count(*) FROM pgmq.delete('bench', :ids::bigint[]);
EOF
base_batch_script "$BATCH" "$S/base_batch.sql"
cat >"$S/claim_enqueue.sql" <<'EOF'
SELECT claim.enqueue('bench', '{"n":1}');
EOF
cat >"$S/pgmq_send.sql" <<'EOF'
SELECT pgmq.send('bench', '{"n":1}');
EOF

T_START=$(now_s)
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)

# fill_pgmq N: a fresh pgmq queue 'bench' with N messages of the same payloads as fill_claim's
# (one INSERT ... SELECT into its table, as pgmq.send_batch writes them), then VACUUM ANALYZE.
fill_pgmq() {
    local n=$1
    sql -c "SELECT pgmq.drop_queue('bench') FROM pgmq.meta WHERE queue_name = 'bench'" >/dev/null
    sql -c "SELECT pgmq.create('bench')" >/dev/null
    sql -c "INSERT INTO pgmq.q_bench (vt, message) SELECT clock_timestamp(), jsonb_build_object('i', g) FROM generate_series(1, $n) g" >/dev/null
    sql -c "VACUUM ANALYZE" >/dev/null
    log "  pgmq: $n messages in queue 'bench' + VACUUM ANALYZE"
}
# Backlog of a window: 1.5 times its duration at twice the best rate seen so far (items/s).
backlog() {
    local best
    best=$(printf '%s\n' 0 "${R[claim_one]:-0}" "${R[pgmq_one]:-0}" | sort -g | tail -1)
    backlog_for "$(awk -v r="$best" 'BEGIN { print r * 2 }')" "$DUR" "$BACKLOG"
}
fill_c()  { fill_claim bench "$(backlog)"; }
fill_p()  { fill_pgmq "$(backlog)"; }
# the batch windows: BENCH_BATCH_BACKLOG, by default room for 240k items/s over the window
BATCH_BACKLOG=${BENCH_BATCH_BACKLOG:-$(backlog_for 160000 "$DUR" "$BACKLOG")}
fill_cb() { fill_claim bench "$BATCH_BACKLOG"; }
fill_pb() { fill_pgmq "$BATCH_BACKLOG"; }
fill_hb() { fill_baseline "$BATCH_BACKLOG"; }
empty_c() { fill_claim bench 0; }
empty_p() { fill_pgmq 0; }

if want 1; then
    log "== 1. single claim: claim_next + complete vs pgmq.read(1) + delete, $CLIENTS clients"
    ab_windows claim_one fill_c "$S/claim_one.sql" pgmq_one fill_p "$S/pgmq_one.sql"
fi
if want 2; then
    log "== 2. batch of $BATCH: claim_next(n) + complete_many vs pgmq.read($BATCH) + delete(ids), $BATCH_CLIENTS clients"
    saved=$CLIENTS; CLIENTS=$BATCH_CLIENTS
    ab_windows claim_b fill_cb "$S/claim_batch.sql" pgmq_b fill_pb "$S/pgmq_batch.sql"
    CLIENTS=$saved
    R[claim_b_items]=$(awk -v t="${R[claim_b]}" -v b="$BATCH" 'BEGIN { print t * b }')
    R[pgmq_b_items]=$(awk -v t="${R[pgmq_b]}" -v b="$BATCH" 'BEGIN { print t * b }')
    R[claim_b_items_invalid]=${R[claim_b_invalid]:-}; R[pgmq_b_items_invalid]=${R[pgmq_b_invalid]:-}
    [[ -n ${R[claim_b_items_invalid]} ]] || unset 'R[claim_b_items_invalid]'
    [[ -n ${R[pgmq_b_items_invalid]} ]] || unset 'R[pgmq_b_items_invalid]'
fi
if want 3; then
    log "== 3. enqueue, one per transaction: claim.enqueue vs pgmq.send, $CLIENTS clients"
    ab_windows claim_enq empty_c "$S/claim_enqueue.sql" pgmq_send empty_p "$S/pgmq_send.sql"
fi
HAND_CLIENTS=${BENCH_HAND_CLIENTS:-4 16}
if want 4; then
    saved=$CLIENTS
    for c in $HAND_CLIENTS; do
        log "== 4. batch of $BATCH vs the hand-written SKIP LOCKED batch, $c clients"
        CLIENTS=$c
        ab_windows "claim_h$c" fill_cb "$S/claim_batch.sql" "hand_h$c" fill_hb "$S/base_batch.sql"
        R[claim_h${c}_items]=$(awk -v t="${R[claim_h$c]}" -v b="$BATCH" 'BEGIN { print t * b }')
        R[hand_h${c}_items]=$(awk -v t="${R[hand_h$c]}" -v b="$BATCH" 'BEGIN { print t * b }')
        if [[ -n ${R[claim_h${c}_invalid]:-} ]]; then R[claim_h${c}_items_invalid]=1; fi
        if [[ -n ${R[hand_h${c}_invalid]:-} ]]; then R[hand_h${c}_items_invalid]=1; fi
    done
    CLIENTS=$saved
fi

ELAPSED=$(elapsed_s)
{
    summary_head "peers bench (pgmq 1.5.1)" "" "fresh queue per window"
    want 1 && ratio_row "1. single claim + complete vs pgmq, $CLIENTS cl" claim_one pgmq_one 1.0 "jobs/s"
    want 2 && ratio_row "2. batch of $BATCH vs pgmq read + delete, $BATCH_CLIENTS cl" claim_b_items pgmq_b_items 1.5 "items/s"
    want 3 && ratio_row "3. enqueue vs pgmq.send, $CLIENTS cl" claim_enq pgmq_send 1.0 "items/s"
    if want 4; then
        for c in $HAND_CLIENTS; do
            ratio_row "4. batch of $BATCH vs hand-written batch, $c cl" "claim_h${c}_items" "hand_h${c}_items" 2.5 "items/s"
        done
    fi
    echo
    want 1 && echo "1. windows in run order (tps): ${W_LOG[claim_one]}"
    want 2 && echo "2. windows in run order (batches/s): ${W_LOG[claim_b]}"
    want 3 && echo "3. windows in run order (tps): ${W_LOG[claim_enq]}"
    if want 4; then for c in $HAND_CLIENTS; do echo "4. $c clients, windows in run order (batches/s): ${W_LOG[claim_h$c]}"; done; fi
    echo "load average at start: $LOAD_START, at end: $(cut -d' ' -f1-3 /proc/loadavg) (other work on the machine skews both sides alike)"
    echo "logs: $OUT/logs, per-second series: $OUT/series; bench wall time ${ELAPSED}s"
} | tee "$OUT/summary.txt"
