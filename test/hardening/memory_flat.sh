#!/usr/bin/env bash
# test/hardening/memory_flat.sh — memory stays flat: many calls of each hot function in
# one backend must not grow that backend's memory contexts.
#
#   bash test/hardening/memory_flat.sh [CALLS]      (or MEMFLAT_CALLS; default 100000)
#
# Run as root from the checkout, with the extension installed (test/setup.sh).
# Starts a throwaway cluster as the OS user pgclaim (extension preloaded). For
# each case, one backend runs a PL/pgSQL procedure that
#   1. calls the function WARM times (MEMFLAT_WARM, default 2000: caches,
#      prepared plans and relcache entries are built here),
#   2. sums total_bytes of pg_backend_memory_contexts,
#   3. calls the function CALLS more times, committing every 1000 calls (a
#      claim keeps an item lock until its transaction ends, as the README says),
#   4. sums total_bytes again, in the same backend.
# The growth must stay below MEMFLAT_LIMIT bytes (default 1048576 = 1 MB).
#
# Cases: a baseline loop that calls nothing; a plain INSERT into a table of
# our own (the control for committing transactions: PostgreSQL itself keeps
# about 24 bytes per committed writing transaction in a procedure's "SPI
# Proc" context, some 24 kB per 1M calls); enqueue; claim_next (claims pile
# up); complete (of the tokens claimed by the claim_next case); claim_next with
# a 1 ms wait that times out on an empty queue (MEMFLAT_WAIT_CALLS, default
# 3000: each call sleeps); lease_acquire + lease_release on 100 names; once on
# fresh keys; an INSERT into a table with a row-level enqueue_trigger;
# group_claim + complete of a group.
#
# The background worker: with pg_claim.worker_naptime at 10 ms and a session
# that keeps giving it work (items that come due, claims that expire, items
# that die), its memory contexts (pg_log_backend_memory_contexts, the "Grand
# total" it logs) after 200 warm-up rounds and after MEMFLAT_WORKER_ROUNDS
# more (default 500, 5 to 25 s; the full run takes 10000) must not
# differ by 1 MB or more.
#
# MEMFLAT_CASES="enqueue lease" runs only those cases (and skips the final
# check of the work done). Each growth includes the cost
# of measuring (plans of the statements that read the view: the baseline
# case shows it, about 50 kB); the net growth printed is the case's growth
# minus the baseline's.
#
# The full run is 1M calls: MEMFLAT_CALLS=1000000 (about 10 minutes on
# 2 cores). The default (100k) runs in well under a minute there and is what
# CI runs.
# Last line: "memory_flat: N passed, N failed"; exit status 1 if anything failed.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
# shellcheck source=lib/cluster.sh
. "$ROOT/test/lib/cluster.sh"

HARNESS_LOG_TAIL=1
harness memory_flat
CALLS="${1:-${MEMFLAT_CALLS:-100000}}"
WAIT_CALLS="${MEMFLAT_WAIT_CALLS:-3000}"
WARM="${MEMFLAT_WARM:-2000}"
WORKER_ROUNDS="${MEMFLAT_WORKER_ROUNDS:-500}"
LIMIT="${MEMFLAT_LIMIT:-1048576}"

cluster_init memflat <<'EOF'
max_locks_per_transaction = 256
autovacuum = off
shared_buffers = 256MB
EOF
cluster_start || { fail "server did not start"; exit 1; }

psql_cl >/dev/null <<'SQL' || { fail "fixture"; exit 1; }
CREATE EXTENSION pg_claim;
SELECT claim.create_queue('m_enq');
SELECT claim.create_queue('m_claim', lease => '1 hour');
SELECT claim.create_queue('m_wait');
SELECT claim.create_queue('m_trig');
SELECT claim.create_queue('m_group', lease => '1 hour');
CREATE TABLE m_rows (id bigint PRIMARY KEY, grp text, note text);
CREATE TRIGGER m_rows_enqueue AFTER INSERT ON m_rows
    FOR EACH ROW EXECUTE FUNCTION claim.enqueue_trigger('m_trig', 'grp');
CREATE TABLE m_plain (id bigint);
CREATE TABLE m_tokens (n int PRIMARY KEY, token bigint NOT NULL);
CREATE TABLE m_results (label text PRIMARY KEY, calls int, before_bytes bigint, after_bytes bigint,
                        grown bigint, seconds numeric, top_growth text);

-- sum of the backend's memory contexts, and per context name
CREATE FUNCTION m_mem(OUT total bigint, OUT per_name jsonb) LANGUAGE sql AS $$
    SELECT sum(b)::bigint, jsonb_object_agg(name, b)
    FROM (SELECT name, sum(total_bytes) AS b FROM pg_backend_memory_contexts GROUP BY name) s
