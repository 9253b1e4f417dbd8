#!/usr/bin/env bash
# test/hardening/sqlsmith.sh — random SQL (Debian's sqlsmith) against a database with
# pg_claim and its objects in place; the server must never crash.
#
#   bash test/hardening/sqlsmith.sh [SECONDS]        (or SQLSMITH_SECONDS; default 60)
#
# Run as root from the checkout, with the extension installed (test/setup.sh).
# Installs sqlsmith if missing, starts a throwaway cluster as the OS user
# pgclaim (extension preloaded) and fills database "smith" with queues,
# ready/scheduled/claimed/dead items, groups, leases, once keys, guards and a
# table with row- and statement-level enqueue triggers. Then sqlsmith, as a
# non-superuser role that may use and administer every claim object, runs
# random queries (SELECTs calling every function it finds, and INSERT, UPDATE,
# DELETE on the tables, which fire the triggers) until the time is up. If the
# server crashes, sqlsmith is started again with another seed (the postmaster
# restarts itself) until the time is up.
#
# Checks, from the server log:
#   - no backend terminated by a signal or an exception, no PANIC;
#   - the server still answers at the end.
# Prints the number of queries sqlsmith sent and of errors the server logged
# (most random queries fail with an ordinary error: that is expected), the
# SQLSTATEs raised inside claim functions (XX000 counts as a failure: an
# internal error is never a documented outcome), and for each crash the query
# the server log names ("Failed process was running: ..."), saved under
# SQLSMITH_OUT (default /tmp/pg_claim-sqlsmith-out), which is kept.
#
# Phase 2 (SQLSMITH_FOCUS_SECONDS, default 30; 0 skips it): sqlsmith reaches
# claim's functions rarely (it picks among all the server's functions and never
# calls set-returning ones), so test/hardening/fuzz_claim.py then calls only claim's
# functions with hostile arguments drawn per type (see its header), checking for
# internal errors (XX000) and lost connections, and prints the SQLSTATEs per
# function.
#
# Environment: SQLSMITH_SECONDS, SQLSMITH_SEED (first seed; default: random),
# SQLSMITH_OUT, PGCLAIM_USER, CL_KEEP=1 (keep the cluster directory).
# Last line: "sqlsmith: N passed, N failed"; exit status 1 if anything failed.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
# shellcheck source=lib/cluster.sh
. "$ROOT/test/lib/cluster.sh"

harness sqlsmith
need_packages sqlsmith || exit 1
SECS="${1:-${SQLSMITH_SECONDS:-60}}"
FOCUS_SECS="${SQLSMITH_FOCUS_SECONDS:-30}"
SEED="${SQLSMITH_SEED:-$(( (RANDOM << 15) | RANDOM ))}"
OUTDIR="${SQLSMITH_OUT:-/tmp/pg_claim-sqlsmith-out}"
mkdir -p "$OUTDIR"
rm -f "$OUTDIR"/crash-*.sql "$OUTDIR"/sqlsmith-*.log

cluster_init sqlsmith <<'EOF'
max_connections = 40
log_min_error_statement = error
log_error_verbosity = verbose
# sqlsmith sets its own statement_timeout; keep waits and locks short anyway
lock_timeout = '2s'
restart_after_crash = on
log_line_prefix = '%m [%p] %e '
track_functions = all
EOF
cluster_start || { fail "server did not start"; exit 1; }

cluster_database smith || exit 1
psql_cl >/dev/null <<'SQL' || { fail "fixture"; exit 1; }
SELECT claim.create_queue('jobs', lease => '30 seconds');
SELECT claim.create_queue('orders_q', lease => '10 seconds', max_attempts => 2, backoff => '1 second');
SELECT claim.create_queue('bulk_q');
SELECT claim.enqueue('jobs', jsonb_build_object('n', n), group_key => CASE WHEN n % 3 = 0 THEN 'g' || (n % 7) END,
                     priority => n % 4, run_at => CASE WHEN n % 10 = 0 THEN clock_timestamp() + interval '1 hour' END,
                     dedup_key => CASE WHEN n % 11 = 0 THEN 'd' || n END)
