# test/pg-major.sh — sourced by the test, demo and bench scripts: which
# PostgreSQL major they build against and run (Debian's layout,
# /usr/lib/postgresql/N). Supported majors: 15, 17 and 18.
#
#   PG_MAJOR=N      that major (where several are installed, e.g. PG_MAJOR=17)
#   PG_CONFIG=PATH  without PG_MAJOR: the major of that pg_config
#   PGCLAIM_PG_ROOT=DIR  PostgreSQL's tree copied under DIR (see below)
#   neither         the highest major installed with its server
#                   (/usr/lib/postgresql/N/bin/postgres); none installed:
#                   the system's default, the version of Debian's
#                   "postgresql" package (apt-get update first when the
#                   package lists are empty and we are root)
#
# Sets and exports PG_MAJOR, and sets PG_BIN, PG_CONFIG (unless the caller set
# it) and PGXS_SRC. Returns 1, with a message, when no major can be found.

pg_major_default() {
    local v
    v=$(apt-cache show --no-all-versions postgresql 2>/dev/null | sed -n 's/^Version: \([0-9][0-9]*\)+.*/\1/p' | head -n 1 || true)
    if [[ -z $v && $(id -u) == 0 ]]; then
        DEBIAN_FRONTEND=noninteractive apt-get update -q >/dev/null 2>&1
        v=$(apt-cache show --no-all-versions postgresql 2>/dev/null | sed -n 's/^Version: \([0-9][0-9]*\)+.*/\1/p' | head -n 1 || true)
    fi
    printf '%s' "$v"
}

if [[ -z ${PG_MAJOR:-} && -n ${PG_CONFIG:-} ]] && command -v "$PG_CONFIG" >/dev/null 2>&1; then
    PG_MAJOR=$("$PG_CONFIG" --version 2>/dev/null | sed -n 's/^PostgreSQL \([0-9][0-9]*\).*/\1/p' || true)
fi
if [[ -z ${PG_MAJOR:-} ]]; then
    PG_MAJOR=$(for d in /usr/lib/postgresql/*/bin/postgres; do [[ -x $d ]] && basename "$(dirname "$(dirname "$d")")"; done |
               grep -E '^[0-9]+$' | sort -n | tail -n 1 || true)
fi
[[ -n ${PG_MAJOR:-} ]] || PG_MAJOR=$(pg_major_default)
if [[ ! ${PG_MAJOR:-} =~ ^[0-9]+$ ]]; then
    echo "pg-major.sh: no PostgreSQL major found (none installed under /usr/lib/postgresql, and apt knows no \"postgresql\" package); set PG_MAJOR" >&2
    PG_MAJOR=""
    return 1 2>/dev/null || exit 1
fi
export PG_MAJOR
# PGCLAIM_PG_ROOT: a copy of PostgreSQL's Debian tree under another root
# (ROOT/usr/lib/postgresql/N and ROOT/usr/share/postgresql/N, made with cp -a;
# PostgreSQL finds its files relative to its binaries), so that two checkouts
# can install and test their builds on one machine side by side. Unset: the
# system's own tree.
PG_BIN=${PGCLAIM_PG_ROOT:-}/usr/lib/postgresql/$PG_MAJOR/bin
PG_CONFIG=${PG_CONFIG:-$PG_BIN/pg_config}
PGXS_SRC=${PGCLAIM_PG_ROOT:-}/usr/lib/postgresql/$PG_MAJOR/lib/pgxs/src
