#!/usr/bin/python3
"""Random calls of every function of schema claim with hostile arguments
(driven by test/hardening/sqlsmith.sh after sqlsmith itself).

sqlsmith picks from every function of the server and never calls
set-returning ones, so it reaches claim's functions rarely. This phase calls
only them: it reads their signatures from pg_proc and, for each call, draws
every argument from a pool of values for its type: NULL, empty, oversized,
hostile names, negative/zero/huge intervals and timestamps, infinities,
empty/NULL-containing/multi-dimensional/odd-bounds arrays, tokens that are
live, stale, negative, zero or a lease's, item ids, large JSON. Some calls run
inside an explicit transaction with a savepoint that is rolled back, and
transactions end by COMMIT or ROLLBACK at random.

Prints per function the calls and the SQLSTATEs they ended with. Every call
that ends in XX000 (internal error) or in a lost connection is printed with
its arguments and counted as a failure ("FAILED: " lines); "ok: " lines are
the checks passed.
"""
import os
import random
import re
import sys
import time
from collections import Counter, defaultdict

import psycopg
from psycopg import sql as S
from psycopg.types.json import Jsonb

CONNINFO = os.environ["FUZZ_CONNINFO"]
SECONDS = float(os.environ.get("FUZZ_SECONDS", "30"))
SEED = int(os.environ.get("FUZZ_SEED", str(random.randrange(1 << 30))))
rng = random.Random(SEED)

NAMES = ["jobs", "orders_q", "bulk_q", "fuzz_q", "mutex:1", "sem", "once:1", "guard:1", "g1", "c1",
         "nosuch", "Jobs", "_x$1", "a" * 63, "a" * 64]
HOSTILE = ["", " ", "'", "\"", "\\", "';--", "$$", "a'b\"c\\d", "\x01\x02\x1f", "\t\n\r", "é" * 600,
           "𝄞" * 300, "x" * 1024, "x" * 1025, "x" * 100000, "%s%n%x", "NULL", "null", "-1", "0",
           "pg_catalog.now()", "claim.items", "public.orders"]
INTERVALS = [None, "0", "-1 second", "1 microsecond", "1 millisecond", "0.001 s", "1 second", "30 s",
             "1 hour", "1 hour 1 second", "7 days", "7 days 1 second", "366 days", "367 days",
             "-7 days", "1000000 years", "-178000000 years", "178000000 years", "1 mon", "-1 mon 40 days"]
TIMESTAMPS = [None, "infinity", "-infinity", "now", "epoch", "4713-01-01 00:00 BC", "294276-12-31 23:59",
              "2000-01-01", "2100-01-01"]
INTS = [None, 0, -1, 1, 2, 3, 10, 1000, 1001, 10000, 10001, 100000, 100001, 1000000, 1000001,
        2**31 - 1, -2**31]
BIGS = [None, 0, -1, 1, 2**32, 2**63 - 1, -2**63, 4294967296 + 7]
JSONS = [None, {}, [], None, 1, "s", {"a": [1, 2, {"b": None}]}, {"k": "x" * 10000},
         {"deep": [[[[[[[[[[1]]]]]]]]]]}, {"big": "y" * 1000000}]


class Pools:
    """Values that exist in the database now: tokens, item ids, lease tokens."""

    def __init__(self):
        self.tokens, self.ids, self.lease_tokens, self.guard_tokens = [], [], [], []

    def refresh(self, conn):
        try:
            self.tokens = [r[0] for r in conn.execute("SELECT token FROM claim.claims ORDER BY random() LIMIT 50")]
            self.ids = [r[0] for r in conn.execute("SELECT id FROM claim.items ORDER BY random() LIMIT 50")]
            self.lease_tokens = [r[0] for r in conn.execute(
                "SELECT token FROM claim.lease_holders ORDER BY random() LIMIT 20")]
            self.guard_tokens = [r[0] for r in conn.execute("SELECT token FROM claim.guards ORDER BY random() LIMIT 20")]
        except psycopg.Error:
            pass


pools = Pools()


def text_value():
    r = rng.random()
    if r < 0.1:
        return None
    if r < 0.6:
        return rng.choice(NAMES)
    return rng.choice(HOSTILE)