FROM generate_series(1, 300) AS n;
SELECT claim.enqueue_many('jobs', array_agg(jsonb_build_object('b', n)), array_agg('bg' || (n % 5)))
FROM generate_series(1, 50) AS n;
SELECT count(*) FROM claim.claim_next('jobs', 20, lease => '1 hour', worker => 'fixture');
SELECT count(*) FROM claim.group_claim('jobs', 10, lease => '1 hour', worker => 'fixture-g');
-- dead items
SELECT claim.enqueue('orders_q', '{"dead": true}') FROM generate_series(1, 5);
SELECT claim.fail(token, 'boom', retry_in => '0') FROM claim.claim_next('orders_q', 5);
SELECT claim.fail(token, 'boom again', retry_in => '0') FROM claim.claim_next('orders_q', 5);
-- leases, semaphores, guards, once keys
SELECT claim.lease_acquire('mutex:' || n, '1 hour', holder => 'fixture') FROM generate_series(1, 10) AS n;
SELECT claim.lease_acquire('sem', '1 hour', permits => 3) FROM generate_series(1, 3);
SELECT claim.once('once:' || n) FROM generate_series(1, 10) AS n;
SELECT claim.guard_begin('guard:' || n, '1 hour') FROM generate_series(1, 5) AS n;
-- a table whose changes feed queues
CREATE TABLE public.orders (id int PRIMARY KEY, customer text, amount numeric, note text, at timestamptz DEFAULT now());
CREATE TRIGGER orders_row AFTER INSERT OR UPDATE OR DELETE ON public.orders
    FOR EACH ROW EXECUTE FUNCTION claim.enqueue_trigger('orders_q', 'customer');
CREATE TRIGGER orders_coalesce AFTER UPDATE ON public.orders
    FOR EACH ROW EXECUTE FUNCTION claim.enqueue_trigger('jobs', 'customer', 'coalesce');
CREATE TABLE public.events (id serial PRIMARY KEY, kind text, body jsonb);
CREATE TRIGGER events_stmt AFTER INSERT ON public.events REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION claim.enqueue_trigger('bulk_q', 'kind', 'batch=50');
CREATE TRIGGER events_trunc AFTER TRUNCATE ON public.events
    FOR EACH STATEMENT EXECUTE FUNCTION claim.enqueue_trigger('bulk_q');
INSERT INTO public.orders (id, customer, amount, note)
SELECT n, 'c' || (n % 9), n * 1.5, repeat('x', n % 20) FROM generate_series(1, 100) AS n;
UPDATE public.orders SET amount = amount + 1 WHERE id % 4 = 0;
INSERT INTO public.events (kind, body) SELECT 'k' || (n % 3), jsonb_build_object('n', n) FROM generate_series(1, 100) AS n;
-- the fuzzing role: not a superuser, may use and administer every claim object
CREATE ROLE smith LOGIN;
GRANT USAGE ON SCHEMA claim TO smith;
GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA claim TO smith;
GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA claim TO smith;
GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA claim TO smith;
GRANT ALL ON ALL TABLES IN SCHEMA public TO smith;
GRANT ALL ON ALL SEQUENCES IN SCHEMA public TO smith;
ALTER ROLE smith SET statement_timeout = '3s';
ALTER ROLE smith SET lock_timeout = '1s';
SQL
pass "fixture: queues, items, claims, dead items, leases, guards, triggers"
psql_cl -c "SELECT pg_stat_reset()" >/dev/null   # count only sqlsmith's calls below

TARGET="host=$CL_DIR port=$CL_PORT dbname=smith user=smith"
echo "sqlsmith for ${SECS}s against $TARGET (first seed $SEED)"
START=$SECONDS
runs=0
queries=0
seed=$SEED
while (( SECONDS - START < SECS )); do
    left=$(( SECS - (SECONDS - START) ))
    runs=$((runs + 1))
    log="$OUTDIR/sqlsmith-$runs.log"
    # sqlsmith runs until killed; --verbose prints progress and a summary of
    # the errors it saw. It stops by itself when the connection breaks.
    as_user timeout -s INT -k 10 "$left" nice sqlsmith --target="$TARGET" --seed="$seed" \
        --exclude-catalog --verbose >"$log" 2>&1
    # "queries: N" in the progress lines; take the last one
    q=$(grep -oE 'queries: [0-9]+' "$log" | tail -n 1 | grep -oE '[0-9]+')
    queries=$(( queries + ${q:-0} ))
    seed=$((seed + 1))
    if (( SECONDS - START < SECS )); then
        echo "sqlsmith run $runs ended early after $((SECONDS - START))s (see $log); waiting for the server"
        tail -n 5 "$log"
        for _ in $(seq 1 60); do psql_cl -tAc "SELECT 1" >/dev/null 2>&1 && break; sleep 1; done
    fi
done
echo "sqlsmith: $runs run(s), about $queries queries in $((SECONDS - START))s"

