#!/usr/bin/env bash
# test/run-tests.sh — the README's test command (also what .ci/run calls).
#
# Run as root on Debian 12 (PostgreSQL 15), 13 (17) or sid (18):  bash test/run-tests.sh
#
# 1. test/setup.sh: installs what is missing, builds and installs the extension,
#    creates the unprivileged user "pgclaim".
# 2. Copies the built tree to a scratch directory owned by pgclaim, so the
#    checkout stays untouched and the servers never run as root.
# 3. Runs every layer, each with its own throwaway cluster(s):
#      regress    pg_regress over the Makefile's REGRESS list (test/sql -> expected)
#      isolation  pg_isolation_regress over test/isolation/specs/*.spec
#      tap        prove over test/t/*.pl (PostgreSQL::Test::Cluster)
#      unit       CMake build + GoogleTest via ctest
#      clients    test/clients.sh: the Python, Node and Go clients, also through PgBouncer
#      drivers    test/drivers.sh: the worker of docs/drivers.md in seven drivers
#      ops        test/ops/exporter_test.sh, test/ops/dashboard_test.sh
#      hardening  test/hardening/soak.sh, test/hardening/sqlsmith.sh, test/hardening/memory_flat.sh
# 4. Prints a per-layer summary and, as the very last line: "N passed, N failed".
#
# What a count is:
#   regress, isolation: one per test (each "... ok" / "... FAILED" line of pg_regress;
#                       "failed (ignored)" counts as passed and is listed).
#   tap:                one per assertion ("ok N" / "not ok N" in TAP output); a
#                       script that dies or has a bad plan without a failing
#                       assertion adds one failure.
#   unit:               one per ctest test (one per GoogleTest case with
#                       gtest_discover_tests).
#   A step that prevents a layer from producing results (setup/build failure,
#   a server that does not start, a timeout) counts as one failure.
#
# Environment:
#   PG_MAJOR               PostgreSQL major where several are installed
#                          (default: test/pg-major.sh picks the highest installed)
#   PGCLAIM_USER           OS user that runs the servers   (default pgclaim)
#   PGCLAIM_LAYER_TIMEOUT  seconds per layer at most       (default 900; clients 1200)
#   PGCLAIM_TIME_BUDGET    seconds for all layers together (default 2700; a
#                          layer gets what is left, at most the layer timeout)
#   PGCLAIM_KEEP=1         keep the scratch directory even when all passed
#   PGCLAIM_LAYERS         layers to run, space-separated  (default: regress
#                          isolation tap unit clients drivers ops hardening; also
#                          valgrind, which is slow: see docs/hardening.md)
#   PGCLAIM_SOAK_SECONDS, PGCLAIM_SQLSMITH_SECONDS  (default 60 each)
#   PGCLAIM_SKIP_SETUP=1   do not run test/setup.sh (it must have run before)
#   PGCLAIM_TAP            TAP files to run, by name prefix (e.g. "007 101"; default: all)
set -uo pipefail   # no -e: a failing layer must not stop the others

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# PG_MAJOR, PG_BIN, PGXS_SRC (exported PG_MAJOR: setup and the script layers agree)
. "$ROOT/test/pg-major.sh" || PG_MAJOR=""
PG_CONFIG="$PG_BIN/pg_config"
RUN_USER="${PGCLAIM_USER:-pgclaim}"
MAX_LAYER_TIMEOUT="${PGCLAIM_LAYER_TIMEOUT:-900}"
TIME_BUDGET="${PGCLAIM_TIME_BUDGET:-2700}"
LAYERS=(${PGCLAIM_LAYERS:-regress isolation tap unit clients drivers ops hardening})

declare -A PASSED FAILED NOTE
TOTAL_PASSED=0
TOTAL_FAILED=0
FAILED_NAMES=()
START=$SECONDS

banner() { printf '\n======== %s ========\n' "$*"; }

