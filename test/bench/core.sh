#!/usr/bin/env bash
# pg_claim bench of the claim core: what a claim holds in PostgreSQL's lock table, huge claims at
# once, how claim + complete keeps its rate from 16 to 128 clients, and an empty poll under a
# pinned snapshot. One throwaway cluster, every figure beside its baseline from the same run.
#
#   bash test/bench/core.sh             15 s windows, 1M backlog (~5 min on 2 cores)
#   QUICK=1 bash test/bench/core.sh     5 s windows, 200k backlog, one window per client count (~1.5 min)
#
# 1. pg_locks census: rows with fastpath = false that a claimer's backend holds after
#    BEGIN; claim_next(q, n => 500), and claim.lock_table().held; the same after n => 1; baseline:
#    the hand-written SKIP LOCKED queue claiming 500 rows in one UPDATE. Target: the count does
#    not grow with n, no advisory lock.
# 2. Three sessions each BEGIN; claim_next(q, n => 10000) at once, held open together, with
#    PostgreSQL's default max_locks_per_transaction (64) and max_connections = 200: how many
#    succeed. Baselines: the same three with 10000 transaction-scoped advisory locks each (one
#    heavyweight lock per item), and with the hand-written queue's UPDATE ... SKIP LOCKED.
#    Target: 3 of 3.
# 3. claim + complete, one item per call (pgbench -M prepared -j 2), at 16 and at 128 clients,
#    windows 16 128 128 16 (A B B A), each slot running pg_claim, the hand-written SKIP LOCKED
#    queue and a single-row UPDATE; before every window each queue is topped up to the backlog
#    (the hand-written queue's finished rows deleted) and the database vacuumed. Keep = tps at
#    128 / tps at 16. Targets: pg_claim's keep >= 0.9 of the UPDATE's; pg_claim at 128 >= 2.5x
#    the hand-written queue at 128. The wait events of every 128-client window are sampled from
#    pg_stat_activity every 0.1 s (top waits in %).
# 4. An empty queue polled (claim_next, nothing ready) by 8 clients while a REPEATABLE READ
#    snapshot is held open, right after BENCH_POLL_JOBS jobs were worked under that snapshot,
#    against the same poll after the snapshot ended and VACUUM ran. Target >= 0.5x.
#
# Environment:
#   BENCH_DURATION=15        seconds per window (QUICK=1: 5)
#   BENCH_BACKLOG=1000000    ready items (and hand-written rows) when a window of 3 starts (QUICK=1: 200000)
#   WINDOWS=2                2: windows 16 128 128 16, each figure the mean of two; 1: 16 128 (QUICK=1: 1)
#   CLIENTS_LO=16 CLIENTS_HI=128   the two client counts of 3
#   THREADS=2                pgbench -j
#   BENCH_POLL_JOBS=100000   jobs worked under the pinned snapshot in 4
#   BENCH_POLL_CLIENTS=8     clients of the poll
#   BENCH_CENSUS_N=500       items of the census claim in 1
#   BENCH_BIG_N=10000        items each session claims in 2; BENCH_BIG_HOLD=5: seconds each
#                            session keeps its transaction open after its claim
#   BENCH_ONLY="1 2 3 4"     run only these parts
#   BENCH_KEEP=1, BENCH_OUT (test/bench/out/core)
# As root the server runs as the unprivileged OS user `pgclaim`. Outputs: summary.txt, logs/
# (pgbench logs, waits.txt, the sessions of 2), series/.
set -Eeuo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source-path=SCRIPTDIR
source "$HERE/lib.sh"
bench_init core-bench core   # ROOT, OUT
QUICK=${QUICK:-0}
if [[ $QUICK == 1 ]]; then d_dur=5 d_backlog=200000 d_windows=1; else d_dur=15 d_backlog=1000000 d_windows=2; fi
DUR=${BENCH_DURATION:-$d_dur}
BACKLOG=${BENCH_BACKLOG:-$d_backlog}
WINDOWS=${WINDOWS:-$d_windows}
[[ $WINDOWS == 1 || $WINDOWS == 2 ]] || die "WINDOWS must be 1 or 2"
LO=${CLIENTS_LO:-16}
HI=${CLIENTS_HI:-128}
THREADS=${THREADS:-2}
POLL_JOBS=${BENCH_POLL_JOBS:-100000}
POLL_CLIENTS=${BENCH_POLL_CLIENTS:-8}
CENSUS_N=${BENCH_CENSUS_N:-500}
BIG_N=${BENCH_BIG_N:-10000}
BIG_HOLD=${BENCH_BIG_HOLD:-5}
bench_only "1 2 3 4"
for v in DUR BACKLOG LO HI THREADS POLL_JOBS POLL_CLIENTS CENSUS_N BIG_N BIG_HOLD; do
    [[ ${!v} =~ ^[1-9][0-9]*$ ]] || die "$v='${!v}' is not a positive integer"
