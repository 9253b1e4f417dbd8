#!/usr/bin/env bash
# pg_claim lease bench: mutex acquire + release, 16 clients over 1,000
# names, against two baselines measured in the same run:
#   table      the django-db-mutex pattern: a lock table with a UNIQUE name and a
#              creation time; acquire = delete expired locks, insert the name
#              (a conflict means "held"); release = delete the row. One statement
#              per transaction, as the library runs them under autocommit.
#   advisory   pg_try_advisory_lock + pg_advisory_unlock (no TTL, no token; for
#              reference).
#   pg_claim   claim.lease_acquire(name, ttl) + claim.lease_release(name, token).
# Prints tps (acquire+release cycles per second) of each and the ratios.
#
#   bash test/bench/leases.sh             15 s per window
#   QUICK=1 bash test/bench/leases.sh     5 s per window
#
# Environment:
#   BENCH_DURATION=15   seconds per window (QUICK=1: 5)
#   BENCH_CLIENTS=16    pgbench clients
#   BENCH_NAMES=1000    distinct lock names
#   BENCH_ROUNDS=3      rounds; each round runs the three in turn, and each
#                       figure is the median over the rounds (so a busy
#                       neighbour on the machine hurts all three alike)
#   BENCH_PORT=5497     port of the throwaway cluster (unix socket only)
#   PG_CONFIG           pg_config of the PostgreSQL to use (default: test/pg-major.sh)
#   BENCH_OUT=dir       output directory (default test/bench/out/leases)
# As root the server runs as the unprivileged OS user `pgclaim` (test/setup.sh
# creates it). The cluster lives in a temp directory and is removed at exit.
# The summary is printed and written to $BENCH_OUT/summary.txt.
set -Eeuo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
OUT=${BENCH_OUT:-$HERE/out/leases}
if [[ ${QUICK:-0} == 1 ]]; then d_dur=5; else d_dur=15; fi
DUR=${BENCH_DURATION:-$d_dur}
CLIENTS=${BENCH_CLIENTS:-16}
NAMES=${BENCH_NAMES:-1000}
PORT=${BENCH_PORT:-5497}
ROUNDS=${BENCH_ROUNDS:-3}
THREADS=2

# shellcheck source-path=SCRIPTDIR
source "$HERE/lib.sh"
bench_init leases-bench
ext_installed || die "pg_claim is not installed (run test/setup.sh)"
mkdir -p "$OUT"
# the settings of test/bench/run.sh; database bench, with the extension
bench_cluster "$PORT"
# django-db-mutex's model: lock_id CharField(255, unique=True), creation_time auto_now_add.
sql -c "CREATE TABLE db_mutex_dbmutex (
            id serial PRIMARY KEY,
            lock_id varchar(255) NOT NULL UNIQUE,
            creation_time timestamptz NOT NULL)"

cat >"$S/table.sql" <<SQL
\\set n random(1, $NAMES)
DELETE FROM db_mutex_dbmutex WHERE creation_time <= now() - interval '60 seconds';
WITH i AS (INSERT INTO db_mutex_dbmutex (lock_id, creation_time) VALUES ('orders:' || :n, now())
           ON CONFLICT (lock_id) DO NOTHING RETURNING id)
SELECT coalesce(max(id), 0) AS got FROM i \\gset
\\if :got
DELETE FROM db_mutex_dbmutex WHERE id = :got;
\\endif
SQL
cat >"$S/advisory.sql" <<SQL
\\set n random(1, $NAMES)
SELECT pg_try_advisory_lock(:n)::int AS got \\gset
\\if :got
SELECT pg_advisory_unlock(:n);
\\endif
SQL
cat >"$S/lease.sql" <<SQL
\\set n random(1, $NAMES)
SELECT coalesce(claim.lease_acquire('orders:' || :n, '60 seconds'), 0) AS tok \\gset
\\if :tok
SELECT claim.lease_release('orders:' || :n, :tok);
\\endif
SQL

# lib.sh's settle (autovacuum idle, CHECKPOINT) after a VACUUM ANALYZE
vacuum_settle() {
    sql -c "VACUUM ANALYZE" >/dev/null
    settle
}

# run NAME ROUND SCRIPT -> TPS
run() {
    local name=$1 round=$2 script=$3 log
    log=$OUT/$name.$round.log
    vacuum_settle
    log "round $round, $name: $CLIENTS clients, ${DUR}s"
    "$PGBIN/pgbench" -n -M prepared -c "$CLIENTS" -j "$THREADS" -T "$DUR" -f "$script" >"$log" 2>&1 || true
    TPS=$(awk '/^tps = / { print $3; exit }' "$log")
    TPS=${TPS:-0}
    if grep -qE 'aborted|ERROR|FATAL' "$log"; then
        log "WARNING: $name had errors:"; grep -E 'aborted|ERROR|FATAL' "$log" | head -5 >&2
    fi
    log "  $name: $(printf '%.0f' "$TPS") tps"
}
median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

# Warm-up (plans, catalog caches, first page extensions), not measured.
BENCH_WARM=$(( DUR < 5 ? DUR : 5 ))
for s in table lease advisory; do
    "$PGBIN/pgbench" -n -M prepared -c "$CLIENTS" -j "$THREADS" -T "$BENCH_WARM" -f "$S/$s.sql" >/dev/null 2>&1 || true
done

A_TABLE=() A_ADV=() A_LEASE=()
for r in $(seq 1 "$ROUNDS"); do
    run table "$r" "$S/table.sql";       A_TABLE+=("$TPS")
    run lease "$r" "$S/lease.sql";       A_LEASE+=("$TPS")
    run advisory "$r" "$S/advisory.sql"; A_ADV+=("$TPS")
done
T_TABLE=$(median "${A_TABLE[@]}")
T_ADV=$(median "${A_ADV[@]}")
T_LEASE=$(median "${A_LEASE[@]}")

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b + 0 == 0) print "n/a"; else printf "%.2f", a / b }'; }
R_TABLE=$(ratio "$T_LEASE" "$T_TABLE")
R_ADV=$(ratio "$T_LEASE" "$T_ADV")
pass=FAIL
awk -v r="$R_TABLE" 'BEGIN { exit !(r + 0 >= 1.5) }' && pass=PASS
{
    echo "pg_claim lease bench: mutex acquire + release, $CLIENTS clients over $NAMES names, ${DUR}s windows, median of $ROUNDS rounds"
    echo "PostgreSQL $("$PGBIN/postgres" --version | awk '{print $3}'), shared_buffers 1GB, synchronous_commit on, pgbench -M prepared -j $THREADS"
    printf '%-44s %10s   %s\n' "run" "cycles/s" "(each round)"
    printf '%-44s %10.0f   %s\n' "table pattern (django-db-mutex)" "$T_TABLE" "$(printf '%.0f ' "${A_TABLE[@]}")"
    printf '%-44s %10.0f   %s\n' "advisory locks (pg_try_advisory_lock)" "$T_ADV" "$(printf '%.0f ' "${A_ADV[@]}")"
    printf '%-44s %10.0f   %s\n' "pg_claim lease_acquire + lease_release" "$T_LEASE" "$(printf '%.0f ' "${A_LEASE[@]}")"
    echo "ratio pg_claim / table pattern:  $R_TABLE  (target >= 1.5: $pass)"
    echo "ratio pg_claim / advisory locks: $R_ADV"
} | tee "$OUT/summary.txt"