# record LAYER PASSED FAILED [note]
record() {
    PASSED[$1]=$(( ${PASSED[$1]:-0} + $2 ))
    FAILED[$1]=$(( ${FAILED[$1]:-0} + $3 ))
    [[ -n "${4:-}" ]] && NOTE[$1]="${NOTE[$1]:+${NOTE[$1]}; }$4"
    TOTAL_PASSED=$(( TOTAL_PASSED + $2 ))
    TOTAL_FAILED=$(( TOTAL_FAILED + $3 ))
}

final_line() {
    printf '%d passed, %d failed\n' "$TOTAL_PASSED" "$TOTAL_FAILED"
}

if [[ $(id -u) -ne 0 ]]; then
    echo "test/run-tests.sh must run as root (it installs packages and the extension)" >&2
    TOTAL_FAILED=1; final_line; exit 1
fi

# ---------------------------------------------------------------------------
# 1. set-up
# ---------------------------------------------------------------------------
banner "setup"
if [[ "${PGCLAIM_SKIP_SETUP:-0}" != 1 ]]; then
    if ! bash "$ROOT/test/setup.sh"; then
        echo "setup failed: packages, build or install (see above); no layer can run" >&2
        record setup 0 1 "test/setup.sh failed"
        printf '\nsetup failed after %ds\n' $((SECONDS - START))
        final_line
        exit 1
    fi
fi

# ---------------------------------------------------------------------------
# 2. scratch copy of the built tree, owned by the unprivileged user
# ---------------------------------------------------------------------------
WORK="$(mktemp -d /tmp/pg_claim-tests.XXXXXX)"
TREE="$WORK/tree"
LOGS="$WORK/logs"
mkdir -p "$TREE" "$LOGS"
tar -C "$ROOT" -cf - \
    --exclude=./.git --exclude=./build --exclude='./tmp_check*' \
    --exclude=./results --exclude=./output_iso --exclude=./log \
    --exclude=./regression.diffs --exclude=./regression.out \
    --exclude=./test/tmp_check --exclude=./test/bench/out . \
  | tar -C "$TREE" -xf -
chown -R "$RUN_USER:" "$WORK"
chmod 755 "$WORK"

as_user() {
    runuser -u "$RUN_USER" -- env HOME="$WORK" PATH="$PG_BIN:$PATH" "$@"
}

# Stop any server a killed or crashed layer left behind: only those whose data
# directory is inside our scratch directory, by the PID in their postmaster.pid.
stop_leftover_servers() {
    local pidfile
    while IFS= read -r pidfile; do
        as_user pg_ctl -D "$(dirname "$pidfile")" stop -m immediate >/dev/null 2>&1 || true
    done < <(find "$WORK" -name postmaster.pid 2>/dev/null)
}

cleanup() {
    stop_leftover_servers
    if [[ "${PGCLAIM_KEEP:-0}" == 1 || $TOTAL_FAILED -gt 0 ]]; then
        echo "scratch directory kept for inspection: $WORK"
    else
        rm -rf "$WORK"
    fi
}
on_signal() {
    trap - EXIT INT TERM
    echo "interrupted" >&2
    stop_leftover_servers
    rm -rf "$WORK"
    exit 130
}
trap on_signal INT TERM

# Print a file with a header: show_file TITLE FILE [MAX_LINES [head|tail]].
# Capped, so one giant diff or log cannot drown the summary.
show_file() {
    local title=$1 file=$2 max=${3:-400} how=${4:-head} n
    [[ -s "$file" ]] || return 0
    n=$(wc -l <"$file")
    printf -- '--- %s (%s) ---\n' "$title" "$file"
    if [[ $how == tail ]]; then
        (( n > max )) && printf -- '... (%d earlier lines)\n' $((n - max))
        tail -n "$max" "$file"
    else
        head -n "$max" "$file"
        (( n > max )) && printf -- '... (%d more lines)\n' $((n - max))
    fi
    return 0
}

