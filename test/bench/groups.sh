#!/usr/bin/env bash
# pg_claim bench for group claims and trigger enqueue: each figure
# beside its baseline, measured in the same run, with the ratio and target.
#
#   bash test/bench/groups.sh            15 s windows (~4 min)
#   QUICK=1 bash test/bench/groups.sh    5 s windows (~2 min)
#
# 1. group_claim + complete(token) over 1M items spread across 100k groups
#    (group = id mod 100000, so every group has 10 items interleaved with all
#    others) vs claim_next + complete over 1M items without group keys, both
#    with 16 clients; items/s from the items consumed in the window.
#    Baselines: claim_next(n => 10) (the same number of items per call as a
#    group claim here) and claim_next(n => 1). Target: >= 0.5x.
# 2. a 100k-row INSERT ... SELECT into a table with the statement-level
#    trigger (REFERENCING NEW TABLE, group column) vs the same insert into the
#    same table without a trigger; best of 3. Target: >= 0.5x. The tables are
#    orders-like: (id bigint PRIMARY KEY, customer int, note text, amount
#    numeric); every row becomes one item (one heap row and three index
#    entries in claim.items, plus its jsonb payload). Also with the 'batch'
#    option: one item per customer (5000) carrying its rows. And a reference
#    without a target: the same statement with a plpgsql trigger whose SQL
#    INSERT writes, per row, an item-shaped row without payload into a copy
#    of claim.items with its indexes (the entries that make an item
#    claimable when the producer commits).
# 3. single-row INSERT transactions (16 clients) into a table with the
#    row-level trigger vs without, two windows each, alternated; the mean
#    of each side. Target: >= 0.7x.
#
# Environment: BENCH_DURATION (seconds per window), BENCH_GROUPS_OUT (output
# directory, default test/bench/out/groups), BENCH_KEEP=1 keeps the cluster.
# As root the server runs as the OS user pgclaim; the cluster lives in a temp
# directory with its own unix socket and is removed at exit. pg_claim must be
# installed (make && make install).
set -Eeuo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
OUT=${BENCH_GROUPS_OUT:-$HERE/out/groups}
if [[ ${QUICK:-0} == 1 ]]; then DUR=${BENCH_DURATION:-5}; else DUR=${BENCH_DURATION:-15}; fi
CLIENTS=16
THREADS=4
ITEMS=1000000
NGROUPS=100000
BULK_ROWS=100000
PORT=5497
# shellcheck source-path=SCRIPTDIR
source "$HERE/lib.sh"   # log, die, and bench_init: pg_config, the binaries, the OS user
bench_init groups-bench
ext_installed || die "pg_claim is not installed (make && make install)"

WORK=$(mktemp -d /tmp/pg_claim-groups-bench.XXXXXX)
chmod 755 "$WORK"
[[ $(id -u) == 0 ]] && chown "$RUN_USER:" "$WORK"
mkdir -p "$OUT/logs"
DATA=$WORK/data
SOCK=$WORK
S=$WORK/scripts

