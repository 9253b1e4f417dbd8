#!/usr/bin/env bash
# test/bench/coordination.sh — the coordination service (docs/coordination.md):
# what a session saves, and how fast elections and the watch answer.
#
#   bash test/bench/coordination.sh   (as root or as an unprivileged user; the
#                                      extension must be installed: make install)
#
# Starts its own throwaway cluster and prints, in one run:
#   1. renewing a worker's 100 claims, SECS (10) seconds each, CLIENTS (2)
#      workers: one claim.session_keepalive of a session that carries the 100
#      claims (claim.session_claim) against 100 claim.extend calls (one per
#      token, in one transaction): rounds per second, statements and WAL
#      bytes per round;
#   2. claim.elect + claim.leader round trips per second (CLIENTS clients,
#      each its own election, SECS seconds);
#   3. watch delivery latency (p50, p99 of WAKES (200)): a backend waiting in
#      claim.watch(prefix, after, wait) is woken by another's claim.count_down;
#      from the writer's COMMIT returning to the watcher's rows arriving;
#   4. lease acquire + release per second (CLIENTS clients, SECS seconds
#      each): claim.lease_acquire_shared of one name for all, against
#      claim.lease_acquire of a name per client, and the same with
#      pg_claim.watch_leases on (every grant and release in the watch log).
#
# Environment: CLIENTS, SECS, WAKES; the cluster as test/bench/lib.sh makes it.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
. "$HERE/lib.sh"
bench_defaults CLIENTS=2 SECS=10 WAKES=200
BENCH_MAX_CONNECTIONS=$((CLIENTS + 20)) bench_small coordination
sql <<SQL
SELECT claim.create_queue('b_renew', lease => '1 hour');
SELECT count(*) FROM claim.enqueue_many('b_renew',
    (SELECT array_agg('{}'::jsonb) FROM generate_series(1, 200 * $CLIENTS)));
-- per worker: a session carrying 100 claims, and 100 claims of its own
CREATE TABLE b_renew (worker int, session bigint, tokens bigint[]);
SQL
for w in $(seq 1 "$CLIENTS"); do
    sql <<SQL
INSERT INTO b_renew
SELECT $w, s, (SELECT array_agg(token) FROM claim.claim_next('b_renew', n => 100))
FROM claim.session_open('1 hour') s;
SELECT count(*) FROM claim.session_claim((SELECT session FROM b_renew WHERE worker = $w), 'b_renew', n => 100);
SQL
done
echo "SELECT session AS s FROM b_renew WHERE worker = :client_id + 1 \\gset" >"$WORK/keepalive.sql"
echo "SELECT claim.session_keepalive(:s);" >>"$WORK/keepalive.sql"
{
    echo "BEGIN;"
    for i in $(seq 1 100); do
        echo "SELECT claim.extend(tokens[$i]) FROM b_renew WHERE worker = :client_id + 1;"
    done
    echo "COMMIT;"
} >"$WORK/extend.sql"
echo "SELECT claim.elect('b_e' || :client_id, '10 s') IS NOT NULL AS led; SELECT epoch FROM claim.leader('b_e' || :client_id);" >"$WORK/elect.sql"
echo "SELECT claim.lease_release('b_l', claim.lease_acquire_shared('b_l', '10 s'));" >"$WORK/shared.sql"
echo "SELECT claim.lease_release('b_x' || :client_id, claim.lease_acquire('b_x' || :client_id, '10 s'));" >"$WORK/exclusive.sql"
{ echo "SET pg_claim.watch_leases = on;"; cat "$WORK/exclusive.sql"; } >"$WORK/watched.sql"
chmod 644 "$WORK"/*.sql

echo "== renewing 100 claims per worker: $CLIENTS workers, ${SECS} s each"
printf '%-10s %10s %16s %16s\n' how rounds/s statements/round WAL-bytes/round
for how in keepalive extend; do
    sql -c "CHECKPOINT" >/dev/null
    lsn0=$(sql -c "SELECT pg_current_wal_lsn()")
    out=$(pgbench_ -c "$CLIENTS" -j "$CLIENTS" -T "$SECS" \
          -f "$WORK/$how.sql" bench)
    lsn1=$(sql -c "SELECT pg_current_wal_lsn()")
    rounds=$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' <<<"$out")
    tps=$(sed -n 's/^tps = \([0-9.]*\).*/\1/p' <<<"$out" | head -1)
    wal=$(sql -c "SELECT round(pg_wal_lsn_diff('$lsn1', '$lsn0') / greatest(${rounds:-0}, 1))")
    stmts=$([[ $how == keepalive ]] && echo 1 || echo 100)
    printf '%-10s %10s %16s %16s\n' "$how" "$tps" "$stmts" "$wal"
done

echo "== elect + leader: $CLIENTS clients, ${SECS} s"
out=$(pgbench_ -c "$CLIENTS" -j "$CLIENTS" -T "$SECS" \
      -f "$WORK/elect.sql" bench)
echo "round trips/s: $(sed -n 's/^tps = \([0-9.]*\).*/\1/p' <<<"$out" | head -1)"

echo "== watch delivery latency ($WAKES wakes)"
bench_python env CONN="" WAKES="$WAKES" <<'PY'
import threading, time

n = int(os.environ["WAKES"])
w, c = conn(), conn()

lat = []
c.execute("SELECT claim.latch('b_w', 1000000)")
for i in range(n):
    rev = c.execute("SELECT claim.revision()").fetchone()[0]
    got = {}
    def watcher():
        rows = w.execute("SELECT revision FROM claim.watch('b_w', %s, wait => '5 s')", (rev,)).fetchall()
        got["t"] = time.monotonic()
        got["rows"] = len(rows)
    t = threading.Thread(target=watcher)
    t.start()
    time.sleep(0.02)   # the watcher is asleep in the server
    c.execute("SELECT claim.count_down('b_w')")
    sent = time.monotonic()
    t.join()
    if got.get("rows"):
        lat.append((got["t"] - sent) * 1000)
print(f"delivered {len(lat)} of {n}: p50 {pct(lat, 50):.2f} ms, p99 {pct(lat, 99):.2f} ms")
PY

echo "== lease acquire + release: $CLIENTS clients, ${SECS} s each"
for how in shared exclusive watched; do
    out=$(pgbench_ -c "$CLIENTS" -j "$CLIENTS" -T "$SECS" -f "$WORK/$how.sql" bench)
    printf '%-10s %10s cycles/s\n' "$how" "$(sed -n 's/^tps = \([0-9.]*\).*/\1/p' <<<"$out" | head -1)"
done
