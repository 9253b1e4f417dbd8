#!/usr/bin/env bash
# test/ops/exporter_test.sh — ops/prometheus/queries.yaml through Debian's
# prometheus-postgres-exporter against a live cluster.
#
# Run as root, after test/setup.sh installed the extension:
#
#   bash test/ops/exporter_test.sh
#
#   1. installs prometheus-postgres-exporter when it is missing (Debian's
#      service is not used: this script runs its own exporter);
#   2. starts a throwaway cluster as the unprivileged user "pgclaim" on a free
#      port with shared_preload_libraries = 'pg_claim', creates the extension
#      and a login role that has only pg_monitor;
#   3. runs a known workload (enqueue, claim, complete, fail to retry and to
#      dead, cancel, pause) and keeps one session waiting in claim_next;
#   4. starts the exporter as that role with --extend.query-path, scrapes
#      /metrics and checks every pg_claim_* series against the workload, and
#      that every series ops/grafana/pg_claim.json queries is there.
# The last line is "exporter: N passed, N failed". The servers are stopped
# and the scratch directory removed on exit (EXPORTER_KEEP=1 keeps it).
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
# shellcheck source=lib/cluster.sh
. "$ROOT/test/lib/cluster.sh"
EXPORTER=/usr/bin/prometheus-postgres-exporter
CL_KEEP=${EXPORTER_KEEP:-${CL_KEEP:-0}}
harness_cleanup() {
    [[ -n "${EXPORTER_PID:-}" ]] && kill "$EXPORTER_PID" 2>/dev/null
    [[ -n "${WAITER_PID:-}" ]] && kill "$WAITER_PID" 2>/dev/null
    return 0
}
harness exporter

# Debian's service is not used: this script runs its own exporter.
need_packages prometheus-postgres-exporter || exit 1
need_extension || exit 1
cluster_init exporter </dev/null || { fail "initdb"; exit 1; }
SCRATCH=$CL_DIR
PGPORT=$CL_PORT
CL_DB=ops
say "cluster on port $PGPORT"
cluster_start || { fail "the server starts"; exit 1; }
as_user createdb -h "$SCRATCH" -p "$PGPORT" ops

say "workload"
psql_cl >/dev/null <<'SQL' || { fail "the workload"; exit 1; }
CREATE EXTENSION pg_claim;
CREATE ROLE exporter LOGIN IN ROLE pg_monitor;
SELECT claim.create_queue('jobs', lease => '1 hour', max_attempts => 2, backoff => '0');
SELECT claim.create_queue('idle', lease => '1 hour');
SELECT claim.create_queue('held', lease => '1 hour');
SELECT claim.enqueue('jobs', jsonb_build_object('n', g)) FROM generate_series(1, 10) g;
SELECT claim.enqueue('jobs', '{}', run_at => clock_timestamp() + interval '1 day');
SELECT claim.complete_many(array_agg(token)) FROM claim.claim_next('jobs', n => 3);
SELECT claim.fail(token, 'retry me') FROM claim.claim_next('jobs');
SELECT claim.fail(token, 'broken') FROM claim.claim_next('jobs') WHERE attempt = 2;
SELECT claim.cancel_many('jobs', ARRAY(SELECT id FROM claim.items i JOIN claim.queues q USING (queue_id)
                                  WHERE q.name = 'jobs' AND i.state = 'r' AND i.run_at IS NULL
                                  ORDER BY id LIMIT 1));
SELECT count(*) FROM claim.claim_next('jobs', n => 2);
SELECT claim.enqueue('held', '{}');
SELECT claim.pause('held');
SQL
# One backend waits for items of "idle" for the whole test.
as_user "$PG_BIN/psql" -X -q -h "$SCRATCH" -p "$PGPORT" -d ops \
    -c "SELECT * FROM claim.claim_next('idle', wait => '60 seconds')" >/dev/null 2>&1 &
WAITER_PID=$!
for _ in $(seq 50); do
    [[ "$(psql_cl -Atc "SELECT waiters FROM claim.metrics() WHERE queue = 'idle'")" == 1 ]] && break
    sleep 0.1