# --- phase 2: only claim's functions, hostile arguments -------------------------
if (( FOCUS_SECS > 0 )); then
    need_packages python3-psycopg || exit 1
    FUZZ_CONNINFO="host=$CL_DIR port=$CL_PORT dbname=smith user=smith" FUZZ_SECONDS="$FOCUS_SECS" \
        FUZZ_SEED="$SEED" nice /usr/bin/python3 -u "$ROOT/test/hardening/fuzz_claim.py" 2>&1 | tee "$OUTDIR/fuzz_claim.log"
    grep -q '^FAILED: \|^Traceback' "$OUTDIR/fuzz_claim.log" && fail "focused phase (see above)"
    PASSED=$((PASSED + $(grep -c '^ok: ' "$OUTDIR/fuzz_claim.log")))
fi

# --- the server log -------------------------------------------------------------
cp "$CL_LOG" "$OUTDIR/server.log" 2>/dev/null
errors=$(grep -c ' ERROR: ' "$CL_LOG")
echo "server log: $errors ERROR lines (random queries; expected)"
echo "most frequent errors:"
grep -oE ' ERROR: .*' "$CL_LOG" | sed -E 's/[0-9]+/N/g; s/"[^"]*"/"…"/g' | sort | uniq -c | sort -rn | head -n 15

crashes=$(grep -cE 'terminated by signal|terminated by exception|was terminated|PANIC:' "$CL_LOG")
if (( crashes == 0 )); then
    pass "no backend terminated by a signal or exception, no PANIC"
else
    fail "$crashes crash line(s) in the server log"
    n=0
    # save the statement of every crashed process
    while IFS= read -r line; do
        n=$((n + 1))
        echo "$line"
        printf -- '-- %s\n' "$line" >"$OUTDIR/crash-$n.sql"
    done < <(grep -E 'terminated by signal|terminated by exception|PANIC:' "$CL_LOG")
    grep -A 1 -E 'terminated by signal|terminated by exception' "$CL_LOG" |
        grep 'Failed process was running:' | sed 's/.*Failed process was running: //' |
        { i=0; while IFS= read -r q; do i=$((i + 1)); printf '%s;\n' "$q" >>"$OUTDIR/crash-$i.sql"; echo "query: $q"; done; }
    echo "crash queries saved in $OUTDIR/crash-*.sql"
fi

echo "errors by SQLSTATE:"
grep -oE '\] [0-9A-Z]{5} ERROR: ' "$CL_LOG" | awk '{print $2}' | sort | uniq -c | sort -rn | head -n 20
# An internal error (XX000) is never a documented outcome of a claim function.
# PostgreSQL's own code raises some on sqlsmith's random expressions (also in
# statements that read claim's tables); those are listed, not counted. One
# counts when it was raised in pg_claim's code (LOCATION in a .cpp file: the
# extension is the server's only C++) or inside a claim function (CONTEXT).
awk '/\] XX000 ERROR: / { if (blk != "") print blk "\n"; blk = $0; inx = 1; next }
     inx && /\] XX000 (DETAIL|HINT|CONTEXT|LOCATION|STATEMENT): / { blk = blk "\n" $0; next }
     inx && /^\t/ { next }
     { if (inx) { print blk "\n"; blk = "" } inx = 0 }
     END { if (blk != "") print blk "\n" }' "$CL_LOG" >"$OUTDIR/xx000-all.txt"
awk 'BEGIN { RS = "\n\n" } /LOCATION: [^\n]*\.cpp:|CONTEXT: [^\n]*claim\./' "$OUTDIR/xx000-all.txt" >"$OUTDIR/xx000.txt"
internal=$(grep -c '\] XX000 ERROR: ' "$OUTDIR/xx000.txt")
others=$(grep -c '\] XX000 ERROR: ' "$OUTDIR/xx000-all.txt")
if (( others > internal )); then
    echo "XX000 raised by PostgreSQL's own code on random expressions (not counted):"
    grep -A 3 '\] XX000 ERROR: ' "$OUTDIR/xx000-all.txt" | grep -E 'ERROR: |LOCATION: ' | sed -E 's/^.*\] XX000 //' |
        paste - - | sort | uniq -c | sort -rn | head -n 10
fi
if (( internal == 0 )); then
    pass "no XX000 (internal error) raised in pg_claim's code or inside a claim function"
else
    fail "$internal XX000 errors raised in pg_claim's code or inside a claim function (see $OUTDIR/xx000.txt)"
    head -n 20 "$OUTDIR/xx000.txt"
fi

echo "calls of claim functions during the run (pg_stat_user_functions):"
psql_cl -c "SELECT funcname, sum(calls) AS calls FROM pg_stat_user_functions
            WHERE schemaname = 'claim' GROUP BY funcname ORDER BY calls DESC" 2>/dev/null
if psql_cl -tAc "SELECT count(*) FROM claim.queue_stats" >/dev/null 2>&1; then
    pass "server answers after the run"
else
    fail "server does not answer after the run"
fi
exit 0