def bigint_value():
    r = rng.random()
    live = pools.tokens + pools.ids + pools.lease_tokens + pools.guard_tokens
    if r < 0.55 and live:
        v = rng.choice(live)
        return v + rng.choice([0, 0, 0, 1, -1])
    return rng.choice(BIGS)


def array_of(gen, pg_elem):
    r = rng.random()
    if r < 0.1:
        return None, None
    if r < 0.2:
        return "{}", None
    # multi-dimensional and non-1-based literals whose elements are valid for
    # the type (1 is a valid bigint, integer and jsonb), so the function sees them
    if r < 0.3:
        return "{{1,2},{3,4}}" if pg_elem != "text" else '{{"a","b"},{"c","d"}}', None
    if r < 0.35:
        return "[0:1]={1,2}" if pg_elem != "text" else '[0:1]={"a","b"}', None
    n = rng.choice([1, 1, 2, 3, 10, 200])
    vals = [gen() for _ in range(n)]
    if rng.random() < 0.2:
        vals[rng.randrange(n)] = None
    return vals, None


def value_for(typ):
    """(value, cast) for a PostgreSQL type name."""
    if typ == "text":
        return text_value()
    if typ == "bigint":
        return bigint_value()
    if typ == "integer":
        return rng.choice(INTS)
    if typ == "interval":
        return rng.choice(INTERVALS)
    if typ == "timestamp with time zone":
        return rng.choice(TIMESTAMPS)
    if typ == "boolean":
        return rng.choice([None, True, False])
    if typ == "jsonb":
        v = rng.choice(JSONS)
        return None if v is None and rng.random() < 0.5 else Jsonb(v)
    if typ == "bigint[]":
        return array_of(bigint_value, "bigint")[0]
    if typ == "integer[]":
        return array_of(lambda: rng.choice(INTS), "integer")[0]
    if typ == "text[]":
        return array_of(text_value, "text")[0]
    if typ == "jsonb[]":
        v = array_of(lambda: Jsonb(rng.choice(JSONS[1:6])), "jsonb")[0]
        return v
    return None


def functions(conn):
    rows = conn.execute("""
        SELECT p.proname, p.proretset,
               coalesce((SELECT array_agg(format_type(t, NULL) ORDER BY o)
                         FROM unnest(p.proargtypes::oid[]) WITH ORDINALITY AS a(t, o)), '{}'),
               p.pronargs, p.pronargdefaults, p.prorettype = 'trigger'::regtype
        FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
        WHERE n.nspname = 'claim' AND p.prokind = 'f' AND p.proname NOT LIKE '\\_%'
        ORDER BY 1""").fetchall()
    return [dict(name=r[0], srf=r[1], types=list(r[2]), nargs=r[3], ndefaults=r[4], trigger=r[5])
            for r in rows]


def build_call(f):
    # omit some trailing defaulted arguments now and then
    n = f["nargs"]
    if f["ndefaults"] and rng.random() < 0.3:
        n -= rng.randrange(f["ndefaults"] + 1)
    args, casts = [], []
    for typ in f["types"][:n]:
        args.append(value_for(typ))
        casts.append(typ)
    call = S.SQL("claim.{}({})").format(
        S.Identifier(f["name"]),
        S.SQL(", ").join(S.SQL("%s::{}").format(S.SQL(t)) for t in casts))
    q = S.SQL("SELECT * FROM {}").format(call) if f["srf"] else S.SQL("SELECT {}").format(call)
    return q, args


def short(v):
    s = repr(v.obj if isinstance(v, Jsonb) else v)
    return s if len(s) <= 80 else s[:60] + f"...({len(s)} chars)"


def connect():
    for _ in range(60):
        try:
            return psycopg.connect(CONNINFO, autocommit=True, application_name="fuzz_claim",
                                   options="-c statement_timeout=2s -c lock_timeout=1s")
        except psycopg.OperationalError:
            time.sleep(1)
    raise SystemExit("FAILED: cannot connect")