$$;

-- the context names that grew most between two m_mem() snapshots
CREATE FUNCTION m_growth(a jsonb, b jsonb) RETURNS text LANGUAGE sql AS $$
    SELECT coalesce(string_agg(format('%s %s', k, d), ', ' ORDER BY d DESC), '')
    FROM (SELECT k, (b->>k)::bigint - coalesce((a->>k)::bigint, 0) AS d
          FROM jsonb_object_keys(b) AS k) s
    WHERE d <> 0 AND k IN (SELECT k FROM (SELECT k, (b->>k)::bigint - coalesce((a->>k)::bigint, 0) AS d2
                                           FROM jsonb_object_keys(b) AS k) t ORDER BY abs(d2) DESC LIMIT 5)
$$;
SQL

# define_case LABEL STATEMENTS: a procedure mf_LABEL(warm, calls) whose loop body
# is STATEMENTS (PL/pgSQL, may use i int and t bigint).
define_case() {
    local label=$1 body=$2
    psql_cl >/dev/null <<SQL
CREATE PROCEDURE mf_$label(warm int, calls int) LANGUAGE plpgsql AS \$proc\$
DECLARE
    i int;
    t bigint;
    m0 bigint; m1 bigint; j0 jsonb; j1 jsonb;
    t0 timestamptz;
BEGIN
    FOR i IN 1..warm LOOP
        $body
        IF i % 1000 = 0 THEN COMMIT; END IF;
    END LOOP;
    COMMIT;
    SELECT total, per_name INTO m0, j0 FROM m_mem();
    t0 := clock_timestamp();
    FOR i IN warm + 1..warm + calls LOOP
        $body
        IF i % 1000 = 0 THEN COMMIT; END IF;
    END LOOP;
    COMMIT;
    SELECT total, per_name INTO m1, j1 FROM m_mem();
    INSERT INTO m_results VALUES ('$label', calls, m0, m1, m1 - m0,
        round(extract(epoch FROM clock_timestamp() - t0)::numeric, 1), m_growth(j0, j1));
    COMMIT;
END
\$proc\$;
SQL
}

# run_case LABEL CALLS [SETUP-SQL]: SETUP in its own session, then the case in a fresh backend
run_case() {
    local label=$1 calls=$2 setup=${3:-}
    if [[ -n "${MEMFLAT_CASES:-}" && " $MEMFLAT_CASES " != *" $label "* ]]; then
        return
    fi
    if [[ -n "$setup" ]]; then
        psql_cl -c "$setup" >/dev/null || { fail "$label: setup failed"; return; }
    fi
    if ! psql_cl -c "CALL mf_$label($WARM, $calls)" >/dev/null; then
        fail "$label: the loop failed"; return
    fi
    local row
    row=$(psql_cl -tA -F ' | ' -c "SELECT calls, grown, seconds, top_growth FROM m_results WHERE label = '$label'")
    local grown
    grown=$(cut -d'|' -f2 <<<"$row" | tr -d ' ')
    local base net=""
    base=$(psql_cl -tA -c "SELECT grown FROM m_results WHERE label = 'baseline'")
    [[ -n "$base" && "$label" != baseline ]] && net=", net of the baseline $((grown - base))"
    if [[ -n "$grown" ]] && (( grown < LIMIT )); then
        pass "$label: $calls calls, memory contexts grew by $grown bytes$net ($(cut -d'|' -f3 <<<"$row" | tr -d ' ') s; by context: $(cut -d'|' -f4- <<<"$row" | sed 's/^ *//'))"
    else
        fail "$label: $calls calls, memory contexts grew by ${grown:-?} bytes (limit $LIMIT): $(cut -d'|' -f4- <<<"$row")"
    fi
}

define_case baseline "PERFORM i;"
define_case plain_insert "INSERT INTO m_plain VALUES (i);"
define_case enqueue "PERFORM claim.enqueue('m_enq', '{\"a\": 1}');"
define_case claim_next "PERFORM claim.claim_next('m_claim');"
define_case complete "PERFORM claim.complete((SELECT token FROM m_tokens WHERE n = i));"
define_case claim_wait "PERFORM claim.claim_next('m_wait', wait => '1 millisecond');"
define_case lease "t := claim.lease_acquire('m:' || (i % 100), '1 minute'); PERFORM claim.lease_release('m:' || (i % 100), t);"
define_case once "PERFORM claim.once('m:' || i);"
define_case trigger "INSERT INTO m_rows VALUES (i, 'g' || (i % 10), 'row');"
define_case group_claim "SELECT token INTO t FROM claim.group_claim('m_group', 10) LIMIT 1; PERFORM claim.complete(t);"

