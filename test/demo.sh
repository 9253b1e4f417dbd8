#!/usr/bin/env bash
# test/demo.sh — the README's first command. Run as root on Debian 12:
#
#   bash test/demo.sh
#
# Installs what is missing, builds pg_claim and installs it system-wide into
# the machine's PostgreSQL (test/setup.sh; its output goes to
# /tmp/pg_claim-demo-setup.log, or DEMO_SETUP_LOG, and one line says how it
# went), then
# starts a throwaway cluster as the unprivileged user "pgclaim" with the
# extension preloaded and shows, with plain SQL through psql:
#   1. 3 producers enqueue 200 items each while 4 workers claim and complete
#      them concurrently (each completion is recorded in a table whose primary
#      key would reject an item completed twice);
#   2. a worker claims an item with a 1-second lease and stalls; the lease
#      expires, another worker reclaims the item under a higher token, and the
#      stale worker's complete() is refused with SQLSTATE PC001;
#   3. a summary: per producer, per worker, tokens, claim.queue_stats;
#   4. why the tokens start where they do: the server restarts and the next
#      token goes on above the durable ceiling of the tokens handed out;
#   5. with --python: the Python client's worker example
#      (clients/python/example.py: 4 concurrent handlers, results kept,
#      one retry) against the same cluster; installs python3-psycopg if
#      missing.
# The cluster is stopped and removed on exit, whatever happens. Exit status is
# non-zero if any step did not behave as described.
#
# Environment: PGCLAIM_USER (default pgclaim), DEMO_PORT (default 54329),
# DEMO_PRODUCERS (3), DEMO_ITEMS (200 per producer), DEMO_WORKERS (4).
set -euo pipefail

WITH_PYTHON=0
[[ "${1:-}" == --python ]] && WITH_PYTHON=1

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
. "$ROOT/test/pg-major.sh"   # PG_MAJOR, PG_BIN
. "$ROOT/test/lib/initdb.sh"   # claim_initdb
RUN_USER="${PGCLAIM_USER:-pgclaim}"
PORT="${DEMO_PORT:-54329}"
PRODUCERS="${DEMO_PRODUCERS:-3}"
ITEMS="${DEMO_ITEMS:-200}"
WORKERS="${DEMO_WORKERS:-4}"
TOTAL=$((PRODUCERS * ITEMS))

if [[ -t 1 ]]; then
    step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
else
    step() { printf '\n== %s\n' "$*"; }
fi

if [[ $(id -u) -ne 0 ]]; then
    echo "test/demo.sh must run as root (it installs packages and the extension)" >&2
    exit 1
fi

# The set-up's output (apt, compiler, make install) goes to a log file; one
# line says how it went and where the log is.
SETUP_LOG="${DEMO_SETUP_LOG:-/tmp/pg_claim-demo-setup.log}"
step "set-up: packages, build, and install system-wide into PostgreSQL $PG_MAJOR"
t_setup=$(date +%s)
if bash "$ROOT/test/setup.sh" >"$SETUP_LOG" 2>&1; then
    echo "set-up done in $(($(date +%s) - t_setup)) s: pg_claim installed into $("$PG_BIN/pg_config" --pkglibdir) and $("$PG_BIN/pg_config" --sharedir)/extension (log: $SETUP_LOG)"
else
    echo "set-up failed (log: $SETUP_LOG); its last lines:" >&2
    tail -n 25 "$SETUP_LOG" >&2
    exit 1
fi

# --- a throwaway cluster, owned by the unprivileged user ------------------------
DEMO="$(mktemp -d /tmp/pg_claim-demo.XXXXXX)"
PGDATA="$DEMO/data"
chown "$RUN_USER:" "$DEMO"
chmod 755 "$DEMO"
BG_PIDS=()

as_user() { runuser -u "$RUN_USER" -- env HOME="$DEMO" PATH="$PG_BIN:$PATH" "$@"; }
# psql on the demo cluster: unix socket in the demo directory, no ~/.psqlrc,
# stop at the first error unless a script says otherwise.
sql() { as_user psql -X -q -v ON_ERROR_STOP=1 -h "$DEMO" -p "$PORT" -d postgres "$@"; }

