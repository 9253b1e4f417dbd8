#!/usr/bin/env bash
# test/valgrind/valgrind.sh — the regression suite against a server running under
# valgrind's memcheck; no error may have a frame in pg_claim.
#
#   bash test/valgrind/valgrind.sh                 regression suite (test/sql/*.sql)
#   VALGRIND_ISOLATION=1 bash test/valgrind/valgrind.sh     also the isolation specs
#   bash test/valgrind/valgrind.sh queue leases    only these regression tests
#
# Slow (the server runs 20-50 times slower under memcheck): not part of
# test/run-tests.sh. Run as root from the checkout, with the extension
# installed (test/setup.sh). Installs valgrind if missing.
#
# How: a throwaway cluster owned by the OS user pgclaim (extension preloaded)
# is started through pg_ctl -p with a wrapper that runs the postmaster as
#   valgrind --tool=memcheck --trace-children=yes --track-origins=yes
#            --leak-check=no --suppressions=test/valgrind/postgres.supp
#            --log-file=<dir>/vg.%p.log
# so every backend, background worker and auxiliary process (all forked from
# the postmaster) is checked, one log per process. pg_regress then runs the
# tests in the Makefile's REGRESS list (test/sql, expected) against it,
# and pg_isolation_regress the specs if asked.
#
# Checks:
#   - no memcheck error in pg_claim's code or in memory pg_claim allocated
#     (test/valgrind/classify.awk: a pg_claim frame among the top 4 frames of
#     the error, or the top 8 of where the memory came from); each one is
#     printed. Errors that PostgreSQL's own code reports deeper under a
#     pg_claim call (a hook, a trigger) are summarized, not counted;
#   - the server survived (no backend terminated by a signal).
# Also printed, not checked: memcheck errors elsewhere (in the server, not
# suppressed: Debian's PostgreSQL is not built with USE_VALGRIND, so padding
# bytes written to WAL or sockets can show) and the test results (timing-
# dependent tests may fail when everything runs 30 times slower).
#
# The logs stay in VALGRIND_OUT (default /tmp/pg_claim-valgrind-out).
# Last line: "valgrind: N passed, N failed"; exit status 1 if anything failed.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
# shellcheck source=lib/cluster.sh
. "$ROOT/test/lib/cluster.sh"

PGXS_SRC="$(dirname "$PG_BIN")/lib/pgxs/src"
OUTDIR="${VALGRIND_OUT:-/tmp/pg_claim-valgrind-out}"
SUPP="$ROOT/test/valgrind/postgres.supp"
# the server under valgrind stops slowly
CL_STOP_TIMEOUT=${CL_STOP_TIMEOUT:-300}
harness valgrind
need_packages valgrind || exit 1