# Count pg_regress / pg_isolation_regress result lines in a log. Up to
# PostgreSQL 15:
#   "test name   ... ok   12 ms", "     name   ... FAILED   3 ms", "... failed (ignored)"
# from 16 on (TAP):
#   "ok 1         - name   12 ms", "not ok 2     + name   3 ms", "... # (ignored)"
# Sets R_OK, R_FAIL, R_IGN and prints the names of failed tests.
REGRESS_OLD_RE='^(test[[:space:]]+|[[:space:]]+)([^[:space:]]+)[[:space:]]+\.\.\.[[:space:]]+(ok|FAILED|failed \(ignored\))'
REGRESS_TAP_RE='^(not )?ok[[:space:]]+[0-9]+[[:space:]]+[-+][[:space:]]+([^[:space:]]+)[[:space:]]+[0-9.]+ ms(.*)$'
count_regress_log() {
    local log=$1
    R_OK=0; R_FAIL=0; R_IGN=0; R_FAILED_NAMES=()
    local line
    while IFS= read -r line; do
        if [[ $line =~ $REGRESS_OLD_RE ]]; then
            case "${BASH_REMATCH[3]}" in
                ok) R_OK=$((R_OK + 1)) ;;
                FAILED) R_FAIL=$((R_FAIL + 1)); R_FAILED_NAMES+=("${BASH_REMATCH[2]}") ;;
                *) R_IGN=$((R_IGN + 1)) ;;
            esac
        elif [[ $line =~ $REGRESS_TAP_RE ]]; then
            if [[ ${BASH_REMATCH[3]} == *ignored* ]]; then R_IGN=$((R_IGN + 1))
            elif [[ -z ${BASH_REMATCH[1]} ]]; then R_OK=$((R_OK + 1))
            else R_FAIL=$((R_FAIL + 1)); R_FAILED_NAMES+=("${BASH_REMATCH[2]}")
            fi
        fi
    done <"$log"
}

# regress_has_result LOG TEST: the log has a result line (either format) for TEST.
regress_has_result() {
    grep -qE "^(test[[:space:]]+|[[:space:]]+)$2[[:space:]]+\.\.\.[[:space:]]+(ok|FAILED|failed \(ignored\))" "$1" ||
        grep -qE "^(not )?ok[[:space:]]+[0-9]+[[:space:]]+[-+][[:space:]]+$2[[:space:]]+[0-9.]+ ms" "$1"
}

# ---------------------------------------------------------------------------
# 3. layers
# ---------------------------------------------------------------------------

# pg_regress-style layer via the Makefile's installcheck target, so REGRESS,
# REGRESS_OPTS, ISOLATION and ISOLATION_OPTS come from the Makefile itself.
#   $1 layer name, $2 make variable to clear (the other suite),
#   $3 output dir (where regression.diffs and log/postmaster.log land)
run_pg_regress_layer() {
    local layer=$1 clear=$2 outdir=$3 log="$LOGS/$1.log" rc
    local list var=REGRESS
    [[ "$layer" == isolation ]] && var=ISOLATION
    # Ask make for the list, so the Makefile stays the only place that defines it.
    list=$(cd "$TREE" && make --no-print-directory -s -f Makefile -f - \
               PG_CONFIG="$PG_CONFIG" print-list <<<"print-list: ; @echo \$($var)" 2>/dev/null)
    if [[ -z "${list// /}" ]]; then
        echo "no $layer tests found"
        record "$layer" 0 0 "no tests"
        return
    fi
    echo "tests: $list"
    (cd "$TREE" && as_user timeout -k 10 "$LAYER_TIMEOUT" \
        make --no-print-directory installcheck PG_CONFIG="$PG_CONFIG" "$clear=") 2>&1 | tee "$log"
    rc=${PIPESTATUS[0]}
    stop_leftover_servers
    count_regress_log "$log"
    # A test with no result line (pg_regress aborted: missing expected file,
    # server not started, timeout) is a failure too.
    local t missing=0
    for t in $list; do
        if ! regress_has_result "$log" "$t"; then
            missing=$((missing + 1)); R_FAILED_NAMES+=("$t (no result)")
        fi
    done
    R_FAIL=$((R_FAIL + missing))
    local ign_note=""
    (( R_IGN > 0 )) && ign_note="$R_IGN failed (ignored)"
    record "$layer" $((R_OK + R_IGN)) "$R_FAIL" "$ign_note"
    for n in "${R_FAILED_NAMES[@]}"; do FAILED_NAMES+=("$layer/$n"); done
    if (( rc == 124 || rc == 137 )); then
        # the tests that had no result yet are already counted as failed
        record "$layer" 0 $(( R_FAIL == 0 ? 1 : 0 )) "timed out after ${LAYER_TIMEOUT}s"
        FAILED_NAMES+=("$layer (timeout)")
    elif (( rc != 0 && R_FAIL == 0 )); then
        record "$layer" 0 1 "runner failed (exit $rc) without a failing test"
        FAILED_NAMES+=("$layer (runner)")
    fi
    if (( rc != 0 )); then
        show_file "$layer diffs" "$TREE/$outdir/regression.diffs"
        # pg_regress names the server log when the temp instance did not start.
        local plog
        plog=$(sed -n 's/^Examine \(.*\) for the reason.*/\1/p' "$log" | tail -n 1)
        [[ -z "$plog" && $R_FAIL -eq 0 ]] && plog="$TREE/$outdir/log/postmaster.log"
        if [[ -n "$plog" && -s "$plog" ]]; then
            show_file "$layer server log" "$plog" 60 tail
        fi
    fi
}