done
(( HI + 20 <= 200 )) || die "CLIENTS_HI=$HI: the cluster has max_connections = 200"

ext_installed || die "pg_claim is not installed (make install, or run test/setup.sh)"
mkdir -p "$OUT/logs" "$OUT/series"
rm -f "$OUT"/logs/* "$OUT"/series/* "$OUT/summary.txt"
# PostgreSQL's default max_locks_per_transaction (the later line overrides lib.sh's 256).
export BENCH_MAX_CONNECTIONS=200
bench_cluster "$(free_port)" "max_locks_per_transaction = 64"
bench_scripts   # claim_one (queue 'bench'), base_one (table q), update_ref (table ref)
make_ref
sql -c "SELECT 'ok' FROM pg_proc WHERE proname = 'lock_table' AND pronamespace = 'claim'::regnamespace" | grep -q ok \
    || die "the installed pg_claim has no claim.lock_table(): the claim core is not installed"

cat >"$S/poll_work.sql" <<'EOF'
SELECT token FROM claim.claim_next('poll') \gset
SELECT claim.complete(:token::bigint);
EOF
cat >"$S/poll.sql" <<'EOF'
SELECT count(*) FROM claim.claim_next('poll');
EOF

declare -A R
T_START=$(now_s)
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)

# enqueue COUNT items into QUEUE in chunks of 10000
enqueue_n() {
    local queue=$1 total=$2 done_=0 c
    while (( done_ < total )); do
        c=$(( total - done_ < 10000 ? total - done_ : 10000 ))
        echo "SELECT count(*) FROM claim.enqueue_many('$queue', ARRAY(SELECT jsonb_build_object('i', g) FROM generate_series(1, $c) g));"
        done_=$(( done_ + c ))
    done | sql >/dev/null
}

# --------------------------------------------------------------------------- 1. census
# census SQL -> "nonfastpath advisory held": what this backend holds in pg_locks after SQL, in
# the same transaction (rolled back after).
census() {
    sql -F ' ' <<EOF | tail -1
BEGIN;
$1;
SELECT (SELECT count(*) FROM pg_locks WHERE pid = pg_backend_pid() AND NOT fastpath),
       -- advisory locks per item; the transaction's one anchor (field4 0x5041,
       -- docs/claim-core.md) is not one of them
       (SELECT count(*) FROM pg_locks WHERE pid = pg_backend_pid() AND locktype = 'advisory'
                                      AND objsubid <> 20545),
       (SELECT coalesce(held, 0) FROM claim.lock_table());
ROLLBACK;
EOF
}
base_claim_sql() { # N: the hand-written queue's batch claim
    echo "WITH c AS (UPDATE q SET status = 'in-progress', process_id = gen_random_uuid()::text
                     WHERE id IN (SELECT id FROM q WHERE status = 'new' ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED)
                     RETURNING id) SELECT count(*) FROM c"
}

if want 1 || want 2; then
    fill_baseline $(( BIG_N * 3 > CENSUS_N ? BIG_N * 3 : CENSUS_N ))
fi
if want 1; then
    log "== 1. pg_locks census after claim_next(n => $CENSUS_N)"
    fill_claim census $(( CENSUS_N * 2 )) "lease => '1 hour'"
    read -r 'R[c_np]' 'R[c_adv]' 'R[c_held]' <<<"$(census "SELECT count(*) FROM claim.claim_next('census', n => $CENSUS_N)")"
    read -r 'R[c1_np]' 'R[c1_adv]' 'R[c1_held]' <<<"$(census "SELECT count(*) FROM claim.claim_next('census', n => 1)")"
    read -r 'R[b_np]' 'R[b_adv]' _ <<<"$(census "$(base_claim_sql "$CENSUS_N")")"
    log "  pg_claim n=$CENSUS_N: ${R[c_np]} rows (fastpath = false), ${R[c_adv]} advisory, held ${R[c_held]}; n=1: ${R[c1_np]} rows, held ${R[c1_held]}; hand-written $CENSUS_N: ${R[b_np]} rows"
fi

# --------------------------------------------------------------------------- 2. three huge claims
# big_claims LABEL SQL_TEMPLATE: three sessions at once, each BEGIN; SQL (@I@ = 1, 2, 3; it returns
# how many it claimed); hold
# BIG_HOLD s; COMMIT. Sets R[LABEL_ok] (sessions that claimed BIG_N and committed),
# R[LABEL_together] (most sessions seen holding their claims at the same moment), R[LABEL_err].
big_claims() {
    local label=$1 tmpl=$2 i pids=() together=0 n ok=0 err
    for i in 1 2 3; do
        {
            echo '\set ON_ERROR_STOP 1'
            echo '\set VERBOSITY verbose'
            echo 'BEGIN;'
            echo "${tmpl//@I@/$i};"
            echo "SELECT pg_sleep($BIG_HOLD);"
            echo 'COMMIT;'
            echo "SELECT 'committed';"
        } | PGAPPNAME=bench_big_$i "$PGBIN/psql" -X -q -At -F ' ' >"$OUT/logs/big_${label}_$i.log" 2>&1 &
        pids+=($!)
    done
    BENCH_PIDS=("${pids[@]}")
    while kill -0 "${pids[@]}" 2>/dev/null; do
        n=$(sql -c "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE 'bench_big_%' AND query LIKE '%pg_sleep%' AND state = 'active'")
        (( n > together )) && together=$n
        sleep 0.1
    done
    for i in 0 1 2; do wait "${pids[$i]}" 2>/dev/null || true; done
    BENCH_PIDS=()
    for i in 1 2 3; do
        grep -qx "$BIG_N" "$OUT/logs/big_${label}_$i.log" && grep -qx committed "$OUT/logs/big_${label}_$i.log" && ok=$((ok + 1))
    done
    err=$(grep -h '^ERROR:' "$OUT"/logs/big_"${label}"_*.log | sed 's/^ERROR: *//' | sort | uniq -c | awk '{ $1 = $1 "x"; print }' | paste -sd ';' || true)
    R[${label}_ok]=$ok R[${label}_together]=$together R[${label}_err]=${err:-none}
    log "  $label: $ok of 3 claimed $BIG_N and committed, at most $together held at once; errors: ${err:-none}"
}