def main():
    conn = connect()
    funcs = functions(conn)
    print(f"fuzz_claim: {len(funcs)} functions of schema claim, {SECONDS:.0f}s, seed {SEED}", flush=True)
    conn.execute("SELECT claim.create_queue('fuzz_q')") if not conn.execute(
        "SELECT 1 FROM claim.queues WHERE name = 'fuzz_q'").fetchone() else None
    outcomes = defaultdict(Counter)
    bad = []
    t0 = time.monotonic()
    calls = 0
    while time.monotonic() - t0 < SECONDS:
        if calls % 50 == 0:
            pools.refresh(conn)
            # keep some work around to claim, complete and fail
            try:
                conn.execute("SELECT claim.enqueue(q, jsonb_build_object('n', n), group_key => 'g' || (n % 3))"
                             " FROM unnest(ARRAY['jobs', 'fuzz_q']) AS q, generate_series(1, 5) AS n"
                             " WHERE EXISTS (SELECT FROM claim.queues WHERE name = q)")
                conn.execute("SELECT count(*) FROM claim.claim_next('jobs', 3, lease => '2 seconds')"
                             " WHERE EXISTS (SELECT FROM claim.queues WHERE name = 'jobs')")
                for q in ("jobs", "orders_q", "bulk_q"):
                    if not conn.execute("SELECT 1 FROM claim.queues WHERE name = %s", (q,)).fetchone():
                        conn.execute("SELECT claim.create_queue(%s)", (q,))
            except psycopg.Error:
                pass
        f = rng.choice(funcs)
        q, args = build_call(f)
        in_tx = rng.random() < 0.2
        calls += 1
        try:
            if in_tx:
                conn.execute("BEGIN")
                if rng.random() < 0.5:
                    conn.execute("SAVEPOINT s")
                    try:
                        conn.execute(*build_call(rng.choice(funcs))).fetchall()
                    except psycopg.Error as e:
                        if e.sqlstate == "XX000" or conn.broken:
                            raise
                    conn.execute("ROLLBACK TO SAVEPOINT s")
            conn.execute(q, args).fetchall()
            outcomes[f["name"]]["ok"] += 1
            if in_tx:
                conn.execute(rng.choice(["COMMIT", "ROLLBACK"]))
        except psycopg.Error as e:
            state = e.sqlstate or ("connection lost" if conn.broken else type(e).__name__)
            outcomes[f["name"]][state] += 1
            if state == "XX000" or conn.broken or conn.closed:
                bad.append((f["name"], state, [short(a) for a in args], str(e).strip().splitlines()[0]))
                if conn.broken or conn.closed:
                    time.sleep(2)
                    conn = connect()
            try:
                if not conn.broken and not conn.closed:
                    conn.execute("ROLLBACK")
            except psycopg.Error:
                pass
    print(f"fuzz_claim: {calls} calls in {time.monotonic() - t0:.0f}s")
    for name in sorted(outcomes):
        c = outcomes[name]
        print(f"  {name:22} {sum(c.values()):6}  " + ", ".join(f"{k} {v}" for k, v in c.most_common()))
    never = sorted(set(f["name"] for f in funcs) - set(outcomes))
    if never:
        print("  never called: " + ", ".join(never))
    # SQLSTATEs that no document of the repository lists (informational: the
    # error table of docs/errors.md should cover every SQLSTATE a claim function raises)
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    documented = set()
    for doc in [os.path.join(root, "README.md")] + [
            os.path.join(root, "docs", f) for f in sorted(os.listdir(os.path.join(root, "docs")))
            if f.endswith(".md") and f != "hardening.md"]:
        with open(doc, encoding="utf-8") as fh:
            documented |= set(re.findall(r"`([0-9A-Z]{5})`", fh.read()))
    undocumented = defaultdict(set)
    for name, c in outcomes.items():
        for state in c:
            if re.fullmatch(r"[0-9A-Z]{5}", state) and state not in documented:
                undocumented[state].add(name)
    for state in sorted(undocumented):
        print(f"  SQLSTATE {state} is in no document's error table; raised by: "
              + ", ".join(sorted(undocumented[state])))
    for name, state, args, msg in bad[:20]:
        print(f"  {state}: claim.{name}({', '.join(args)}): {msg}")
    ok = True
    xx = sum(1 for b in bad if b[1] == "XX000")
    lost = len(bad) - xx
    print(f"{'ok' if xx == 0 else 'FAILED'}: claim functions: {xx} internal errors (XX000)")
    print(f"{'ok' if lost == 0 else 'FAILED'}: claim functions: {lost} calls that lost the connection")
    return 0 if xx == 0 and lost == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