run_tap_layer() {
    local files=() f log rc ok nok
    shopt -s nullglob
    files=("$TREE"/test/t/*.pl)
    if [[ -n "${PGCLAIM_TAP:-}" ]]; then
        local pick=() want
        for want in $PGCLAIM_TAP; do
            for f in "${files[@]}"; do [[ $(basename "$f") == $want* ]] && pick+=("$f"); done
        done
        files=("${pick[@]}")
    fi
    shopt -u nullglob
    if (( ${#files[@]} == 0 )); then
        echo "no TAP tests found"
        record tap 0 0 "no tests"
        return
    fi
    # The environment pgxs.mk's prove_installcheck sets, adapted to this layout:
    # PostgreSQL::Test::Utils writes to $TESTDIR/tmp_check (up to 15) or to
    # $TESTDATADIR and $TESTLOGDIR (from 16 on: the same absolute paths, so a
    # test may chdir), Cluster.pm needs PG_REGRESS (for --config-auth) and the
    # server binaries in PATH.
    local tap_start=$SECONDS left
    for f in "${files[@]}"; do
        local name; name=$(basename "$f")
        log="$LOGS/tap-$name.log"
        echo "--- $name"
        left=$(( LAYER_TIMEOUT - (SECONDS - tap_start) ))
        if (( left < 5 )); then
            echo "layer time used up: $name not run"
            record tap 0 1 "$name not run (time)"
            FAILED_NAMES+=("tap/$name (not run)")
            continue
        fi
        (cd "$TREE/test" && as_user timeout -k 10 "$left" env \
            TESTDIR="$TREE/test" \
            TESTDATADIR="$TREE/test/tmp_check" \
            TESTLOGDIR="$TREE/test/tmp_check/log" \
            PG_REGRESS="$PGXS_SRC/test/regress/pg_regress" \
            PGXS="$PGXS_SRC/makefiles/pgxs.mk" \
            PG_CONFIG="$PG_CONFIG" \
            prove -v -I "$PGXS_SRC/test/perl/" -I "$TREE/test" "t/$name") 2>&1 | tee "$log"
        rc=${PIPESTATUS[0]}
        stop_leftover_servers
        ok=$(grep -cE '^ok [0-9]+' "$log")
        nok=$(grep -E '^not ok [0-9]+' "$log" | grep -vc '# TODO')
        record tap "$ok" "$nok"
        (( nok > 0 )) && FAILED_NAMES+=("tap/$name ($nok assertions)")
        if (( rc == 124 || rc == 137 )); then
            record tap 0 1 "$name timed out"
            FAILED_NAMES+=("tap/$name (timeout)")
        elif (( rc != 0 && nok == 0 )); then
            record tap 0 1 "$name died (exit $rc)"
            FAILED_NAMES+=("tap/$name (died)")
        fi
        if (( rc != 0 )); then
            local base=${name%.pl}
            show_file "TAP log of $name" "$TREE/test/tmp_check/log/regress_log_$base" 80 tail
            local plog
            for plog in "$TREE"/test/tmp_check/log/"${base}"_*.log; do
                show_file "server log" "$plog" 40 tail
            done
        fi
    done
}

run_unit_layer() {
    local build="$TREE/build/cmake" log="$LOGS/unit.log" blog="$LOGS/unit-build.log" rc line
    local unit_start=$SECONDS
    # Configure and build the core library and the unit tests; keep going
    # past errors so the unit tests still run when only another target is
    # broken. A failed build counts as one failure.
    (cd "$TREE" && as_user timeout -k 10 "$LAYER_TIMEOUT" bash -c '
        cmake -S . -B "$1" -DCMAKE_BUILD_TYPE=RelWithDebInfo || exit 1
        cmake --build "$1" -j2 -- -k
        ' _ "$build") >"$blog" 2>&1
    rc=$?
    if (( rc != 0 )); then
        grep -E -B2 -A6 'error|Error|CMake Error' "$blog" | head -n 80
        echo "(full build log: $blog)"
        record unit 0 1 "cmake configure/build failed (exit $rc)"
        FAILED_NAMES+=("unit (cmake build)")
    else
        echo "cmake build ok"
    fi
    if [[ ! -f "$build/CTestTestfile.cmake" ]]; then
        return
    fi
    if [[ -n "$(ls "$TREE"/test/unit/*.cpp 2>/dev/null)" && ! -x "$build/pgclaim_unit" ]]; then
        echo "pgclaim_unit was not built; unit tests not run"
        return
    fi
    local left=$(( LAYER_TIMEOUT - (SECONDS - unit_start) ))
    (( left < 5 )) && left=5
    (cd "$TREE" && as_user timeout -k 10 "$left" \
        ctest --test-dir "$build" --output-on-failure --timeout 60 -j2) 2>&1 | tee "$log"
    rc=${PIPESTATUS[0]}
    # "100% tests passed, 0 tests failed out of 12"
    line=$(grep -E '[0-9]+% tests passed, [0-9]+ tests? failed out of [0-9]+' "$log" | tail -n 1)
    if [[ $line =~ ([0-9]+)\ tests?\ failed\ out\ of\ ([0-9]+) ]]; then
        local nf=${BASH_REMATCH[1]} nt=${BASH_REMATCH[2]}
        record unit $((nt - nf)) "$nf"
        if (( nf > 0 )); then
            while IFS= read -r line; do FAILED_NAMES+=("unit/$line"); done \
                < <(sed -n 's/^[[:space:]]*[0-9]\{1,\} - \([^ ]*\).*/\1/p' "$log")
        fi
    elif grep -q 'No tests were found' "$log"; then
        record unit 0 0 "no tests"
    elif (( rc != 0 )); then
        record unit 0 1 "ctest failed (exit $rc)"
        FAILED_NAMES+=("unit (ctest)")
    fi
}

LAYERS_START=$SECONDS
# A layer of scripts that set up what they need, start their own servers and
# end with the line "<name>: N passed, N failed". Run from the checkout as
# root (they install packages); each gets what is left of the layer's time.
#   run_script_layer LAYER "script args" ...
run_script_layer() {
    local layer=$1 spec script log rc line p f start=$SECONDS left name
    shift
    for spec in "$@"; do
        script=${spec%% *}
        name=$(basename "$script" .sh)
        log="$LOGS/$layer-$name.log"
        left=$(( LAYER_TIMEOUT - (SECONDS - start) ))
        if (( left < 10 )); then
            record "$layer" 0 1 "$name not run (time)"
            FAILED_NAMES+=("$layer/$name (not run)")
            continue
        fi
        echo "--- $spec"
        (cd "$ROOT" && timeout -k 10 "$left" bash $spec) </dev/null 2>&1 | tee "$log" | tail -n 15
        rc=${PIPESTATUS[0]}
        line=$(grep -E '^[A-Za-z0-9_ -]+: [0-9]+ passed, [0-9]+ failed$' "$log" | tail -n 1)
        if [[ $line =~ ([0-9]+)\ passed,\ ([0-9]+)\ failed$ ]]; then
            p=${BASH_REMATCH[1]}; f=${BASH_REMATCH[2]}
            record "$layer" "$p" "$f"
            (( f > 0 )) && FAILED_NAMES+=("$layer/$name ($f)")
            if (( f == 0 && rc != 0 )); then
                record "$layer" 0 1 "$name exited $rc"
                FAILED_NAMES+=("$layer/$name (exit $rc)")
            fi
        else
            record "$layer" 0 1 "$name gave no result (exit $rc)"
            FAILED_NAMES+=("$layer/$name (no result)")
            show_file "$name output" "$log" 60 tail
        fi
    done
}

for layer in "${LAYERS[@]}"; do
    t0=$SECONDS
    banner "$layer"
    LAYER_TIMEOUT=$(( TIME_BUDGET - (SECONDS - LAYERS_START) ))
    # The clients layer installs and builds three clients (Go cold) on a
    # fresh machine before it tests them: it gets a third more by default.
    max=$MAX_LAYER_TIMEOUT
    [[ $layer == clients && -z ${PGCLAIM_LAYER_TIMEOUT:-} ]] && max=1200
    (( LAYER_TIMEOUT > max )) && LAYER_TIMEOUT=$max
    if (( LAYER_TIMEOUT < 10 )); then
        echo "time budget of ${TIME_BUDGET}s used up: $layer not run"
        record "$layer" 0 1 "not run: time budget used up"
        FAILED_NAMES+=("$layer (not run)")
        continue
    fi
    case "$layer" in
        regress)   run_pg_regress_layer regress ISOLATION . ;;
        isolation) run_pg_regress_layer isolation REGRESS output_iso ;;
        tap)       run_tap_layer ;;
        unit)      run_unit_layer ;;
        clients)   run_script_layer clients test/clients.sh ;;
        drivers)   run_script_layer drivers test/drivers.sh ;;
        ops)       run_script_layer ops test/ops/exporter_test.sh test/ops/dashboard_test.sh ;;
        hardening) run_script_layer hardening "test/hardening/soak.sh ${PGCLAIM_SOAK_SECONDS:-60}" \
                                              "test/hardening/sqlsmith.sh ${PGCLAIM_SQLSMITH_SECONDS:-60}" \
                                              test/hardening/memory_flat.sh ;;
        valgrind)  run_script_layer valgrind test/valgrind/valgrind.sh ;;
        *)         echo "unknown layer $layer"; record "$layer" 0 1 "unknown layer" ;;
    esac
    NOTE[$layer]="${NOTE[$layer]:+${NOTE[$layer]}; }$((SECONDS - t0))s"
done

# ---------------------------------------------------------------------------
# 4. summary
# ---------------------------------------------------------------------------
banner "summary"
printf '%-10s %7s %7s  %s\n' layer passed failed notes
for layer in "${LAYERS[@]}"; do
    printf '%-10s %7d %7d  %s\n' "$layer" "${PASSED[$layer]:-0}" "${FAILED[$layer]:-0}" "${NOTE[$layer]:-}"
done
if (( ${#FAILED_NAMES[@]} )); then
    echo "failed:"
    printf '  %s\n' "${FAILED_NAMES[@]}"
fi
echo "total time: $((SECONDS - START))s"
cleanup
trap - INT TERM
final_line
(( TOTAL_FAILED == 0 ))