if want 2; then
    log "== 2. three sessions each claim $BIG_N at once (max_locks_per_transaction 64, max_connections 200)"
    fill_claim big $(( BIG_N * 3 )) "lease => '1 hour'"
    settle
    big_claims claim "SELECT count(*) FROM claim.claim_next('big', n => $BIG_N)"
    big_claims advisory "SELECT count(*) FROM (SELECT pg_advisory_xact_lock(g) FROM generate_series((@I@ - 1) * $BIG_N + 1, @I@ * $BIG_N) g) s"
    big_claims skiplocked "$(base_claim_sql "$BIG_N")"
fi

# --------------------------------------------------------------------------- 3. 16 against 128 clients
top_claim() { # top up queue 'bench' to BACKLOG ready items
    local ready
    ready=$(sql -c "SELECT coalesce(sum(ready), 0) FROM claim.queue_stats WHERE queue = 'bench'")
    (( ready < BACKLOG )) && enqueue_n bench $(( BACKLOG - ready ))
    return 0
}
top_base() { # the hand-written queue: drop its finished rows, top up to BACKLOG new ones
    sql -c "DELETE FROM q WHERE status <> 'new'" >/dev/null
    sql -c "INSERT INTO q (payload) SELECT jsonb_build_object('i', g) FROM generate_series(1, $BACKLOG - (SELECT count(*) FROM q)) g" >/dev/null
}
declare -A SUM NWIN
WLOG=
# window WORKLOAD CLIENTS K
window() {
    local w=$1 c=$2 k=$3 script
    case $w in
        claim) top_claim; script=$S/claim_one.sql ;;
        base)  top_base;  script=$S/base_one.sql ;;
        upd)   script=$S/update_ref.sql ;;
    esac
    sql -c "VACUUM ANALYZE" >/dev/null
    settle
    if (( c == HI )); then
        BENCH_WAITS=1 run_pgbench "${w}_${c}_$k" "$c" "$DUR" "$script"
    else
        run_pgbench "${w}_${c}_$k" "$c" "$DUR" "$script"
    fi
    [[ $ABORTED == 1 ]] && R[${w}_${c}_invalid]=1
    SUM[$w,$c]=$(awk -v a="${SUM[$w,$c]:-0}" -v t="$TPS" 'BEGIN { print a + t }')
    NWIN[$w,$c]=$(( ${NWIN[$w,$c]:-0} + 1 ))
    R[${w}_$c]=$(awk -v s="${SUM[$w,$c]}" -v n="${NWIN[$w,$c]}" 'BEGIN { print s / n }')
    WLOG+="${WLOG:+, }$w@$c $(fmt "$TPS")"
}
# waits_of WORKLOAD: the top wait events (all queries together) of its 128-client windows
waits_of() {
    cat "$WORK"/waits_"$1"_"${HI}"_*.txt 2>/dev/null \
        | awk -F'|' 'NF == 3 { n[$1] += $3; t += $3 }
                     END { for (e in n) printf "%.0f%% %s\n", 100 * n[e] / t, e }' \
        | sort -rn | head -"${2:-5}" | paste -sd ',' | sed 's/,/, /g'
}

