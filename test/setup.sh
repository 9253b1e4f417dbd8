#!/usr/bin/env bash
# test/setup.sh — prepare a Debian machine to build and test pg_claim
# (Debian 12: PostgreSQL 15, Debian 13: 17, sid: 18; see test/pg-major.sh).
#
# Run as root from anywhere; idempotent and fast on re-runs:
#   1. installs the missing Debian packages (apt only when something is missing),
#   2. builds the extension with PGXS and installs it into PostgreSQL $PG_MAJOR,
#   3. creates the unprivileged OS user that runs every test server
#      (PostgreSQL refuses to run as root).
#
# Environment:
#   PG_MAJOR         PostgreSQL major to install and build against (default:
#                    the highest installed, else the system's default)
#   PGCLAIM_USER     OS user for the servers            (default: pgclaim)
#   PGCLAIM_NO_BUILD set to 1 to skip make / make install
#   JOBS             parallel make jobs                  (default: 2)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=pg-major.sh
. "$ROOT/test/pg-major.sh"
PG_CONFIG="$PG_BIN/pg_config"
RUN_USER="${PGCLAIM_USER:-pgclaim}"
JOBS="${JOBS:-2}"

say() { printf '==> %s\n' "$*"; }

if [[ $(id -u) -ne 0 ]]; then
    echo "test/setup.sh must run as root (it installs packages and the extension)" >&2
    exit 1
fi

# --- 1. packages --------------------------------------------------------------
PACKAGES=(
    "postgresql-$PG_MAJOR" "postgresql-server-dev-$PG_MAJOR"   # server (contrib included), headers, pgxs, pg_regress
    build-essential g++ make cmake                              # toolchains (PGXS and CMake)
    libgtest-dev googletest                                     # unit tests
    libipc-run-perl                                             # TAP (PostgreSQL::Test::Cluster)
    gnuplot-nox                                                 # bench plots
    util-linux passwd                                           # runuser, useradd
)
# >>> pg_claim_proxy (docs/partitions.md): PL/Proxy for the front; psycopg
# for the Python client's direct routing in TAP 142
PACKAGES+=("postgresql-$PG_MAJOR-plproxy" python3-psycopg)
# <<< pg_claim_proxy
missing=()
for p in "${PACKAGES[@]}"; do
    # "install ok installed" is the only state that counts; half-configured
    # or removed-with-config packages are reinstalled.
    if [[ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" != "install ok installed" ]]; then
        missing+=("$p")
    fi
done
if ((${#missing[@]})); then
    say "installing: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q
    apt-get install -y -q --no-install-recommends "${missing[@]}" </dev/null
else
    say "packages: all present"
fi
# Optional: what a test uses where Debian has it (TAP 015 runs pg_repack
# under load, and skips that part without it).
OPTIONAL=("postgresql-$PG_MAJOR-repack")
for p in "${OPTIONAL[@]}"; do
    if [[ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" != "install ok installed" ]]; then
        if apt-cache show "$p" >/dev/null 2>&1; then
            say "installing (optional): $p"
            DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$p" </dev/null ||
                say "could not install $p: the tests that use it skip that part"
        else
            say "not in the package lists: $p (the tests that use it skip that part)"
        fi
    fi
done

# --- 2. build and install -----------------------------------------------------
if [[ "${PGCLAIM_NO_BUILD:-0}" != 1 ]]; then
    say "building pg_claim (make -j$JOBS)"
    make -C "$ROOT" -j"$JOBS" PG_CONFIG="$PG_CONFIG"
    say "installing pg_claim"
    make -C "$ROOT" install PG_CONFIG="$PG_CONFIG"
    # >>> pg_claim_proxy (docs/partitions.md): the front extension, SQL only
    say "installing pg_claim_proxy"
    make -C "$ROOT/proxy" install PG_CONFIG="$PG_CONFIG"
    # <<< pg_claim_proxy
fi

# --- 3. the unprivileged user -------------------------------------------------
if ! id -u "$RUN_USER" >/dev/null 2>&1; then
    say "creating OS user $RUN_USER"
    useradd --create-home --shell /bin/bash "$RUN_USER"
fi

say "setup done"
