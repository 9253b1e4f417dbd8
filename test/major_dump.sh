#!/usr/bin/env bash
# test/major_dump.sh — a filled database moved from one PostgreSQL major to
# another with pg_dump and pg_restore (docs/operations.md, "Upgrading
# PostgreSQL"). Run as root; pg_claim must be installed (test/setup.sh).
#
#   bash test/major_dump.sh dump DIR      fill a database on this machine's
#                                         PostgreSQL, write DIR/app.dump (custom
#                                         format) and what its views show
#   bash test/major_dump.sh restore DIR   restore DIR/app.dump into a fresh
#                                         cluster of this machine's PostgreSQL
#                                         and check it
#   bash test/major_dump.sh               both, on one machine
#
# .ci/run dumps on the machine's own PostgreSQL (15) and restores in a fresh
# Debian 13 root (17). Checks after the restore: every public view shows what
# it showed before the dump (less what a restore does not keep: live claims
# and leases, docs/operations.md); the claim that was live is refused and its
# item is ready again; every token granted afterwards is higher than any token
# the old server handed out; the lease held before the dump is free.
# Last line: "major_dump: N passed, N failed".
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=lib/cluster.sh
. "$ROOT/test/lib/cluster.sh"

MODE=${1:-both}
DIR=${2:-}
OWN_DIR=""
harness_cleanup() { [[ -n $OWN_DIR ]] && rm -rf "$OWN_DIR"; }
harness major_dump
case $MODE in
    dump|restore) [[ -n $DIR ]] || { echo "usage: test/major_dump.sh dump|restore DIR" >&2; FAILED=1; exit 1; } ;;
    both) OWN_DIR=$(mktemp -d /tmp/pg_claim-major-dump.XXXXXX); DIR=$OWN_DIR ;;
    *) echo "usage: test/major_dump.sh [dump DIR | restore DIR]" >&2; FAILED=1; exit 1 ;;
esac
mkdir -p "$DIR"
ensure_user
CL_DB=app

# What the views show, one block per view, rows sorted. Not compared (a
# restore does not keep them): the views of live claims and leases
# (claimed_items, leases); queue_stats' ready and claimed (a claimed item
# comes back ready: their sum is compared) and oldest_ready_age (relative to
# the clock); blocked_groups' rows blocked by a claim.
STATE_SQL=$(cat <<'EOF'
SELECT string_agg(q, E'\nUNION ALL\n' ORDER BY v) FROM (
  SELECT c.relname AS v,
         format('SELECT %L AS what, coalesce(string_agg(t::text, E''\n'' ORDER BY t::text), '''') AS rows FROM (SELECT %s FROM claim.%I %s) t',
                c.relname,
                string_agg(quote_ident(a.attname), ', ' ORDER BY a.attnum)
                  FILTER (WHERE NOT (c.relname = 'queue_stats' AND a.attname IN ('ready', 'claimed', 'oldest_ready_age')))
                  || CASE WHEN c.relname = 'queue_stats' THEN ', coalesce(ready, 0) + coalesce(claimed, 0) AS ready_or_claimed' ELSE '' END,
                c.relname,
                CASE WHEN c.relname = 'blocked_groups' THEN 'WHERE reason <> ''claimed''' ELSE '' END) AS q
  FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
  WHERE c.relnamespace = 'claim'::regnamespace AND c.relkind = 'v'
    AND c.relname NOT IN ('claimed_items', 'leases')
  GROUP BY c.relname) s
EOF
)
state_of() {
    local q
    q=$(psql_cl -At -c "$STATE_SQL") || return 1
    psql_cl -At -c "SET timezone = 'UTC'; SELECT string_agg('== ' || what || E'\n' || rows, E'\n' ORDER BY what) FROM ($q) s"
}