TOTAL=$((WARM + CALLS))
T0=$SECONDS
echo "memory flat: $CALLS calls per case after $WARM warm-up calls ($WAIT_CALLS for the waiting claim); limit $LIMIT bytes"
run_case baseline "$CALLS"
run_case plain_insert "$CALLS"
run_case enqueue "$CALLS"
run_case claim_next "$CALLS" \
    "SELECT claim.enqueue_many('m_claim', array_agg('{}'::jsonb)) FROM generate_series(1, $TOTAL)"
run_case complete "$CALLS" \
    "INSERT INTO m_tokens SELECT row_number() OVER (ORDER BY token), token FROM claim.claims c JOIN claim.queues q USING (queue_id) WHERE q.name = 'm_claim'"
run_case claim_wait "$WAIT_CALLS"
run_case lease "$CALLS"
run_case once "$CALLS"
run_case trigger "$CALLS"
run_case group_claim "$((CALLS / 10))" \
    "SELECT claim.enqueue_many('m_group', array_agg('{}'::jsonb), array_agg('g' || (n / 10))) FROM generate_series(0, $((TOTAL + 10 * WARM)) ) AS n"

# --- the background worker over many rounds ------------------------------------
# Its memory is read with pg_log_backend_memory_contexts(pid), which makes the
# worker write its contexts to the log ("level: N; name: T total in ...").
# The worker answers at its next interrupt check, which may fall inside a
# round: the subtrees of TopTransactionContext and PortalContext (what a
# round's transaction and queries hold while they run) are left out, so what
# is compared is the memory that outlives a round.
#
# reports PID: for each report of PID in the log, "K NAME BYTES" per context
# name (K = the report's number) and "K TOTAL BYTES"
reports() {
    awk -v pid="[$1]" '
        index($0, pid " LOG:  level: ") {
            line = $0; sub(/.*LOG:  level: /, "", line)
            level = line + 0; sub(/^[0-9]+; /, "", line)
            name = line; sub(/: [0-9]+ total in .*/, "", name)
            if (skip && level > skip_level) next
            skip = 0
            if (name == "TopTransactionContext" || name == "PortalContext") { skip = 1; skip_level = level; next }
            if (match(line, /: [0-9]+ total in/)) {
                bytes = substr(line, RSTART + 2, RLENGTH - 11) + 0
                sum[name] += bytes; total += bytes
            } else if (match(line, /containing [0-9]+ total in/)) {   # "N more child contexts ..."
                bytes = substr(line, RSTART + 11, RLENGTH - 20) + 0
                sum["(more child contexts)"] += bytes; total += bytes
            }
        }
        index($0, pid " LOG:  Grand total") {
            k++
            for (n in sum) printf "%d %s\t%d\n", k, n, sum[n]
            printf "%d TOTAL\t%d\n", k, total
            delete sum; total = 0; skip = 0
        }' "$CL_LOG"
}
log_worker_memory() {  # log_worker_memory PID: ask, wait for a new report; prints its total
    local pid=$1 before after
    before=$(grep -cE "\\[$pid\\] LOG:  Grand total" "$CL_LOG")
    psql_cl -tAc "SELECT pg_log_backend_memory_contexts($pid)" >/dev/null
    for _ in $(seq 1 100); do
        after=$(grep -cE "\\[$pid\\] LOG:  Grand total" "$CL_LOG")
        if (( after > before )); then
            reports "$pid" | awk -F'\t' -v k="$after" '$1 == k " TOTAL" { print $2 }'
            return 0
        fi
        sleep 0.1
    done
    return 1
}
# context_growth PID: the context names whose totals differ most between the
# last two reports of PID
context_growth() {
    reports "$1" | awk -F'\t' '
        { split($1, a, " "); k = a[1]; n = substr($1, length(k) + 2); v[k, n] = $2; names[n] = 1; if (k > last) last = k }
        END { for (n in names) if (n != "TOTAL") { d = v[last, n] - v[last - 1, n]; if (d != 0) printf "%d\t%s\n", d, n } }' |
        sort -rn | head -n 5 | awk -F'\t' '{ printf "%s%s %d", (NR > 1 ? ", " : ""), $2, $1 }'
}
worker_rounds() { psql_cl -tAc "SELECT rounds FROM claim.worker_status() WHERE pid = $1"; }
worker_case() {
    local rounds=$1 pid r0 m0 m1 feeder
    if [[ -n "${MEMFLAT_CASES:-}" && " $MEMFLAT_CASES " != *" worker "* ]]; then return; fi
    # the cases above left a million dead claim rows (autovacuum is off here):
    # the worker's rounds read claim.claims, so clean up first
    psql_cl -c "VACUUM claim.claims" -c "VACUUM claim.lease_holders" -c "VACUUM claim.lease_released" >/dev/null
    psql_cl >/dev/null <<'SQL'
ALTER SYSTEM SET pg_claim.worker_naptime = '10ms';
SELECT pg_reload_conf();
SELECT claim.create_queue('m_worker', lease => '15 milliseconds', max_attempts => 3);
-- work for every round: items that come due, claims that expire, items that die
CREATE PROCEDURE m_feed() LANGUAGE plpgsql AS $$
BEGIN
    LOOP
        PERFORM claim.enqueue('m_worker', '{}', run_at => clock_timestamp() + interval '15 ms');
        PERFORM claim.claim_next('m_worker', 5);
        COMMIT;
        PERFORM pg_sleep(0.01);
    END LOOP;
END $$;
SQL
    psql_cl -c "SET application_name = 'm_feed'" -c "CALL m_feed()" >/dev/null 2>&1 &
    feeder=$!
    pid=$(psql_cl -tAc "SELECT pid FROM claim.worker_status() w JOIN pg_database d ON d.oid = w.datid
                        WHERE d.datname = current_database() AND pid IS NOT NULL")
    if [[ -z "$pid" ]]; then
        fail "worker: no pg_claim worker serves the database"
    else
        r0=$(worker_rounds "$pid")
        # warm-up rounds; a round takes about 10 ms: give up at 20 times that
        local deadline=$((SECONDS + 10 + rounds / 5))
        while (( $(worker_rounds "$pid") < r0 + 200 && SECONDS < deadline )); do sleep 0.5; done
        if (( $(worker_rounds "$pid") < r0 + 200 )); then
            fail "worker: fewer than 200 rounds in $((SECONDS - deadline + 10 + rounds / 5))s"
        elif ! m0=$(log_worker_memory "$pid"); then
            fail "worker: no memory context report from pid $pid"
        else
            r0=$(worker_rounds "$pid")
            local t0=$SECONDS
            deadline=$((SECONDS + 10 + rounds / 5))
            while (( $(worker_rounds "$pid") < r0 + rounds && SECONDS < deadline )); do sleep 1; done
            local done_rounds=$(( $(worker_rounds "$pid") - r0 ))
            (( done_rounds < rounds )) && fail "worker: only $done_rounds of $rounds rounds in $((SECONDS - t0))s"
            rounds=$done_rounds
            m1=$(log_worker_memory "$pid")
            local stats
            stats=$(psql_cl -tA -F ' ' -c "SELECT rounds, promoted, expired, killed FROM claim.worker_status() WHERE pid = $pid")
            if [[ -n "$m1" ]] && (( m1 - m0 < LIMIT )); then
                pass "worker: $((rounds)) rounds in $((SECONDS - t0))s (rounds promoted expired killed: $stats), memory contexts grew by $((m1 - m0)) bytes ($m0 -> $m1; by context: $(context_growth "$pid"))"
            else
                fail "worker: $rounds rounds, memory contexts grew by $(( ${m1:-0} - m0 )) bytes ($m0 -> ${m1:-?}; by context: $(context_growth "$pid"))"
            fi
        fi
    fi
    psql_cl -tAc "SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE application_name = 'm_feed'" >/dev/null
    wait "$feeder" 2>/dev/null
    psql_cl -c "ALTER SYSTEM RESET pg_claim.worker_naptime" -c "SELECT pg_reload_conf()" >/dev/null
}
worker_case "$WORKER_ROUNDS"

echo "all cases in $((SECONDS - T0))s"
# the loops did their work
work=$(psql_cl -tA -c "
    SELECT (SELECT count(*) FROM claim.items i JOIN claim.queues q USING (queue_id) WHERE q.name = 'm_enq') = $TOTAL
       AND (SELECT count(*) FROM claim.items i JOIN claim.queues q USING (queue_id) WHERE q.name = 'm_claim') = 0
       AND (SELECT count(*) FROM claim.once_keys WHERE key LIKE 'm:%') = $TOTAL
       AND (SELECT count(*) FROM claim.items i JOIN claim.queues q USING (queue_id) WHERE q.name = 'm_trig') = $TOTAL
       AND (SELECT count(*) FROM claim.leases) = 0")
if [[ -n "${MEMFLAT_CASES:-}" ]]; then
    echo "(MEMFLAT_CASES set: the check of the work done is skipped)"
elif [[ "$work" == t ]]; then
    pass "the loops did their work: $TOTAL items enqueued, claimed and completed, once keys, trigger items; no lease left"
else
    fail "the loops did not do all their work"
fi
psql_cl -c "SELECT label, calls, before_bytes, after_bytes, grown, seconds FROM m_results ORDER BY label"
exit 0
