#!/usr/bin/env bash
# .ci/fresh-root.sh — run a command of the project in a fresh Debian root of
# another release, as a new machine of that release would: a minimal base
# system (debootstrap --variant=minbase), the committed HEAD cloned into it,
# the command run there under chroot.
#
#   bash .ci/fresh-root.sh SUITE [COMMAND]
#     SUITE    trixie (Debian 13, PostgreSQL 17), sid (PostgreSQL 18), bookworm (15)
#     COMMAND  run from the clone's root (default: bash test/run-tests.sh)
#
# Needs root, debootstrap (installed when missing) and a Debian mirror (the one
# in /etc/apt/sources.list.d/debian.sources, else deb.debian.org). The base
# system is built once per suite and kept in $FRESH_ROOT_CACHE (default
# /var/cache/pg_claim-fresh/SUITE-minbase.tgz); each call unpacks a new copy
# and removes it afterwards.
#
# Exit status: the command's; 3 when the root cannot be made here (not root, no
# debootstrap, no mirror, no permission to mount), after a line
# "fresh-root: skipped: REASON". The environment variables PG_MAJOR and
# PGCLAIM_* are passed into the root; FRESH_ROOT_CARRY=DIR copies DIR into it
# as /root/carry (e.g. a dump made outside, test/major_dump.sh).
set -uo pipefail

suite=${1:?usage: .ci/fresh-root.sh SUITE [COMMAND]}
cmd=${2:-bash test/run-tests.sh}
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cache=${FRESH_ROOT_CACHE:-/var/cache/pg_claim-fresh}
base=$cache/$suite-minbase.tgz

skip() { echo "fresh-root: skipped: $*"; exit 3; }

[[ $(id -u) == 0 ]] || skip "not root (debootstrap, chroot and mounts need root)"
mkdir -p "$cache" || skip "cannot create $cache"
# git clones the committed HEAD into the root (a fresh machine may lack it).
if ! command -v git >/dev/null; then
    { DEBIAN_FRONTEND=noninteractive apt-get update -q &&
      DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends git ca-certificates; } \
        </dev/null >"$cache/git-install.log" 2>&1 ||
        skip "git is not installed and apt-get could not install it (see $cache/git-install.log)"
fi
git -C "$top" rev-parse --verify -q HEAD >/dev/null || skip "$top is not a git checkout with a commit"

if [[ ! -s $base ]]; then
    if ! command -v debootstrap >/dev/null; then
        { DEBIAN_FRONTEND=noninteractive apt-get update -q &&
          DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends debootstrap; } \
            </dev/null >"$cache/debootstrap-install.log" 2>&1 ||
            skip "debootstrap is not installed and apt-get could not install it (see $cache/debootstrap-install.log)"
    fi
    mirror=$(sed -n 's/^URIs: *//p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -n 1)
    t=$(mktemp -d "$cache/build.XXXXXX")
    echo "fresh-root: debootstrap $suite from ${mirror:-http://deb.debian.org/debian}"
    if debootstrap --variant=minbase "$suite" "$t/root" "${mirror:-http://deb.debian.org/debian}" \
            >"$cache/debootstrap-$suite.log" 2>&1; then
        tar -C "$t/root" -czf "$base.tmp" . && mv "$base.tmp" "$base"
    fi
    rm -rf "$t" "$base.tmp"
    [[ -s $base ]] || skip "debootstrap of $suite failed (no mirror reachable?), see $cache/debootstrap-$suite.log: $(tail -n 1 "$cache/debootstrap-$suite.log" 2>/dev/null)"
fi

r=$(mktemp -d /tmp/pg_claim-root.XXXXXX)
cleanup() {
    umount -R "$r/dev" 2>/dev/null; umount -R "$r/sys" 2>/dev/null; umount "$r/proc" 2>/dev/null
    # remove the root only when nothing is mounted under it any more
    grep -q " $r/" /proc/mounts || rm -rf "$r"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
tar -C "$r" -xzf "$base" || skip "cannot unpack $base"
git clone -q "$top" "$r/root/p" || { echo "fresh-root: git clone failed" >&2; exit 2; }
cp /etc/resolv.conf "$r/etc/" 2>/dev/null
if [[ -n ${FRESH_ROOT_CARRY:-} ]]; then
    cp -r "$FRESH_ROOT_CARRY" "$r/root/carry" || { echo "fresh-root: cannot copy $FRESH_ROOT_CARRY" >&2; exit 2; }
fi
# A dated mirror snapshot's Release file may be past its Valid-Until: accept it
# (the root lives for this one run).
echo 'Acquire::Check-Valid-Until "false";' >"$r/etc/apt/apt.conf.d/99pg-claim-fresh-root"
mount -t proc proc "$r/proc" && mount --rbind /dev "$r/dev" && mount --make-rslave "$r/dev" &&
    mount --rbind /sys "$r/sys" && mount --make-rslave "$r/sys" ||
    skip "cannot mount /proc, /dev or /sys into the root (no permission to mount?)"

envs=(PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root CI=true)
while IFS='=' read -r k _; do
    [[ $k == PG_MAJOR || $k == PGCLAIM_* ]] && envs+=("$k=${!k}")
done < <(env)
# The package lists: without a reachable mirror nothing can be installed there.
chroot "$r" /usr/bin/env -i "${envs[@]}" DEBIAN_FRONTEND=noninteractive apt-get update -q \
    </dev/null >"$r/root/apt-update.log" 2>&1 ||
    skip "apt-get update failed in the $suite root (no Debian mirror reachable?): $(tail -n 1 "$r/root/apt-update.log")"
echo "fresh-root: running '$cmd' in a fresh Debian $suite root ($r), HEAD $(git -C "$top" rev-parse --short HEAD)"
chroot "$r" /usr/bin/env -i "${envs[@]}" bash -c "cd /root/p && $cmd" </dev/null