do_dump() {
    echo "--- dump on PostgreSQL $PG_MAJOR into $DIR"
    cluster_init major-dump-src </dev/null
    cluster_start || { fail "the source server starts"; return; }
    CL_DB=postgres psql_cl -c 'CREATE DATABASE app' >/dev/null
    psql_cl >/dev/null <<'EOF' || { fail "fill the source database"; return; }
CREATE EXTENSION pg_claim;
SELECT claim.create_queue('jobs', lease => '1 hour', max_attempts => 3, backoff => '1 day', retain => '30 days');
SELECT claim.create_queue('lim', lease => '1 hour', max_active => 5, group_limit => 2);
SELECT claim.create_queue('fragile', lease => '1 hour', max_attempts => 1);
SELECT claim.create_queue('held', lease => '1 hour');
SELECT claim.pause('held');
SELECT claim.enqueue('held', '{"paused": true}');
SELECT claim.enqueue('jobs', jsonb_build_object('n', g), priority => g % 3) FROM generate_series(1, 20) g;
SELECT claim.enqueue('jobs', jsonb_build_object('g', g), group_key => 'tenant-1') FROM generate_series(1, 3) g;
SELECT claim.enqueue('jobs', '{"later": true}', run_at => clock_timestamp() + interval '1 day');
SELECT claim.enqueue('jobs', '{"g2": 1}', group_key => 'tenant-2', run_at => clock_timestamp() + interval '1 day');
SELECT claim.enqueue('lim', jsonb_build_object('n', g), group_key => 'g' || (g % 2)) FROM generate_series(1, 4) g;
SELECT claim.enqueue('fragile', '{"doomed": true}');
SELECT claim.complete(token, jsonb_build_object('result', id)) FROM claim.claim_next('jobs', 3);
SELECT claim.fail(token, 'try again tomorrow') FROM claim.claim_next('jobs');
SELECT claim.fail(token, 'broken for good') FROM claim.claim_next('fragile');
SELECT claim.once('mail:1');
SELECT claim.schedule('yearly', '0 0 1 1 *', 'jobs', '{"tick": true}');
EOF
    # A live claim and a live lease: a restore keeps neither.
    psql_cl -At -c "SELECT token FROM claim.claim_next('jobs', worker => 'w1')" >"$DIR/claim_token" &&
        psql_cl -At -c "SELECT claim.lease_acquire('acct:1', '1 hour', 'host-a')" >"$DIR/lease_token" ||
        { fail "a live claim and a live lease on the source"; return; }
    psql_cl -At -c "SELECT max(t) FROM (SELECT token AS t FROM claim.claims UNION ALL
                    SELECT token FROM claim.lease_holders UNION ALL SELECT token FROM claim.guards) s" >"$DIR/max_token"
    state_of >"$DIR/state" || { fail "read the source's views"; return; }
    echo "$PG_MAJOR" >"$DIR/major"
    # written by this shell (root): DIR need not be open to the server's user
    if as_user pg_dump -h "$CL_DIR" -p "$CL_PORT" -Fc app >"$DIR/app.dump"; then
        pass "pg_dump $PG_MAJOR: the source database dumped ($(wc -c <"$DIR/app.dump") bytes, highest token $(cat "$DIR/max_token"))"
    else
        fail "pg_dump of the source database"
    fi
    cluster_cleanup
    CL_DIR=""
}

do_restore() {
    local from; from=$(cat "$DIR/major" 2>/dev/null)
    echo "--- restore on PostgreSQL $PG_MAJOR of a dump made on PostgreSQL ${from:-?}"
    [[ -s $DIR/app.dump && -s $DIR/state ]] || { fail "no dump in $DIR"; return; }
    cluster_init major-dump-dst </dev/null
    cluster_start || { fail "the target server starts"; return; }
    CL_DB=postgres psql_cl -c 'CREATE DATABASE app' >/dev/null
    if as_user pg_restore -h "$CL_DIR" -p "$CL_PORT" -d app --exit-on-error <"$DIR/app.dump"; then
        pass "pg_restore $PG_MAJOR: the dump of PostgreSQL ${from:-?} restored without an error"
    else
        fail "pg_restore of the dump"; return
    fi
    local state; state=$(state_of)
    if [[ $state == "$(cat "$DIR/state")" ]]; then
        pass "every view shows what it showed before the dump ($(grep -c '^== ' <<<"$state") views)"
    else
        fail "the views differ after the restore"
        diff <(cat "$DIR/state") <(echo "$state") | head -n 40
    fi
    local max ctok out tok
    max=$(cat "$DIR/max_token"); ctok=$(cat "$DIR/claim_token")
    out=$(psql_cl -At -v VERBOSITY=verbose -c "SELECT claim.complete($ctok)" 2>&1)
    if grep -q 'PC001' <<<"$out"; then
        pass "the live claim's token $ctok is refused after the restore"
    else
        fail "the live claim's token $ctok completed after the restore: $out"
    fi
    tok=$(psql_cl -At -c "SELECT min(token) FROM claim.claim_next('jobs', 30)")
    if [[ $tok =~ ^[0-9]+$ ]] && (( tok > max )); then
        pass "tokens granted after the restore are higher: $tok > $max"
    else
        fail "token after the restore ($tok) not above the old server's highest ($max)"
    fi
    if psql_cl -At -c "SELECT claim.lease_acquire('acct:1', '1 minute', 'host-b') > $max" | grep -qx t; then
        pass "the lease held before the dump is free, under a higher token"
    else
        fail "lease acct:1 after the restore"
    fi
    local ready
    ready=$(psql_cl -At -c "SELECT count(*) FROM claim.claimed_items WHERE queue = 'jobs' AND live")
    # 19 ready ones in "jobs" (the live claim of the dump among them), of which
    # a group's one at a time
    if [[ $ready =~ ^[0-9]+$ ]] && (( ready >= 15 )); then
        pass "the restored items are claimed again ($ready claims live)"
    else
        fail "restored items claimed: $ready"
    fi
    cluster_cleanup
    CL_DIR=""
}

case $MODE in
    dump) do_dump ;;
    restore) do_restore ;;
    both) do_dump; do_restore ;;
esac
