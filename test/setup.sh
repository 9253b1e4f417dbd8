#!/usr/bin/env bash
# test/setup.sh — prepare a Debian machine to build and test pg_claim
# (Debian 12: PostgreSQL 15, Debian 13: 17, sid: 18; see test/pg-major.sh).
#
# Run as root from anywhere; idempotent and fast on re-runs:
#   1. installs the missing Debian packages (apt only when something is missing),
#   2. builds the extension with PGXS and installs it into PostgreSQL $PG_MAJOR
#      (or, with PGCLAIM_INSTALL=deb, builds the Debian packages of debian/
#      and installs them with apt, so that the tests run against the package),
#   3. creates the unprivileged OS user that runs every test server
#      (PostgreSQL refuses to run as root).
#
# Environment:
#   PG_MAJOR         PostgreSQL major to install and build against (default:
#                    the highest installed, else the system's default)
#   PGCLAIM_USER     OS user for the servers            (default: pgclaim)
#   PGCLAIM_NO_BUILD set to 1 to skip make / make install
#   PGCLAIM_INSTALL  make (default): make install from the tree;
#                    deb: dpkg-buildpackage in a copy of the tree, then
#                    apt-get install of postgresql-NN-pg-claim and
#                    postgresql-NN-pg-claim-proxy for every major built
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
INSTALL_MODE="${PGCLAIM_INSTALL:-make}"
case $INSTALL_MODE in
    make) ;;
    deb)  PACKAGES+=(debhelper dpkg-dev postgresql-server-dev-all) ;;  # debian/control's Build-Depends
    *)    echo "test/setup.sh: PGCLAIM_INSTALL must be make or deb, not '$INSTALL_MODE'" >&2; exit 1 ;;
esac
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
if [[ "${PGCLAIM_NO_BUILD:-0}" != 1 && $INSTALL_MODE == deb ]]; then
    # The packages are built in a copy, so that the tree keeps no build
    # products of theirs; debian/control is regenerated for the majors
    # installed here (PG_UPDATECONTROL, pg_buildext checkcontrol).
    debdir=$(mktemp -d /tmp/pg_claim-deb.XXXXXX)
    mkdir "$debdir/src"
    tar -C "$ROOT" --exclude=./.git --exclude=./build --exclude=./test/artifacts \
        --exclude=node_modules -cf - . | tar -C "$debdir/src" -xf -
    say "building the Debian packages in $debdir (dpkg-buildpackage -b, log: $debdir/build.log)"
    if ! (cd "$debdir/src" && PG_UPDATECONTROL=yes DEB_BUILD_OPTIONS="nocheck parallel=$JOBS" \
            dpkg-buildpackage -us -uc -b) >"$debdir/build.log" 2>&1; then
        tail -n 40 "$debdir/build.log" >&2
        echo "test/setup.sh: dpkg-buildpackage failed (log: $debdir/build.log)" >&2
        exit 1
    fi
    debs=("$debdir"/postgresql-*-pg-claim_*.deb "$debdir"/postgresql-*-pg-claim-proxy_*.deb)
    say "installing ${debs[*]##*/}"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends --reinstall \
        "${debs[@]}" </dev/null
    dpkg-query -W -f='${Status}' "postgresql-$PG_MAJOR-pg-claim" 2>/dev/null | grep -q 'install ok installed' || {
        echo "test/setup.sh: postgresql-$PG_MAJOR-pg-claim is not installed after apt-get" >&2; exit 1; }
    rm -rf "$debdir/src"   # the packages and build.log stay
elif [[ "${PGCLAIM_NO_BUILD:-0}" != 1 ]]; then
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
