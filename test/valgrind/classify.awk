# test/valgrind/classify.awk — sorts memcheck error blocks (between the
# VG-ERROR-BEGIN and VG-ERROR-END markers that test/valgrind/valgrind.sh asks for)
# into three files:
#
#   OURS   the error is pg_claim's: a pg_claim frame is among the top 4 frames
#          of the error's stack (pg_claim's code, or a function it called
#          directly, did the bad access), or among the top 8 frames of a stack
#          that says where the memory came from ("Uninitialised value was
#          created by", "Address ... alloc'd/free'd": pg_claim allocated it)
#   UNDER  a pg_claim frame appears only deeper in the stack: PostgreSQL's own
#          code reported it while running under a pg_claim call (a hook,
#          a trigger, a function that called into the server)
#   OTHER  no pg_claim frame at all
#
# A pg_claim frame names pg_claim.so, a pgclaim symbol, or a source file of
# the extension (src/{api,core,pg,worker,shmem}/...).
# Usage: awk -v ours=F1 -v under=F2 -v other=F3 -f classify.awk LOGS...
# Prints "TOTAL OURS UNDER" on stdout.

function is_ours(line) {
    return line ~ /pg_claim\.so|pgclaim|\/src\/(api|core|pg|worker|shmem)\/[A-Za-z_]+\.(cpp|hpp|h|c):/
}

/VG-ERROR-BEGIN/ {
    inblk = 1; blk = ""; frame = 0; section = "error"; hit_top = 0; hit_deep = 0
    next
}
/VG-ERROR-END/ {
    inblk = 0; n++
    if (hit_top) { print "== " FILENAME >> ours; print blk >> ours; nours++ }
    else if (hit_deep) { print "== " FILENAME >> under; print blk >> under; nunder++ }
    else { print "== " FILENAME >> other; print blk >> other }
    next
}
inblk {
    blk = blk $0 "\n"
    if ($0 ~ /Uninitialised value was created|Address 0x[0-9a-f]+ is|Block was alloc'd/) {
        section = "origin"; frame = 0
        next
    }
    if ($0 ~ /^==[0-9]+==    (at|by) 0x/) {
        if (is_ours($0)) {
            if ((section == "error" && frame < 4) || (section == "origin" && frame < 8)) hit_top = 1
            else hit_deep = 1
        }
        frame++
    }
}
END { printf "%d %d %d\n", n + 0, nours + 0, nunder + 0 }
