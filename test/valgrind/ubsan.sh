#!/usr/bin/env bash
# test/valgrind/ubsan.sh — the regression suite against pg_claim built with
# -fsanitize=undefined; no "runtime error" may be reported.
#
#   bash test/valgrind/ubsan.sh               the committed tree (git archive HEAD)
#   UBSAN_TREE=worktree bash test/valgrind/ubsan.sh    the working tree as it is
#   bash test/valgrind/ubsan.sh queue leases  some regression tests only
#
# Run as root from the checkout. Not part of test/run-tests.sh (it builds the
# extension again: about a minute on 2 cores, plus the suite).
#
# How: the tree is copied to a scratch directory and built there with PGXS,
#   make PG_CXXFLAGS='... -fsanitize=undefined' SHLIB_LINK='-lstdc++ -fsanitize=undefined'
# and installed with DESTDIR into a scratch root next to copies of Debian's
# server binaries, libraries and share directory: PostgreSQL finds its lib and
# share directories relative to its own executable, so that server loads the
# instrumented pg_claim.so (which pulls in libubsan) and nothing in the
# system installation changes. A throwaway cluster of that server (as the OS
# user pgclaim, extension preloaded, UBSAN_OPTIONS=print_stacktrace=1) runs
# the Makefile's REGRESS list; the sanitizer writes its reports to the
# backends' stderr, which is the server log.
#
# Checks: no "runtime error:" in the server log; no backend terminated by a
# signal. Test results are printed, not checked.
# Last line: "ubsan: N passed, N failed"; exit status 1 if anything failed.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
# shellcheck source=../lib/cluster.sh
. "$ROOT/test/lib/cluster.sh"
SYS_BIN=/usr/lib/postgresql/$PG_MAJOR/bin

SCRATCH=""
harness_cleanup() { [[ -n "$SCRATCH" && "${CL_KEEP:-0}" != 1 ]] && rm -rf "$SCRATCH"; }
harness ubsan

need_packages build-essential "postgresql-server-dev-$PG_MAJOR" || exit 1

SCRATCH="$(mktemp -d /tmp/pg_claim-ubsan.XXXXXX)"
SRC="$SCRATCH/src"
DEST="$SCRATCH/root"
mkdir -p "$SRC" "$DEST"
if [[ "${UBSAN_TREE:-head}" == worktree ]]; then
    tar -C "$ROOT" -cf - --exclude=./.git --exclude=./build --exclude='*.o' --exclude='*.so' \
        --exclude='./tmp_check*' --exclude=./results . | tar -C "$SRC" -xf -
else
    git -C "$ROOT" archive HEAD | tar -x -C "$SRC"
fi

CXXFLAGS_UBSAN='-std=c++17 -Wno-register -fno-omit-frame-pointer -fsanitize=undefined'
T0=$SECONDS
echo "building with -fsanitize=undefined in $SRC"
if ! (cd "$SRC" && nice make -j2 PG_CONFIG="$SYS_BIN/pg_config" \
          PG_CXXFLAGS="$CXXFLAGS_UBSAN" SHLIB_LINK='-lstdc++ -fsanitize=undefined' >"$SCRATCH/build.log" 2>&1 &&
      make install DESTDIR="$DEST" PG_CONFIG="$SYS_BIN/pg_config" >>"$SCRATCH/build.log" 2>&1); then
    fail "build"; tail -n 30 "$SCRATCH/build.log"; exit 1
fi
if ! ldd "$SRC/pg_claim.so" | grep -q libubsan; then fail "pg_claim.so is not linked with libubsan"; exit 1; fi
echo "built in $((SECONDS - T0))s"

# a relocated copy of the server around the instrumented library
mkdir -p "$DEST/usr/lib/postgresql/$PG_MAJOR/bin" "$DEST/usr/share/postgresql/$PG_MAJOR"
cp -a "$SYS_BIN/." "$DEST/usr/lib/postgresql/$PG_MAJOR/bin/"
cp -rn /usr/lib/postgresql/$PG_MAJOR/lib/. "$DEST/usr/lib/postgresql/$PG_MAJOR/lib/"
cp -rn /usr/share/postgresql/$PG_MAJOR/. "$DEST/usr/share/postgresql/$PG_MAJOR/"
chmod -R a+rX "$SCRATCH"
PG_BIN="$DEST/usr/lib/postgresql/$PG_MAJOR/bin"
[[ "$("$PG_BIN/pg_config" --pkglibdir)" == "$DEST/usr/lib/postgresql/$PG_MAJOR/lib" ]] ||
    { fail "the copied server does not find its relocated lib directory"; exit 1; }

if (( $# > 0 )); then
    TESTS="$*"
else
    TESTS=$(cd "$SRC" && make --no-print-directory -s -f Makefile -f - \
                PG_CONFIG="$SYS_BIN/pg_config" print-regress-list <<<'print-regress-list: ; @echo $(REGRESS)' 2>/dev/null)
fi

cluster_init ubsan <<'EOF'
max_locks_per_transaction = 256
EOF
mkdir -p "$CL_DIR/out"
cp -r "$SRC/test/sql" "$SRC/expected" "$CL_DIR/"
chown -R "$RUN_USER:" "$CL_DIR"
if ! as_user env UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=0 \
        pg_ctl -D "$CL_DATA" -l "$CL_LOG" -w start >/dev/null; then
    fail "server did not start"; tail -n 20 "$CL_LOG"; exit 1
fi
if ! psql_cl -tAc "SHOW shared_preload_libraries" | grep -q pg_claim ||
   ! grep -q "$DEST" /proc/"$(head -n 1 "$CL_DATA/postmaster.pid")"/maps; then
    fail "the server did not load the instrumented library"; exit 1
fi
if ! CL_DB=postgres psql_cl -c "CREATE DATABASE ubsan_smoke" ||
   ! CL_DB=ubsan_smoke psql_cl -c "CREATE EXTENSION pg_claim" -c "SELECT claim.create_queue('smoke')"; then
    fail "CREATE EXTENSION pg_claim fails with this build (the tree's SQL and C++ disagree?)"; exit 1
fi
T1=$SECONDS
(cd "$CL_DIR/out" && as_user /usr/lib/postgresql/$PG_MAJOR/lib/pgxs/src/test/regress/pg_regress \
    --inputdir="$CL_DIR" --outputdir="$CL_DIR/out" --bindir="$PG_BIN" \
    --host="$CL_DIR" --port="$CL_PORT" --dbname=contrib_regression $TESTS) 2>&1 |
    grep -E '^(test |     |ok |not ok )|tests (passed|failed)'
echo "regression suite with UBSan: $((SECONDS - T1))s"
cluster_stop fast

reports=$(grep -c 'runtime error:' "$CL_LOG")
if (( reports == 0 )); then
    pass "no undefined behaviour reported (runtime error:)"
else
    fail "$reports undefined-behaviour reports"
    grep -A 8 'runtime error:' "$CL_LOG" | head -n 60
fi
crashes=$(grep -cE 'terminated by signal|terminated by exception|PANIC:' "$CL_LOG")
if (( crashes == 0 )); then pass "no backend terminated by a signal"; else fail "$crashes crash lines in the server log"; fi
exit 0