if want 3; then
    log "== 3. claim + complete, 1 per call, $LO against $HI clients; backlog $BACKLOG"
    fill_claim bench "$BACKLOG"
    fill_baseline "$BACKLOG"
    if [[ $WINDOWS == 2 ]]; then
        slots=("$LO:claim base upd:1" "$HI:claim base upd:1" "$HI:upd base claim:2" "$LO:upd base claim:2")
    else
        slots=("$LO:claim base upd:1" "$HI:upd base claim:1")
    fi
    for slot in "${slots[@]}"; do
        IFS=: read -r c ws k <<<"$slot"
        for w in $ws; do window "$w" "$c" "$k"; done
    done
    for w in claim base upd; do
        R[${w}_keep]=$(fdiv "${R[${w}_$HI]}" "${R[${w}_$LO]}")
        [[ -n ${R[${w}_${LO}_invalid]:-}${R[${w}_${HI}_invalid]:-} ]] && R[${w}_keep_invalid]=1
    done
    R[keep_ratio]=$(fdiv "${R[claim_keep]}" "${R[upd_keep]}")
    R[hi_ratio]=$(fdiv "${R[claim_$HI]}" "${R[base_$HI]}")
fi

# --------------------------------------------------------------------------- 4. empty poll, pinned snapshot
if want 4; then
    log "== 4. empty poll, $POLL_CLIENTS clients, under a snapshot pinned over $POLL_JOBS worked jobs"
    per_client=$(( (POLL_JOBS + POLL_CLIENTS - 1) / POLL_CLIENTS ))
    fill_claim poll $(( per_client * POLL_CLIENTS ))
    settle
    pin_start 3600 "$OUT/logs/poll_pinner.log"
    log "  pinner holds xmin $PIN_XMIN; working $POLL_JOBS jobs ($POLL_CLIENTS clients)"
    t0=$(now_s)
    "$PGBIN/pgbench" -n -M prepared -c "$POLL_CLIENTS" -j "$THREADS" -t "$per_client" \
        -f "$S/poll_work.sql" >"$OUT/logs/poll_work.log" 2>&1 || true
    R[poll_work_s]=$(awk -v a="$t0" -v b="$(now_s)" 'BEGIN { printf "%.0f", b - a }')
    R[poll_left]=$(claim_left poll)
    (( R[poll_left] == 0 )) || log "  WARNING: ${R[poll_left]} jobs left after the work (see logs/poll_work.log)"
    R[poll_dead]=$(sql -c "SELECT coalesce(sum(n_dead_tup), 0) FROM pg_stat_user_tables WHERE schemaname = 'claim'")
    measure poll_pinned "$POLL_CLIENTS" "$DUR" "$S/poll.sql"
    pin_stop
    sql -c "VACUUM ANALYZE" >/dev/null
    settle
    measure poll_clean "$POLL_CLIENTS" "$DUR" "$S/poll.sql"
fi

