# shellcheck shell=bash
# test/lib/initdb.sh — sourced by the scripts that make a throwaway cluster of their own
# (test/lib/cluster.sh, test/demo.sh, test/drivers.sh); the caller defines as_user (the
# unprivileged OS user, PostgreSQL's bin directory first in PATH).
#
# claim_initdb NAME DATA PORT SOCKET_DIR [LISTEN] [EXTRA]: initdb DATA (trust, UTF8, locale C)
# as that user, then its postgresql.conf gets a comment naming NAME, the port, listen_addresses
# (LISTEN, default '': the unix socket only), the socket in SOCKET_DIR, pg_claim preloaded,
# fsync off, and EXTRA (more lines). Returns 1 when initdb fails.
claim_initdb() {
    as_user initdb -D "$2" --auth=trust --no-instructions -E UTF8 --locale=C >/dev/null || return 1
    {
        echo "# pg_claim test cluster: $1"
        echo "port = $3"
        echo "listen_addresses = '${5:-}'"
        echo "unix_socket_directories = '$4'"
        echo "shared_preload_libraries = 'pg_claim'"
        echo "fsync = off"
        if [[ -n ${6:-} ]]; then echo "$6"; fi
    } >>"$2/postgresql.conf"
}
