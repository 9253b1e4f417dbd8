#!/usr/bin/env bash
# test/bench/steps.sh — durable steps (docs/steps.md): cost and wake latency.
#
#   bash test/bench/steps.sh      (as root or as an unprivileged user; the
#                                  extension must be installed: make install)
#
# Starts its own throwaway cluster and prints, in one run:
#   1. runs per second and WAL bytes per run, CLIENTS (2) pgbench clients for
#      SECS (10) seconds each, of a job of five steps that each write one row:
#        steps   one item; each step in its own transaction: claim.step, the
#                row, claim.step_done; then complete
#        chain   five items chained with `after`; each: the row and complete
#        plain   five independent items; each: the row and complete
#      (every run also enqueues its items);
#   2. wake latency (p50, p99 of WAKES (20) wakes): a run parked by
#      claim.sleep_for until a due time, delivered to a waiting claim_next
#      (due time -> claim returns); a run parked by claim.await_event, woken
#      by claim.emit_event (emit's COMMIT returns -> claim returns).
#
# Environment: CLIENTS, SECS, WAKES, PGCLAIM_USER (pgclaim, used when run as
# root), PORT (5579).
set -euo pipefail

. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
CLIENTS=${CLIENTS:-2}
SECS=${SECS:-10}
WAKES=${WAKES:-20}

scratch_cluster steps "${PORT:-5579}"   # ROOT, PG_BIN, PORT, WORK, as_user, psql_ (lib.sh)
psql_ <<'SQL'
CREATE EXTENSION pg_claim;
SELECT claim.create_queue('b_steps'), claim.create_queue('b_chain'), claim.create_queue('b_plain'),
       claim.create_queue('b_wake');
CREATE TABLE b_fx (item bigint, step int);
SQL

{
    echo "SELECT claim.enqueue('b_steps') AS run \\gset"
    echo "SELECT id, token FROM claim.claim_next('b_steps', wait => '1 s') \\gset"
    for i in 1 2 3 4 5; do
        echo "BEGIN;"
        echo "SELECT claim.step(:token, 's$i') IS NULL AS todo \\gset"
        echo "INSERT INTO b_fx VALUES (:id, $i);"
        echo "SELECT claim.step_done(:token, 's$i');"
        echo "COMMIT;"
    done
    echo "SELECT claim.complete(:token);"
} >"$WORK/steps.sql"
{
    echo "SELECT claim.enqueue('b_chain') AS a1 \\gset"
    for i in 2 3 4 5; do
        echo "SELECT claim.enqueue('b_chain', after => ARRAY[:a$((i - 1))]::bigint[]) AS a$i \\gset"
    done
    for i in 1 2 3 4 5; do
        echo "SELECT id, token FROM claim.claim_next('b_chain', wait => '1 s') \\gset"
        echo "BEGIN;"
        echo "INSERT INTO b_fx VALUES (:id, $i);"
        echo "SELECT claim.complete(:token);"
        echo "COMMIT;"
    done
} >"$WORK/chain.sql"
{
    for i in 1 2 3 4 5; do echo "SELECT claim.enqueue('b_plain');"; done
    for i in 1 2 3 4 5; do
        echo "SELECT id, token FROM claim.claim_next('b_plain', wait => '1 s') \\gset"
        echo "BEGIN;"
        echo "INSERT INTO b_fx VALUES (:id, $i);"
        echo "SELECT claim.complete(:token);"
        echo "COMMIT;"
    done
} >"$WORK/plain.sql"
chmod 644 "$WORK"/*.sql

echo "== five-step jobs: $CLIENTS clients, ${SECS} s each"
printf '%-6s %12s %14s\n' how runs/s WAL-bytes/run
for how in steps chain plain; do
    psql_ -c "CHECKPOINT" >/dev/null
    lsn0=$(psql_ -c "SELECT pg_current_wal_lsn()")
    out=$(as_user "$PG_BIN/pgbench" -n -h "$WORK" -p "$PORT" -c "$CLIENTS" -j "$CLIENTS" -T "$SECS" \
          -f "$WORK/$how.sql" postgres 2>&1)
    lsn1=$(psql_ -c "SELECT pg_current_wal_lsn()")
    runs=$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' <<<"$out")
    tps=$(sed -n 's/^tps = \([0-9.]*\).*/\1/p' <<<"$out" | head -1)
    wal=$(psql_ -c "SELECT round(pg_wal_lsn_diff('$lsn1', '$lsn0') / greatest($runs, 1))")
    printf '%-6s %12s %14s\n' "$how" "$tps" "$wal"
done

echo "== wake latency ($WAKES wakes each)"
bench_python as_user env CONN="host=$WORK port=$PORT dbname=postgres" WAKES="$WAKES" <<'PY'
import statistics, threading, time

n = int(os.environ["WAKES"])
a, b = conn(), conn()

sleep_lat, event_lat = [], []
for i in range(n):
    a.execute("SELECT claim.enqueue('b_wake')")
    tok = a.execute("SELECT token FROM claim.claim_next('b_wake')").fetchone()[0]
    due = a.execute("SELECT clock_timestamp() + interval '300 ms'").fetchone()[0]
    a.execute("SELECT claim.sleep(%s, %s)", (tok, due))
    row = a.execute("SELECT token, clock_timestamp() FROM claim.claim_next('b_wake', wait => '5 s')").fetchone()
    sleep_lat.append((row[1] - due).total_seconds() * 1000)
    a.execute("SELECT claim.complete(%s)", (row[0],))

    a.execute("SELECT claim.enqueue('b_wake')")
    tok = a.execute("SELECT token FROM claim.claim_next('b_wake')").fetchone()[0]
    a.execute("SELECT claim.await_event(%s, %s, '1 hour')", (tok, f"e{i}"))
    got = {}
    def waiter():
        got["row"] = b.execute("SELECT token, clock_timestamp() FROM claim.claim_next('b_wake', wait => '5 s')").fetchone()
    t = threading.Thread(target=waiter)
    t.start()
    time.sleep(0.05)
    a.execute("SELECT claim.emit_event(%s)", (f"e{i}",))
    emitted = a.execute("SELECT clock_timestamp()").fetchone()[0]
    t.join()
    event_lat.append(max(0.0, (got["row"][1] - emitted).total_seconds() * 1000))
    a.execute("SELECT claim.complete(%s)", (got["row"][0],))

for name, xs in (("sleep (due time -> claim)", sleep_lat), ("await_event (emit -> claim)", event_lat)):
    print(f"{name:30s} p50 {statistics.median(xs):7.1f} ms   p99 {pct(xs, 99):7.1f} ms")
PY