cleanup() {
    "${AS[@]}" "$PGBIN/pg_ctl" -D "$DATA" stop -m fast >/dev/null 2>&1 || true
    cp "$WORK/server.log" "$OUT/logs/server.log" 2>/dev/null || true
    if [[ ${BENCH_KEEP:-0} == 1 ]]; then log "cluster kept in $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT

log "initdb in $WORK"
"${AS[@]}" "$PGBIN/initdb" -D "$DATA" -A trust -U "$DBUSER" >"$OUT/logs/initdb.log" 2>&1
cat >>"$DATA/postgresql.conf" <<EOF
port = $PORT
listen_addresses = ''
unix_socket_directories = '$SOCK'
shared_preload_libraries = 'pg_claim'
shared_buffers = 1GB
max_connections = 100
max_locks_per_transaction = 256
synchronous_commit = on
checkpoint_timeout = 30min
max_wal_size = 8GB
autovacuum_naptime = 5s
EOF
"${AS[@]}" "$PGBIN/pg_ctl" -D "$DATA" -l "$WORK/server.log" -w start >/dev/null
PSQL=("${AS[@]}" "$PGBIN/psql" -h "$SOCK" -p "$PORT" -U "$DBUSER" -X -q -v ON_ERROR_STOP=1 -d postgres)
# q SQL: statements run one by one (autocommit), tuples only
q() { printf '%s\n' "$1" | "${AS[@]}" "$PGBIN/psql" -h "$SOCK" -p "$PORT" -U "$DBUSER" -X -q -At -v ON_ERROR_STOP=1 -d postgres -f -; }

mkdir -p "$S"
[[ $(id -u) == 0 ]] && chown "$RUN_USER:" "$S"

# run_pgbench NAME SCRIPT -> TPS
run_pgbench() {
    local name=$1 script=$2
    "${AS[@]}" "$PGBIN/pgbench" -n -M prepared -c "$CLIENTS" -j "$THREADS" -T "$DUR" \
        -h "$SOCK" -p "$PORT" -U "$DBUSER" -f "$script" postgres >"$OUT/logs/$name.log" 2>&1 \
        || { tail -n 20 "$OUT/logs/$name.log" >&2; die "pgbench $name failed"; }
    TPS=$(sed -n 's/^tps = \([0-9.]*\) .*/\1/p' "$OUT/logs/$name.log" | tail -n 1)
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }'; }

q "CREATE EXTENSION pg_claim"

# --------------------------------------------------------------------------- 1. group_claim
log "filling 2 queues with $ITEMS items each (grouped: $NGROUPS groups)"
q "SELECT claim.create_queue('grouped', lease => '5 minutes'); SELECT claim.create_queue('plain', lease => '5 minutes')"
q "DO \$\$
DECLARE c int := 10000;
BEGIN
  FOR s IN 0 .. ($ITEMS / c) - 1 LOOP
    PERFORM count(*) FROM claim.enqueue_many('grouped',
        (SELECT array_agg(jsonb_build_object('n', g) ORDER BY g) FROM generate_series(s * c, s * c + c - 1) g),
        (SELECT array_agg('g' || (g % $NGROUPS) ORDER BY g) FROM generate_series(s * c, s * c + c - 1) g));
    PERFORM count(*) FROM claim.enqueue_many('plain',
        (SELECT array_agg(jsonb_build_object('n', g) ORDER BY g) FROM generate_series(s * c, s * c + c - 1) g));
  END LOOP;
END \$\$;"
q "VACUUM ANALYZE claim.items; CHECKPOINT"

cat >"$S/group_claim.sql" <<'EOF'
SELECT claim.complete(t) FROM (SELECT min(token) AS t FROM claim.group_claim('grouped')) s WHERE t IS NOT NULL;
EOF
cat >"$S/claim_next10.sql" <<'EOF'
SELECT claim.complete_many(a) FROM (SELECT array_agg(token) AS a FROM claim.claim_next('plain', 10)) s WHERE a IS NOT NULL;
EOF
cat >"$S/claim_next1.sql" <<'EOF'
SELECT claim.complete(token) FROM claim.claim_next('plain');
EOF

count_items() { q "SELECT count(*) FROM claim.items i JOIN claim.queues q USING (queue_id) WHERE q.name = '$1'"; }
# items_per_s NAME QUEUE SCRIPT -> RATE
items_per_s() {
    local before after
    before=$(count_items "$2")
    run_pgbench "$1" "$3"
    after=$(count_items "$2")
    RATE=$(awk -v a="$before" -v b="$after" -v d="$DUR" 'BEGIN { printf "%.0f", (a - b) / d }')
    (( after > 0 )) || die "$1: the queue '$2' ran empty within the window; its rate would be too low"
    log "$1: $((before - after)) items in ${DUR}s = $RATE items/s ($TPS calls/s)"
}
# fill_plain N: tops the queue 'plain' up to N items (claim_next(n => 10) takes
# more than a million items in a 15 s window).
fill_plain() {
    local n
    n=$(( $1 - $(count_items plain) ))
    (( n > 0 )) || return 0
    log "topping 'plain' up with $n items"
    q "DO \$\$
DECLARE c int := 10000;
BEGIN
  FOR s IN 0 .. ($n + c - 1) / c - 1 LOOP
    PERFORM count(*) FROM claim.enqueue_many('plain',
        (SELECT array_agg(jsonb_build_object('n', g) ORDER BY g) FROM generate_series(s * c, s * c + c - 1) g));
  END LOOP;
END \$\$;"
    q "VACUUM ANALYZE claim.items; CHECKPOINT"
}
# Enough for a window at 120k items/s.
PLAIN_ITEMS=$(( ITEMS > 120000 * DUR ? ITEMS : 120000 * DUR ))
fill_plain "$PLAIN_ITEMS"
items_per_s claim_next10 plain "$S/claim_next10.sql";  R_NEXT10=$RATE
fill_plain "$PLAIN_ITEMS"
items_per_s group_claim grouped "$S/group_claim.sql";  R_GROUP=$RATE; T_GROUP=$TPS
items_per_s claim_next1 plain "$S/claim_next1.sql";    R_NEXT1=$RATE
GROUP_ITEMS_PER_CALL=$(awk -v r="$R_GROUP" -v t="$T_GROUP" 'BEGIN { if (t > 0) printf "%.1f", r / t; else print "n/a" }')

# --------------------------------------------------------------------------- 2. statement-level bulk insert
log "bulk INSERT ... SELECT of $BULK_ROWS rows, with and without the statement-level trigger"
q "SELECT claim.create_queue('changes');
   CREATE TABLE bulk_plain (id bigint PRIMARY KEY, customer int, note text, amount numeric);
   CREATE TABLE bulk_trig (LIKE bulk_plain INCLUDING ALL);
   CREATE TRIGGER bulk_changes AFTER INSERT ON bulk_trig REFERENCING NEW TABLE AS new_rows
     FOR EACH STATEMENT EXECUTE FUNCTION claim.enqueue_trigger('changes', 'customer');
   CREATE TABLE bulk_batch (LIKE bulk_plain INCLUDING ALL);
   CREATE TRIGGER bulk_changes AFTER INSERT ON bulk_batch REFERENCING NEW TABLE AS new_rows
     FOR EACH STATEMENT EXECUTE FUNCTION claim.enqueue_trigger('changes', 'customer', 'batch');
   -- A reference: per row, an item-shaped row (no payload) with the index
   -- entries a claim needs, written by PostgreSQL's own INSERT into a copy
   -- of claim.items with its indexes.
   CREATE SEQUENCE floor_seq;
   CREATE TABLE floor_items (LIKE claim.items INCLUDING DEFAULTS INCLUDING GENERATED
                             INCLUDING CONSTRAINTS INCLUDING INDEXES);
   ALTER TABLE floor_items ALTER COLUMN id SET DEFAULT nextval('floor_seq');
   CREATE FUNCTION floor_rows() RETURNS trigger LANGUAGE plpgsql AS \$\$
   BEGIN
       INSERT INTO floor_items (queue_id, group_key) SELECT 1, customer::text FROM new_rows;
       RETURN NULL;
   END \$\$;
   CREATE TABLE bulk_floor (LIKE bulk_plain INCLUDING ALL);
   CREATE TRIGGER bulk_changes AFTER INSERT ON bulk_floor REFERENCING NEW TABLE AS new_rows
     FOR EACH STATEMENT EXECUTE FUNCTION floor_rows();"
bulk_ms() {
    local table=$1 best="" ms i
    for i in 1 2 3; do
        q "TRUNCATE $table, floor_items; DELETE FROM claim.items WHERE queue_id = (SELECT queue_id FROM claim.queues WHERE name = 'changes')" >/dev/null
        q "VACUUM claim.items; VACUUM $table; CHECKPOINT" >/dev/null
        ms=$("${AS[@]}" "$PGBIN/psql" -h "$SOCK" -p "$PORT" -U "$DBUSER" -X -q -v ON_ERROR_STOP=1 -d postgres <<EOF | sed -n 's/^Time: \([0-9.]*\) ms.*/\1/p' | tail -n 1
\timing on
INSERT INTO $table SELECT g, g % 5000, 'note ' || g, g * 1.5 FROM generate_series(1, $BULK_ROWS) g;
EOF
)
        log "  $table run $i: $ms ms"
        if [[ -z $best ]] || awk -v a="$ms" -v b="$best" 'BEGIN { exit !(a < b) }'; then best=$ms; fi
    done
    BEST=$best
}
bulk_ms bulk_plain; MS_PLAIN=$BEST
bulk_ms bulk_trig;  MS_TRIG=$BEST
ENQ=$(q "SELECT count(*) FROM claim.items WHERE queue_id = (SELECT queue_id FROM claim.queues WHERE name = 'changes')")
[[ $ENQ == "$BULK_ROWS" ]] || die "statement trigger enqueued $ENQ items, expected $BULK_ROWS"
BAD=$(q "SELECT count(*) FROM claim.items WHERE queue_id = (SELECT queue_id FROM claim.queues WHERE name = 'changes') AND group_key IS DISTINCT FROM payload->'new'->>'customer'")
[[ $BAD == 0 ]] || die "statement trigger: $BAD items carry another row's group key"
bulk_ms bulk_floor; MS_FLOOR=$BEST
ENQ=$(q "SELECT count(*) FROM floor_items WHERE group_key IS NOT NULL")
[[ $ENQ == "$BULK_ROWS" ]] || die "reference trigger wrote $ENQ rows, expected $BULK_ROWS"
bulk_ms bulk_batch; MS_BATCH=$BEST
ENQ=$(q "SELECT count(*) || ' ' || sum(jsonb_array_length(payload->'rows')) FROM claim.items WHERE queue_id = (SELECT queue_id FROM claim.queues WHERE name = 'changes')")
[[ $ENQ == "5000 $BULK_ROWS" ]] || die "batch statement trigger: items and rows are '$ENQ', expected '5000 $BULK_ROWS'"
BAD=$(q "SELECT count(*) FROM claim.items i, jsonb_array_elements(i.payload->'rows') r WHERE i.queue_id = (SELECT queue_id FROM claim.queues WHERE name = 'changes') AND i.group_key IS DISTINCT FROM r->'new'->>'customer'")
[[ $BAD == 0 ]] || die "batch statement trigger: $BAD rows under another group key"
RPS_PLAIN=$(awk -v m="$MS_PLAIN" -v n="$BULK_ROWS" 'BEGIN { printf "%.0f", n / (m / 1000) }')
RPS_TRIG=$(awk -v m="$MS_TRIG" -v n="$BULK_ROWS" 'BEGIN { printf "%.0f", n / (m / 1000) }')
RPS_FLOOR=$(awk -v m="$MS_FLOOR" -v n="$BULK_ROWS" 'BEGIN { printf "%.0f", n / (m / 1000) }')
RPS_BATCH=$(awk -v m="$MS_BATCH" -v n="$BULK_ROWS" 'BEGIN { printf "%.0f", n / (m / 1000) }')

# --------------------------------------------------------------------------- 3. row-level single-row inserts
log "single-row INSERT transactions, $CLIENTS clients, with and without the row-level trigger"
q "CREATE TABLE rows_plain (id bigserial PRIMARY KEY, customer int, note text, amount numeric);
   CREATE TABLE rows_trig (LIKE rows_plain INCLUDING ALL);
   CREATE TRIGGER rows_changes AFTER INSERT OR UPDATE OR DELETE ON rows_trig
     FOR EACH ROW EXECUTE FUNCTION claim.enqueue_trigger('changes', 'customer');
   TRUNCATE claim.items, claim.claims; VACUUM ANALYZE; CHECKPOINT"
cat >"$S/rows_plain.sql" <<'EOF'
\set c random(1, 100000)
INSERT INTO rows_plain (customer, note, amount) VALUES (:c, 'note', 12.5);
EOF
sed 's/rows_plain/rows_trig/' "$S/rows_plain.sql" >"$S/rows_trig.sql"
# Alternated (plain, trigger, plain, trigger) and averaged, so that drift on
# a noisy machine (checkpoints, autovacuum, the growing tables) weighs on
# both sides alike.
run_pgbench rows_plain "$S/rows_plain.sql"; P1=$TPS
run_pgbench rows_trig "$S/rows_trig.sql";   T1=$TPS
run_pgbench rows_plain "$S/rows_plain.sql"; P2=$TPS
run_pgbench rows_trig "$S/rows_trig.sql";   T2=$TPS
log "row trigger windows: plain $P1 / $P2, trigger $T1 / $T2 tx/s"
TPS_ROWS_PLAIN=$(awk -v a="$P1" -v b="$P2" 'BEGIN { printf "%.0f", (a + b) / 2 }')
TPS_ROWS_TRIG=$(awk -v a="$T1" -v b="$T2" 'BEGIN { printf "%.0f", (a + b) / 2 }')
ENQ_ROWS=$(q "SELECT (SELECT count(*) FROM claim.items) = (SELECT count(*) FROM rows_trig)")
[[ $ENQ_ROWS == t ]] || die "row trigger: items and rows differ"

# --------------------------------------------------------------------------- summary
{
    echo "pg_claim groups bench — PostgreSQL $("$PGBIN/postgres" --version | awk '{print $3}'), shared_buffers 1GB, synchronous_commit on, $CLIENTS clients, pgbench -M prepared, ${DUR}s windows"
    printf '%-58s %14s %14s %7s %7s\n' "figure" "pg_claim" "baseline" "ratio" "target"
    printf '%-58s %14s %14s %7s %7s\n' "group_claim+complete vs claim_next(n=>10)+complete, items/s" "$R_GROUP" "$R_NEXT10" "$(ratio "$R_GROUP" "$R_NEXT10")" ">=0.5"
    printf '%-58s %14s %14s %7s %7s\n' "group_claim+complete vs claim_next(n=>1)+complete, items/s" "$R_GROUP" "$R_NEXT1" "$(ratio "$R_GROUP" "$R_NEXT1")" ">=0.5"
    printf '%-58s %14s %14s %7s %7s\n' "100k-row INSERT..SELECT, statement trigger vs none, rows/s" "$RPS_TRIG" "$RPS_PLAIN" "$(ratio "$RPS_TRIG" "$RPS_PLAIN")" ">=0.5"
    printf '%-58s %14s %14s %7s %7s\n' "  reference: item-shaped rows, no payload, SQL INSERT" "$RPS_FLOOR" "$RPS_PLAIN" "$(ratio "$RPS_FLOOR" "$RPS_PLAIN")" "-"
    printf '%-58s %14s %14s %7s %7s\n' "  the same with 'batch' (one item per customer), rows/s" "$RPS_BATCH" "$RPS_PLAIN" "$(ratio "$RPS_BATCH" "$RPS_PLAIN")" ">=0.5"
    printf '%-58s %14s %14s %7s %7s\n' "single-row INSERT, row trigger vs none, tx/s" "${TPS_ROWS_TRIG%.*}" "${TPS_ROWS_PLAIN%.*}" "$(ratio "$TPS_ROWS_TRIG" "$TPS_ROWS_PLAIN")" ">=0.7"
    echo "group_claim: $GROUP_ITEMS_PER_CALL items per call on average ($ITEMS items in $NGROUPS groups, interleaved)"
} | tee "$OUT/summary.txt"