cleanup() {
    local rc=$?
    local pid
    for pid in "${BG_PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    if [[ -f "$PGDATA/postmaster.pid" ]]; then
        as_user pg_ctl -D "$PGDATA" stop -m fast -w >/dev/null 2>&1 || true
    fi
    if (( rc != 0 )) && [[ -f "$DEMO/server.log" ]]; then
        echo "--- server log (tail) ---"
        tail -n 30 "$DEMO/server.log"
    fi
    rm -rf "$DEMO"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

step "starting a throwaway cluster as $RUN_USER in $DEMO (port $PORT, unix socket only)"
claim_initdb demo "$PGDATA" "$PORT" "$DEMO" '' "max_connections = 50"
as_user pg_ctl -D "$PGDATA" -l "$DEMO/server.log" -w start >/dev/null
sql -c "SELECT version()" -t | sed 's/^ *//;/^$/d'

step "CREATE EXTENSION pg_claim; a queue 'demo' with a 5-second lease"
sql <<'SQL'
CREATE EXTENSION pg_claim;
SELECT claim.create_queue('demo', lease => '5 seconds') \g /dev/null

-- Bookkeeping for the demo only.
CREATE TABLE demo_enqueued (id bigint PRIMARY KEY, producer int NOT NULL);
-- One row per completed item; the primary key rejects an item completed twice.
CREATE TABLE demo_done (
    id       bigint PRIMARY KEY,
    producer int NOT NULL,
    worker   text NOT NULL,
    token    bigint NOT NULL,
    attempt  int NOT NULL
);

-- A worker: claim one item, "process" it, record it and complete it in one
-- transaction; commit; repeat. Stops once every item is done (or after 30 s
-- without work, so a lost item cannot hang the demo).
CREATE PROCEDURE demo_worker(p_worker text, p_total int)
LANGUAGE plpgsql AS $$
DECLARE
    it         claim.item;
    last_work  timestamptz := clock_timestamp();
BEGIN
    LOOP
        SELECT * INTO it FROM claim.claim_next('demo', worker => p_worker);
        IF FOUND THEN
            INSERT INTO demo_done (id, producer, worker, token, attempt)
            VALUES (it.id, (it.payload->>'producer')::int, p_worker, it.token, it.attempt);
            PERFORM claim.complete(it.token);
            last_work := clock_timestamp();
        ELSE
            EXIT WHEN (SELECT count(*) FROM demo_done) >= p_total
                   OR clock_timestamp() - last_work > interval '30 seconds';
            PERFORM pg_sleep(0.01);
        END IF;
        COMMIT;
    END LOOP;
END $$;
SQL
echo "queue 'demo' created"

step "$PRODUCERS producers enqueue $ITEMS items each while $WORKERS workers claim and complete them"
t0=$(date +%s%N)
for w in $(seq 1 "$WORKERS"); do
    sql -c "CALL demo_worker('worker-$w', $TOTAL)" >"$DEMO/worker-$w.log" 2>&1 &
    BG_PIDS+=($!)
done
for p in $(seq 1 "$PRODUCERS"); do
    # One transaction per item: enqueue, and note who enqueued it.
    sql -v producer="$p" -v items="$ITEMS" >"$DEMO/producer-$p.log" 2>&1 <<'SQL' &
SELECT format($f$WITH e AS (SELECT claim.enqueue('demo', jsonb_build_object('producer', %s, 'n', %s)) AS id)
                INSERT INTO demo_enqueued SELECT id, %s FROM e$f$, :producer, n, :producer)
FROM generate_series(1, :items) AS n
\gexec
SQL
    BG_PIDS+=($!)
done
failed=0
for pid in "${BG_PIDS[@]}"; do wait "$pid" || failed=1; done
BG_PIDS=()
t1=$(date +%s%N)
if (( failed )); then
    echo "a producer or worker failed:" >&2
    cat "$DEMO"/producer-*.log "$DEMO"/worker-*.log >&2
    exit 1
fi
ms=$(( (t1 - t0) / 1000000 ))
printf '%d items enqueued and completed in %d.%03d s\n' "$TOTAL" $((ms / 1000)) $((ms % 1000))
sql <<SQL
SELECT (SELECT count(*) FROM demo_enqueued) AS enqueued,
       count(*)                             AS completed,
       count(DISTINCT id)                   AS distinct_items_completed
FROM demo_done;
DO \$\$ BEGIN
    IF (SELECT count(*) FROM demo_done) <> $TOTAL THEN
        RAISE EXCEPTION 'expected $TOTAL completed items, got %', (SELECT count(*) FROM demo_done);
    END IF;
END \$\$;
SQL

step "a lease expires: claim with lease '1 second', stall, reclaim, refuse the stale token"
sql 2>&1 <<'SQL'
SELECT claim.enqueue('demo', '{"job": "slow"}') AS slow_id \gset
SELECT token AS old_token, lease_until AS old_lease_until
FROM claim.claim_next('demo', lease => '1 second', worker => 'sleepy') \gset
\echo 'worker "sleepy" claimed item' :slow_id 'with token' :old_token '- lease until' :old_lease_until
\echo 'it stalls for 1.5 s (server clock decides when the lease is over) ...'
SELECT pg_sleep(1.5) \gset
SELECT id AS reclaimed_id, token AS new_token, attempt AS new_attempt
FROM claim.claim_next('demo', worker => 'rescuer') \gset
\echo 'worker "rescuer" reclaimed item' :reclaimed_id 'with token' :new_token '- attempt' :new_attempt
SELECT (:reclaimed_id = :slow_id AND :new_token > :old_token) AS reclaim_ok \gset
\if :reclaim_ok
\else
    DO $$ BEGIN RAISE EXCEPTION 'the expired item was not reclaimed under a higher token'; END $$;
\endif

\echo 'worker "sleepy" wakes up and completes with its old token' :old_token
\set VERBOSITY verbose
\set ON_ERROR_STOP 0
SELECT claim.complete(:old_token);
\set ON_ERROR_STOP 1
\set VERBOSITY default
\echo '=> refused with SQLSTATE' :LAST_ERROR_SQLSTATE
SELECT (:'LAST_ERROR_SQLSTATE' = 'PC001') AS stale_refused \gset
\if :stale_refused
\else
    DO $$ BEGIN RAISE EXCEPTION 'the stale completion was not refused with PC001'; END $$;
\endif
\echo 'worker "rescuer" completes with the new token' :new_token
SELECT claim.complete(:new_token) AS completed;
SQL

step "summary"
sql <<'SQL'
\echo 'per producer:'
SELECT e.producer, count(*) AS enqueued, count(d.id) AS completed
FROM demo_enqueued e LEFT JOIN demo_done d USING (id)
GROUP BY e.producer ORDER BY e.producer;
\echo 'per worker:'
SELECT worker, count(*) AS completed, min(token) AS first_token, max(token) AS last_token,
       max(attempt) AS max_attempt
FROM demo_done GROUP BY worker ORDER BY worker;
\echo 'tokens:'
SELECT count(*) AS tokens_used, count(DISTINCT token) AS distinct_tokens,
       min(token) AS lowest, max(token) AS highest
FROM demo_done;
\echo 'claim.queue_stats:'
SELECT * FROM claim.queue_stats;
SQL

step "why the tokens start where they do: restart the server and claim again"
sql <<'SQL'
SELECT max(token) AS before_restart FROM demo_done \gset
SELECT last_value AS ceiling FROM claim.token_ceiling \gset
\echo 'highest token so far:' :before_restart '- durable ceiling (claim.token_ceiling):' :ceiling
SQL
as_user pg_ctl -D "$PGDATA" -l "$DEMO/server.log" -m fast -w restart >/dev/null
sql <<'SQL'
SELECT max(token) AS before_restart FROM demo_done \gset
SELECT claim.enqueue('demo', '{"job": "after the restart"}') \gset
SELECT token AS after_restart FROM claim.claim_next('demo') \gset
SELECT claim.complete(:after_restart) \gset
\echo 'first token after the restart:' :after_restart
\echo 'A token is never handed out twice, not even across a crash. The server keeps a durable'
\echo 'ceiling above every token it has handed out (claim.token_ceiling, raised 65536 tokens at a'
\echo 'time with one WAL flush), and the first grant after every server start moves the token'
\echo 'sequence up to that ceiling. So a new database starts with small tokens, and after each'
\echo 'restart or crash the tokens go on above the ceiling: they have gaps but always increase.'
SELECT (:after_restart > :before_restart) AS increasing \gset
\if :increasing
\else
    DO $$ BEGIN RAISE EXCEPTION 'the first token after the restart is not higher than every earlier one'; END $$;
\endif
SQL
echo "demo finished: every item completed exactly once, the expired lease was reclaimed under a higher token, the stale token was refused, tokens kept increasing across a restart."

if (( WITH_PYTHON )); then
    step "the Python worker example against the demo cluster"
    if [[ "$(dpkg-query -W -f='${Status}' python3-psycopg 2>/dev/null)" != "install ok installed" ]]; then
        DEBIAN_FRONTEND=noninteractive apt-get update -q >/dev/null
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends python3-psycopg </dev/null >/dev/null
    fi
    as_user /usr/bin/python3 "$ROOT/clients/python/example.py" \
        "postgresql:///postgres?host=$DEMO&port=$PORT&user=$RUN_USER"
fi