done

EXPORTER_PORT="$(free_port)"
say "exporter on port $EXPORTER_PORT ($("$EXPORTER" --version 2>&1 | head -1))"
cp "$ROOT/ops/prometheus/queries.yaml" "$SCRATCH/queries.yaml"
chown "$RUN_USER" "$SCRATCH/queries.yaml"
runuser -u "$RUN_USER" -- env \
    DATA_SOURCE_NAME="host=$SCRATCH port=$PGPORT user=exporter dbname=ops sslmode=disable" \
    "$EXPORTER" --extend.query-path="$SCRATCH/queries.yaml" --web.listen-address="127.0.0.1:$EXPORTER_PORT" \
    >"$SCRATCH/exporter.log" 2>&1 &
EXPORTER_PID=$!
METRICS=""
for _ in $(seq 100); do
    METRICS="$(python3 -c 'import sys,urllib.request; print(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())' \
               "http://127.0.0.1:$EXPORTER_PORT/metrics" 2>/dev/null)"
    grep -q '^pg_claim_enqueued' <<<"$METRICS" && break
    sleep 0.2
done
echo "$METRICS" > "$SCRATCH/metrics.txt"

# value SERIES QUEUE: the sample of pg_claim_SERIES with label queue="QUEUE".
value() {
    awk -v s="pg_claim_$1" -v q="queue=\"$2\"" '
        index($0, s "{") == 1 && index($0, q) { v = $NF; if (v ~ /e\+/) v = sprintf("%.0f", v); print v; exit }' \
        "$SCRATCH/metrics.txt"
}

check "the exporter serves pg_claim_* series" yes "$(grep -q '^pg_claim_' "$SCRATCH/metrics.txt" && echo yes || echo no)"
check "pg_claim_enqueued is a counter" yes "$(grep -q '^# TYPE pg_claim_enqueued counter' "$SCRATCH/metrics.txt" && echo yes || echo no)"
check "pg_claim_ready is a gauge" yes "$(grep -q '^# TYPE pg_claim_ready gauge' "$SCRATCH/metrics.txt" && echo yes || echo no)"
check "no query error" 0 "$(grep -c 'pg_claim.*error\|Error running query' "$SCRATCH/exporter.log")"
#                   series                    queue  expected
while read -r series queue expected; do
    check "pg_claim_${series}{queue=\"$queue\"}" "$expected" "$(value "$series" "$queue")"
done <<'EOF'
enqueued                  jobs  11
claimed                   jobs  7
completed                 jobs  3
failed                    jobs  2
dead                      jobs  1
expired                   jobs  0
cancelled                 jobs  1
ready                     jobs  3
scheduled                 jobs  1
in_flight                 jobs  2
dead_items                jobs  1
waiting                   jobs  0
paused                    jobs  0
waiters                   jobs  0
waiters                   idle  1
enqueued                  idle  NaN
ready                     idle  0
paused                    held  1
ready                     held  1
oldest_ready_age_seconds  idle  0
EOF
age="$(value oldest_ready_age_seconds jobs)"
check "pg_claim_oldest_ready_age_seconds{queue=\"jobs\"} > 0" yes "$(awk -v a="$age" 'BEGIN { print (a + 0 > 0) ? "yes" : "no" }')"
# Every series the Grafana dashboard queries is exported.
for series in $(grep -o 'pg_claim_[a-z_]*' "$ROOT/ops/grafana/pg_claim.json" | sort -u); do
    check "ops/grafana/pg_claim.json: $series is exported" yes \
        "$(grep -q "^$series{" "$SCRATCH/metrics.txt" && echo yes || echo no)"
done
if [[ $FAILED -gt 0 ]]; then
    echo "--- pg_claim series scraped:"; grep '^pg_claim_' "$SCRATCH/metrics.txt" | head -60
    echo "--- exporter log:"; tail -20 "$SCRATCH/exporter.log"
fi