# The regression tests: arguments, or the Makefile's REGRESS list (asked from
# make without building anything), or test/sql/*.sql.
if (( $# > 0 )); then
    TESTS="$*"
else
    TESTS=$(cd "$ROOT" && make --no-print-directory -s -f Makefile -f - \
                PG_CONFIG="$PG_BIN/pg_config" print-regress-list <<<'print-regress-list: ; @echo $(REGRESS)' 2>/dev/null)
    [[ -n "${TESTS// /}" ]] || TESTS=$(cd "$ROOT/test/sql" && ls *.sql | sed 's/\.sql$//' | tr '\n' ' ')
fi

rm -rf "$OUTDIR"
mkdir -p "$OUTDIR/vg"
chown -R "$RUN_USER:" "$OUTDIR"

cluster_init valgrind <<'EOF'
max_locks_per_transaction = 256
max_connections = 30
jit = off
autovacuum_naptime = 60s
log_line_prefix = '%m [%p] '
# slow under memcheck: give statements and the checkpointer time
checkpoint_timeout = 30min
max_wal_size = 4GB
EOF

# A copy of the tests and the suppressions where the server's user can read them.
mkdir -p "$CL_DIR/tests" "$CL_DIR/out"
cp -r "$ROOT/test/sql" "$ROOT/expected" "$CL_DIR/tests/"
[[ -d "$ROOT/test/isolation" ]] && cp -r "$ROOT/test/isolation" "$CL_DIR/tests/"
cp "$SUPP" "$CL_DIR/postgres.supp"
cat >"$CL_DIR/postgres-vg" <<EOF
#!/bin/sh
exec valgrind --tool=memcheck --trace-children=yes --track-origins=yes --leak-check=no \\
    --num-callers=40 --fullpath-after= --error-markers=VG-ERROR-BEGIN,VG-ERROR-END \\
    --suppressions=$CL_DIR/postgres.supp --suppressions=/usr/lib/valgrind/debian.supp \\
    --log-file=$OUTDIR/vg/vg.%p.log \\
    $PG_BIN/postgres "\$@"
EOF
chmod 755 "$CL_DIR/postgres-vg"
chown -R "$RUN_USER:" "$CL_DIR"

T0=$SECONDS
echo "starting the server under valgrind (logs in $OUTDIR/vg)"
if ! as_user pg_ctl -D "$CL_DATA" -l "$CL_LOG" -p "$CL_DIR/postgres-vg" -w -t 600 start >/dev/null; then
    fail "server did not start under valgrind"; tail -n 20 "$CL_LOG"; exit 1
fi
echo "server up after $((SECONDS - T0))s"

echo "regression tests: $TESTS"
T1=$SECONDS
(cd "$CL_DIR/out" && as_user "$PGXS_SRC/test/regress/pg_regress" \
    --inputdir="$CL_DIR/tests" --outputdir="$CL_DIR/out" --bindir="$PG_BIN" \
    --host="$CL_DIR" --port="$CL_PORT" --dbname=contrib_regression $TESTS) 2>&1 | tee "$OUTDIR/regress.log"
echo "regression suite under valgrind: $((SECONDS - T1))s"
cp "$CL_DIR/out/regression.diffs" "$OUTDIR/" 2>/dev/null

if [[ "${VALGRIND_ISOLATION:-0}" == 1 && -d "$CL_DIR/tests/isolation/specs" ]]; then
    SPECS=$(cd "$CL_DIR/tests/isolation/specs" && ls *.spec | sed 's/\.spec$//' | tr '\n' ' ')
    T2=$SECONDS
    mkdir -p "$CL_DIR/out_iso" && chown "$RUN_USER:" "$CL_DIR/out_iso"
    (cd "$CL_DIR/out_iso" && as_user "$PGXS_SRC/test/isolation/pg_isolation_regress" \
        --inputdir="$CL_DIR/tests/isolation" --outputdir="$CL_DIR/out_iso" --bindir="$PG_BIN" \
        --host="$CL_DIR" --port="$CL_PORT" --dbname=isolation_regression $SPECS) 2>&1 | tee "$OUTDIR/isolation.log"
    echo "isolation specs under valgrind: $((SECONDS - T2))s"
    cp "$CL_DIR/out_iso/regression.diffs" "$OUTDIR/isolation.diffs" 2>/dev/null
fi

echo "stopping the server (processes write their valgrind summaries at exit)"
as_user pg_ctl -D "$CL_DATA" -w -t 600 stop -m fast >/dev/null || true
echo "total under valgrind: $((SECONDS - T0))s"
cp "$CL_LOG" "$OUTDIR/server.log" 2>/dev/null

# --- the valgrind logs --------------------------------------------------------------
shopt -s nullglob
logs=("$OUTDIR"/vg/vg.*.log)
echo "${#logs[@]} processes ran under valgrind"
(( ${#logs[@]} > 0 )) || { fail "no valgrind logs"; exit 1; }
# one error per VG-ERROR-BEGIN..END block, sorted by test/valgrind/classify.awk
read -r total mine under < <(awk -v ours="$OUTDIR/errors-pg_claim.txt" -v under="$OUTDIR/errors-under-pg_claim.txt" \
    -v other="$OUTDIR/errors-other.txt" -f "$ROOT/test/valgrind/classify.awk" "${logs[@]}")
echo "memcheck errors: $total in all; $mine in pg_claim's code or memory; $under in PostgreSQL's code under a pg_claim call"
# a summary line per error: kind, the top frame that is not libc or valgrind's, the innermost pg_claim frame
summarize() {
    awk 'BEGIN { RS = "\n\n" }
         /==[0-9]+== [A-Z]/ {
             kind = ""; top = ""; pgc = ""
             n = split($0, L, "\n")
             for (i = 1; i <= n; i++) {
                 if (kind == "" && L[i] ~ /^==[0-9]+== [A-Z]/) { kind = L[i]; sub(/^==[0-9]+== /, "", kind) }
                 if (L[i] ~ /Uninitialised value was created|Address 0x|Block was alloc/) break
                 if (L[i] ~ /(at|by) 0x/) {
                     f = L[i]; sub(/^.*: /, "", f); sub(/ \(.*$/, "", f)
                     if (top == "" && L[i] !~ /vgpreload|libc\.so|\/libc\/|sysdeps|libio/) top = f
                     if (pgc == "" && L[i] ~ /pg_claim\.so|pgclaim|\/src\/(api|core|pg|worker|shmem)\//) {
                         pgc = L[i]; sub(/^.*\(/, "", pgc); sub(/\).*$/, "", pgc); sub(/^.*\/src\//, "src/", pgc)
                     }
                 }
             }
             print kind " | in " top (pgc != "" ? " | under " pgc : "")
         }' "$1" | sort | uniq -c | sort -rn | head -n "${2:-10}"
}
if (( under > 0 )); then
    echo "errors in PostgreSQL's code under a pg_claim call (not counted; all in $OUTDIR/errors-under-pg_claim.txt):"
    summarize "$OUTDIR/errors-under-pg_claim.txt"
fi
if (( total - mine - under > 0 )); then
    echo "errors without a pg_claim frame (not counted; all in $OUTDIR/errors-other.txt):"
    summarize "$OUTDIR/errors-other.txt"
fi
if (( mine == 0 )); then
    pass "no memcheck error in pg_claim's code or in memory it allocated"
else
    fail "$mine memcheck errors in pg_claim's code or memory ($OUTDIR/errors-pg_claim.txt)"
    summarize "$OUTDIR/errors-pg_claim.txt" 20
    head -n 80 "$OUTDIR/errors-pg_claim.txt"
fi

crashes=$(grep -cE 'terminated by signal|terminated by exception|PANIC:' "$CL_LOG")
if (( crashes == 0 )); then pass "no backend terminated by a signal"; else fail "$crashes crash lines in the server log"; fi

ok=$(grep -cE '\.\.\. ok|^ok ' "$OUTDIR"/regress.log "$OUTDIR"/isolation.log 2>/dev/null | awk -F: '{s += $2} END {print s + 0}')
bad=$(grep -cE 'FAILED|failed \(ignored\)|^not ok ' "$OUTDIR"/regress.log "$OUTDIR"/isolation.log 2>/dev/null | awk -F: '{s += $2} END {print s + 0}')
echo "tests under valgrind (informational): $ok passed, $bad failed (diffs in $OUTDIR)"
exit 0
