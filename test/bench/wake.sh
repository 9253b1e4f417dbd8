#!/usr/bin/env bash
# test/bench/wake.sh — wake latency, idle CPU and expiry lag of the worker.
#
#   bash test/bench/wake.sh            (as root or as an unprivileged user; the
#                                       extension must be installed: make install)
#
# Starts its own throwaway cluster (shared_preload_libraries = 'pg_claim'),
# builds test/bench/wake_latency.cpp with libpq and prints, in one run:
#   1. wake latency, producer's COMMIT returning -> blocked claim_next returning,
#      WAITERS (16) waiting sessions, ITEMS (10000) items enqueued one per
#      transaction at RATE (1000) items/s: p50/p99;
#   2. the same for a LISTEN/NOTIFY + FOR UPDATE SKIP LOCKED client loop;
#   3. the worker's CPU while idle (10 s, from /proc);
#   4. expiry lag: lease end -> item delivered again to a waiting claim_next.
# Targets: p50 <= 1 ms, p99 <= 5 ms, idle CPU near zero, expiry lag p99 <= 100 ms.
#
# Environment: WAITERS, ITEMS, RATE, EXPIRY_ITEMS (200, claimed 3 ms apart), PGCLAIM_USER (pgclaim,
# used when run as root), PORT (5577).
set -euo pipefail

. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
WAITERS=${WAITERS:-16}
ITEMS=${ITEMS:-10000}
RATE=${RATE:-1000}
EXPIRY_ITEMS=${EXPIRY_ITEMS:-200}

echo "== cluster (port ${PORT:-5577})"
scratch_cluster wake "${PORT:-5577}" "max_connections = 100
synchronous_commit = on"   # ROOT, PG_BIN, PORT, WORK, as_user, psql_ (lib.sh)

echo "== building wake_latency"
g++ -O2 -std=c++17 -pthread -I"$($PG_BIN/pg_config --includedir)" \
    -o "$WORK/wake_latency" "$ROOT/test/bench/wake_latency.cpp" -lpq

CONN="host=$WORK port=$PORT dbname=postgres"
psql_ -c 'CREATE EXTENSION pg_claim'
for _ in $(seq 50); do
    [[ $(psql_ -c "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'pg_claim worker'") == 1 ]] && break
    sleep 0.1
done

echo "== wake latency: $WAITERS waiters, $ITEMS items at $RATE/s, one per transaction"
# A failed run prints "failed" in the summary instead of stopping the bench.
CLAIM=$(as_user "$WORK/wake_latency" "$CONN" claim "$WAITERS" "$ITEMS" "$RATE") || CLAIM="claim failed"
echo "$CLAIM"
LISTEN=$(as_user "$WORK/wake_latency" "$CONN" listen "$WAITERS" "$ITEMS" "$RATE") || LISTEN="listen failed"
echo "$LISTEN"

echo "== worker CPU while idle (10 s)"
WPID=$(psql_ -c "SELECT pid FROM pg_stat_activity WHERE backend_type = 'pg_claim worker'")
LPID=$(psql_ -c "SELECT pid FROM pg_stat_activity WHERE backend_type = 'pg_claim launcher'")
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
HZ=$(getconf CLK_TCK)
W0=$(ticks "$WPID"); L0=$(ticks "$LPID"); T0=$(date +%s.%N)
sleep 10
W1=$(ticks "$WPID"); L1=$(ticks "$LPID"); T1=$(date +%s.%N)
IDLE_W=$(awk -v a="$W0" -v b="$W1" -v t0="$T0" -v t1="$T1" -v hz="$HZ" 'BEGIN{printf "%.3f", 100*(b-a)/hz/(t1-t0)}')
IDLE_L=$(awk -v a="$L0" -v b="$L1" -v t0="$T0" -v t1="$T1" -v hz="$HZ" 'BEGIN{printf "%.3f", 100*(b-a)/hz/(t1-t0)}')

echo "== expiry lag: $EXPIRY_ITEMS claims left to expire (lease 1500 ms), $WAITERS waiters"
EXPIRY=$(as_user "$WORK/wake_latency" "$CONN" expiry "$WAITERS" "$EXPIRY_ITEMS" 3) || EXPIRY="expiry failed"
echo "$EXPIRY"

field() { sed -n "s/.* $2=\([^ ]*\).*/\1/p" <<<"$1"; }
echo
echo "================ wake bench summary ================"
printf '%-42s %10s %10s %10s %6s\n' "measure (ms)" p50 p99 max lost
printf '%-42s %10s %10s %10s %6s\n' "pg_claim claim_next(wait) wake latency" \
    "$(field "$CLAIM" p50)" "$(field "$CLAIM" p99)" "$(field "$CLAIM" max)" "$(field "$CLAIM" lost)"
printf '%-42s %10s %10s %10s %6s\n' "LISTEN/NOTIFY + SKIP LOCKED wake latency" \
    "$(field "$LISTEN" p50)" "$(field "$LISTEN" p99)" "$(field "$LISTEN" max)" "$(field "$LISTEN" lost)"
printf '%-42s %10s %10s %10s %6s\n' "expiry lag (lease end -> delivered again)" \
    "$(field "$EXPIRY" p50)" "$(field "$EXPIRY" p99)" "$(field "$EXPIRY" max)" "$(field "$EXPIRY" lost)"
echo "idle CPU: worker ${IDLE_W}%, launcher ${IDLE_L}% of one core over 10 s"
echo "targets: wake p50 <= 1 ms, p99 <= 5 ms; expiry lag p99 <= 100 ms; idle CPU near zero"
echo "raw: $CLAIM | $LISTEN | $EXPIRY"
