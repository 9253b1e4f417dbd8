#!/usr/bin/env bash
# test/hardening/soak.sh — the fault soak: load on every kind of pg_claim object while
# backends are terminated, statements cancelled and the server crash-restarted;
# then Jepsen-style counts that must all be 0.
#
#   bash test/hardening/soak.sh [SECONDS]          (or SOAK_SECONDS; default 60)
#
# Run as root from the checkout, with the extension installed (test/setup.sh).
# Installs python3-psycopg if missing, starts a throwaway cluster as the OS
# user pgclaim (extension preloaded) and runs test/hardening/soak.py, which holds
# the load, the chaos and the checks (its header says what each client does).
#
# Counts (each must be 0):
#   lost                committed enqueues (single, batch, trigger-fed) never
#                       completed, after a final drain
#   duplicated          effects committed twice (per key, per item id)
#   unexpected          effects of items never enqueued (or under another id)
#   out of order        effects of a group committed out of enqueue order
#   fencing violations  a counter write committed under a token lower than an
#                       earlier committed write's token for the same lease
#   once violations     a once key whose effect committed twice, or a taken key
#                       without its effect
#   shared/exclusive    a write under the lease rw:c committed under a token
#     violations        below an earlier exclusive write's, or an exclusive one
#                       below any earlier write's
#   epochs out of order a leader of soak/leader elected later with a lower epoch
#   watch gaps          a change under soak/ committed and never delivered to
#                       the resuming watcher, or delivered twice or out of order
#   dead items          items that used up their attempts (max_attempts is huge)
# and the faults bit (each must be above 0): stale holders refused with PC001,
# backends terminated, statements cancelled, crash-restarts. The server log
# must show no backend terminated by a signal and no PANIC.
#
# Environment: SOAK_SECONDS, SOAK_CRASHES (crash-restarts; default one per 20 s,
# 2 to 10; 0 below 20 s), SOAK_DRAIN_SECONDS (90), SOAK_SEED, PGCLAIM_USER,
# CL_KEEP=1 (keep the cluster directory and log).
# Last line: "soak: N passed, N failed"; exit status 1 if anything failed.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
# shellcheck source=lib/cluster.sh
. "$ROOT/test/lib/cluster.sh"

SECS="${1:-${SOAK_SECONDS:-60}}"
HARNESS_LOG_TAIL=1
harness soak
need_packages python3-psycopg || exit 1

cluster_init soak <<'EOF'
max_connections = 60
log_min_messages = warning
log_connections = off
restart_after_crash = on
EOF
cluster_start || { fail "server did not start"; exit 1; }
cluster_database soak || exit 1
psql_cl >/dev/null <<'SQL' || { fail "fixture"; exit 1; }
-- attempts never run out: an item that went dead would count as lost
SELECT claim.create_queue('soak_q', lease => '2 seconds', max_attempts => 1000000, backoff => '0');
SELECT claim.create_queue('soak_trig', lease => '2 seconds', max_attempts => 1000000, backoff => '0');
-- what producers committed (k: a unique key carried in the payload)
CREATE TABLE soak_enqueued (k text PRIMARY KEY, item_id bigint, queue text NOT NULL,
                            group_key text, kind text NOT NULL);
-- what workers committed, with complete, in one transaction; no unique key on
-- purpose, so a duplicate is counted rather than refused
CREATE TABLE soak_effects (seq bigserial PRIMARY KEY, item_id bigint NOT NULL, k text,
                           queue text NOT NULL, group_key text, token bigint NOT NULL,
                           worker text, at timestamptz NOT NULL DEFAULT clock_timestamp());
-- trigger-fed producer: each row becomes an item of soak_trig, grouped by grp
CREATE TABLE soak_orders (id bigserial PRIMARY KEY, k text NOT NULL UNIQUE, grp text);
CREATE TRIGGER soak_orders_enqueue AFTER INSERT ON soak_orders
    FOR EACH ROW EXECUTE FUNCTION claim.enqueue_trigger('soak_trig', 'grp');
-- the fenced counter: value is the commit order of the writes (row lock)
CREATE TABLE soak_counter (name text PRIMARY KEY, value bigint NOT NULL);
INSERT INTO soak_counter VALUES ('fence:a', 0), ('fence:b', 0), ('rw:c', 0);
-- writes under the shared or exclusive lease rw:c, value in commit order
CREATE TABLE soak_rw (value bigint PRIMARY KEY, token bigint NOT NULL, shared boolean NOT NULL,
                      holder text);
-- every epoch of the election soak/leader, when it was first seen
CREATE TABLE soak_epochs (epoch bigint NOT NULL, holder text, at timestamptz NOT NULL);
CREATE TABLE soak_fence (name text NOT NULL, value bigint NOT NULL, token bigint NOT NULL,
                         holder text, PRIMARY KEY (name, value));
CREATE TABLE soak_once_effects (id bigserial PRIMARY KEY, key text NOT NULL, who text);
-- durable runs (docs/steps.md): three steps each, every step's effect written
-- with its checkpoint; no unique key, so a step that ran twice is counted
SELECT claim.create_queue('soak_durable', lease => '2 seconds', max_attempts => 1000000, backoff => '0');
CREATE TABLE soak_runs (item_id bigint PRIMARY KEY);
CREATE TABLE soak_step_effects (item_id bigint NOT NULL, step int NOT NULL, token bigint NOT NULL);
CREATE TABLE soak_runs_done (item_id bigint NOT NULL);
SQL
pass "fixture: queues, trigger, bookkeeping tables"

export SOAK_CONNINFO="host=$CL_DIR port=$CL_PORT dbname=soak user=$RUN_USER"
export SOAK_SECONDS="$SECS" SOAK_PGDATA="$CL_DATA" SOAK_PGLOG="$CL_LOG" SOAK_USER="$RUN_USER" PG_BIN
T0=$SECONDS
OUT="$CL_DIR/soak.out"
nice /usr/bin/python3 -u "$ROOT/test/hardening/soak.py" 2>&1 | tee "$OUT"
rc=${PIPESTATUS[0]}
echo "soak.py finished in $((SECONDS - T0))s (exit $rc)"
while IFS= read -r line; do
    case "$line" in
        "ok: "*) PASSED=$((PASSED + 1)) ;;
        "FAILED: "*) FAILED=$((FAILED + 1)) ;;
    esac
done <"$OUT"
if (( rc != 0 )) && ! grep -q '^FAILED: ' "$OUT"; then fail "soak.py exited with $rc"; fi

crashes=$(grep -cE 'terminated by signal|terminated by exception|PANIC:' "$CL_LOG")
restarts=$(grep -c 'database system was not properly shut down' "$CL_LOG")
echo "server log: $restarts crash recoveries"
if (( crashes == 0 )); then
    pass "server log: no backend terminated by a signal or exception, no PANIC"
else
    fail "server log: $crashes crash line(s)"
    grep -E -A 1 'terminated by signal|terminated by exception|PANIC:' "$CL_LOG" | head -n 20
fi
exit 0