# --------------------------------------------------------------------------- summary
ELAPSED=$(elapsed_s)
met_inv() { if [[ -n $2 ]]; then echo INVALID; else echo "$1"; fi; }
{
    echo "pg_claim claim-core bench  $(date -u '+%Y-%m-%d %H:%M UTC')  commit $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')  $(nproc) cores"
    echo "PostgreSQL $("$PGBIN/postgres" --version | awk '{print $3}'), shared_buffers 1GB, synchronous_commit on, max_connections 200, max_locks_per_transaction 64, pgbench -M prepared -j $THREADS, ${DUR}s windows"
    echo "pg_claim.so installed $(date -u -r "$("$PG_CONFIG" --pkglibdir)/pg_claim.so" '+%Y-%m-%d %H:%M UTC')"
    echo
    row_header
    if want 1; then
        row "1. pg_locks fastpath=false rows after claim of $CENSUS_N" "${R[c_np]} (held ${R[c_held]})" "${R[b_np]} (SKIP LOCKED)" \
            "$(fdiv "${R[c_np]}" "${R[b_np]}")x" "no growth" \
            "$( (( R[c_np] <= R[c1_np] && R[c_adv] == 0 )) && echo yes || echo NO)"
    fi
    if want 2; then
        row "2. 3 x BEGIN; claim $BIG_N at once: succeeded" "${R[claim_ok]} of 3" "${R[advisory_ok]} of 3 advisory" \
            "n/a" "3 of 3" "$( (( R[claim_ok] == 3 && R[claim_together] == 3 )) && echo yes || echo NO)"
    fi
    if want 3; then
        row "3. keep $HI/$LO clients, pg_claim vs 1-row UPDATE" "${R[claim_keep]}" "${R[upd_keep]} (UPDATE)" \
            "${R[keep_ratio]}x" ">= 0.9x" "$(met_inv "$(verdict "${R[keep_ratio]}" 0.9)" "${R[claim_keep_invalid]:-}${R[upd_keep_invalid]:-}")"
        row "3. claim+complete at $HI clients vs SKIP LOCKED" "$(fmt "${R[claim_$HI]}") jobs/s" "$(fmt "${R[base_$HI]}") jobs/s" \
            "${R[hi_ratio]}x" ">= 2.5x" "$(met_inv "$(verdict "${R[hi_ratio]}" 2.5)" "${R[claim_${HI}_invalid]:-}${R[base_${HI}_invalid]:-}")"
    fi
    if want 4; then
        R[poll_ratio]=$(awk -v a="${R[poll_pinned]}" -v b="${R[poll_clean]}" 'BEGIN { if (b + 0 == 0) print "nan"; else printf "%.3f", a / b }')
        row "4. empty poll, pinned after $POLL_JOBS jobs vs clean" "$(fmt "${R[poll_pinned]}") calls/s" "$(fmt "${R[poll_clean]}") calls/s" \
            "${R[poll_ratio]}x" ">= 0.5x" "$(met_inv "$(verdict "${R[poll_ratio]}" 0.5)" "${R[poll_pinned_invalid]:-}${R[poll_clean_invalid]:-}")"
    fi
    echo
    if want 1; then
        echo "1. pg_claim, claim of $CENSUS_N: ${R[c_np]} pg_locks rows with fastpath = false, ${R[c_adv]} advisory, claim.lock_table().held ${R[c_held]}; claim of 1: ${R[c1_np]} rows, held ${R[c1_held]}; hand-written claim of $CENSUS_N: ${R[b_np]} rows"
    fi
    if want 2; then
        for l in claim advisory skiplocked; do
            echo "2. $l: ${R[${l}_ok]} of 3 claimed $BIG_N and committed, at most ${R[${l}_together]} held at once; errors: ${R[${l}_err]}"
        done
    fi
    if want 3; then
        for w in claim base upd; do
            case $w in claim) name="pg_claim claim+complete" ;; base) name="SKIP LOCKED queue      " ;; upd) name="single-row UPDATE      " ;; esac
            echo "3. $name  $LO clients $(fmt "${R[${w}_$LO]}")/s, $HI clients $(fmt "${R[${w}_$HI]}")/s, keep ${R[${w}_keep]}${R[${w}_keep_invalid]:+ (INVALID: client errors)}"
        done
        echo "3. windows in run order: $WLOG"
        echo "3. waits at $HI clients (share of active samples), pg_claim: $(waits_of claim)"
        echo "   SKIP LOCKED queue: $(waits_of base 3); single-row UPDATE: $(waits_of upd 3)"
    fi
    if want 4; then
        echo "4. $POLL_JOBS jobs worked in ${R[poll_work_s]}s under the snapshot (${R[poll_left]} left), dead tuples in schema claim then: ${R[poll_dead]}"
    fi
    echo "load average at start: $LOAD_START, at end: $(cut -d' ' -f1-3 /proc/loadavg) (other work on the machine skews both sides alike)"
    echo "logs: $OUT/logs, per-second series: $OUT/series; bench wall time ${ELAPSED}s"
} | tee "$OUT/summary.txt"
