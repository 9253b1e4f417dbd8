#!/usr/bin/env bash
# test/bench/maintenance.sh — what the direct path's honouring of a table's
# rules costs (docs/internals.md), and what a pg_repack of claim.items costs
# the workers while it runs (docs/operations.md, "Maintenance under load").
#
#   bash test/bench/maintenance.sh   (as root or as an unprivileged user; the
#                                     extension must be installed: make install;
#                                     part 2 needs pg_repack for the major)
#
# Starts its own throwaway cluster and prints, in one run:
#   1. claim + complete and enqueue, CLIENTS (8) pgbench clients, windows of
#      SECS (8) seconds alternating plain, trigger, trigger, plain: "trigger"
#      is a row trigger on claim.items that does nothing (what pg_repack's
#      log trigger, a user's audit trigger or a foreign key's cascade put on
#      it), which sends the calls' writes through SQL; the ratio is the cost
#      of the honouring path;
#   2. claim + complete per second (pgbench -P 1) in the seconds before a
#      `pg_repack -t claim.items` of a 3 x BACKLOG (600000) item table and in
#      the seconds it runs.
#
# Environment: CLIENTS, SECS, BACKLOG; the cluster as test/bench/lib.sh makes it.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
. "$HERE/lib.sh"
bench_defaults CLIENTS=8 SECS=8 BACKLOG=200000
bench_small maintenance
sql <<'SQL'
SELECT claim.create_queue('b_m', lease => '1 minute');
CREATE FUNCTION b_noop() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END $$;
SQL
fill() {
    sql -c "SELECT count(*) FROM claim.enqueue_many('b_m', (SELECT array_agg('{}'::jsonb) FROM generate_series(1, $1)))" >/dev/null
}
echo "SELECT claim.complete(token) FROM claim.claim_next('b_m');" >"$WORK/work.sql"
echo "SELECT claim.enqueue('b_m', '{}');" >"$WORK/enqueue.sql"
chmod 644 "$WORK"/*.sql
bench() {  # script -> tps
    pgbench_ -c "$CLIENTS" -j 2 -T "$SECS" \
        -f "$WORK/$1.sql" bench | sed -n 's/^tps = \([0-9.]*\).*/\1/p' | head -1
}
trigger() {
    sql -c "SET client_min_messages = warning; DROP TRIGGER IF EXISTS b_t ON claim.items"
    [[ $1 == on ]] && sql -c "CREATE TRIGGER b_t AFTER INSERT OR UPDATE OR DELETE ON claim.items FOR EACH ROW EXECUTE FUNCTION b_noop()"
    return 0
}

echo "== the honouring path: $CLIENTS clients, ${SECS} s windows (plain, trigger, trigger, plain)"
declare -A sum
for w in plain trigger trigger plain; do
    [[ $w == trigger ]] && trigger on || trigger off
    sql -c "TRUNCATE claim.items, claim.claims; CHECKPOINT" >/dev/null
    fill "$BACKLOG"
    c=$(bench work)
    e=$(bench enqueue)
    echo "window $w: claim+complete $c/s, enqueue $e/s"
    sum[$w-c]=$(awk -v a="${sum[$w-c]:-0}" -v b="$c" 'BEGIN{print a+b}')
    sum[$w-e]=$(awk -v a="${sum[$w-e]:-0}" -v b="$e" 'BEGIN{print a+b}')
done
trigger off
awk -v pc="${sum[plain-c]}" -v tc="${sum[trigger-c]}" -v pe="${sum[plain-e]}" -v te="${sum[trigger-e]}" 'BEGIN{
    printf "claim+complete: trigger/plain %.2f (%.0f against %.0f jobs/s)\n", tc/pc, tc/2, pc/2;
    printf "enqueue:        trigger/plain %.2f (%.0f against %.0f items/s)\n", te/pe, te/2, pe/2 }'

REPACK=""
for r in "$PGBIN/pg_repack" "/usr/lib/postgresql/$PG_MAJOR/bin/pg_repack" "$(command -v pg_repack || true)"; do
    [[ -n $r && -x $r ]] && { REPACK=$r; break; }
done
if [[ -z $REPACK ]] || ! sql -c "CREATE EXTENSION pg_repack" >/dev/null 2>&1; then
    echo "== pg_repack: not installed for PostgreSQL $PG_MAJOR, part 2 skipped"
    exit 0
fi
echo "== claim + complete per second before and during pg_repack -t claim.items ($((BACKLOG * 3)) items)"
sql -c "TRUNCATE claim.items, claim.claims; CHECKPOINT" >/dev/null
fill $((BACKLOG * 3))
pgbench_ -c "$CLIENTS" -j 2 -T 30 -P 1 \
    -f "$WORK/work.sql" bench >"$WORK/progress.txt" 2>&1 &
pgb=$!
sleep 8
start=$(date +%s.%N)
"$REPACK" --no-order -t claim.items >"$WORK/repack.txt" 2>&1 || true
sed 's/^/pg_repack: /' "$WORK/repack.txt"
end=$(date +%s.%N)
wait $pgb || true
# progress lines: "progress: 5.0 s, 1234.5 tps, ..." (each the second before it); the repack
# ran from about 8 s for (end - start) s: the seconds it touched
awk -v d="$(awk -v a="$start" -v b="$end" 'BEGIN{print b-a}')" '
    /^progress:/ { t=$2+0; v=$4+0;
        if (t >= 2 && t <= 8) { b+=v; nb++ }
        if (t > 8 && t < 9 + d) { r+=v; nr++ } }
    END { printf "repack took %.1f s; before: %.0f jobs/s, during: %.0f jobs/s (%.2f)\n",
                 d, b/nb, (nr ? r/nr : 0), (nr ? (r/nr)/(b/nb) : 0) }' "$WORK/progress.txt"
