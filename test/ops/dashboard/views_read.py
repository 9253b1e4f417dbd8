#!/usr/bin/env python3
"""Reads every view of the extension (listed from the catalog) with psycopg's
default loaders, as an application would. Run by test/ops/dashboard_test.sh on a
database that has a released claim, a cancelled item, an expired lease, a
dead item and a paused queue. Environment:
  DSN          libpq connection string
  RELEASED     queue:id of an item given back with claim.release
  VIEWS        views the extension must have (at least), space-separated
Prints one "ok <what>" or "FAIL <what>: <why>" line per check.
"""
import datetime
import os
import sys

import psycopg

results = []


def check(what, cond, why=""):
    results.append(bool(cond))
    print(f"ok    {what}" if cond else f"FAIL  {what}{': ' + why if why else ''}", flush=True)


def values(v):
    """Every scalar inside a loaded value (json included)."""
    if isinstance(v, dict):
        for x in v.values():
            yield from values(x)
    elif isinstance(v, (list, tuple)):
        for x in v:
            yield from values(x)
    else:
        yield v


with psycopg.connect(os.environ["DSN"], autocommit=True) as conn:
    views = [r[0] for r in conn.execute(
        "SELECT c.relname FROM pg_catalog.pg_class c JOIN pg_catalog.pg_depend d"
        "  ON d.classid = 'pg_catalog.pg_class'::regclass AND d.objid = c.oid AND d.deptype = 'e'"
        " JOIN pg_catalog.pg_extension e ON e.oid = d.refobjid AND e.extname = 'pg_claim'"
        " WHERE c.relkind IN ('v', 'm') ORDER BY 1").fetchall()]
    missing = sorted(set(os.environ["VIEWS"].split()) - set(views))
    check(f"psycopg: the extension's views ({' '.join(views)}) include the documented ones",
          not missing, f"missing {missing}")
    for view in views:
        try:
            rows = conn.execute(f"SELECT * FROM claim.{view}").fetchall()
        except psycopg.Error as exc:
            check(f"psycopg: SELECT * FROM claim.{view}", False, f"{type(exc).__name__}: {exc}")
            continue
        bad = [v for r in rows for v in values(r)
               if (isinstance(v, int) and not isinstance(v, bool) and abs(v) > 2**53 - 1)
               or (isinstance(v, float) and v != v)]
        check(f"psycopg: SELECT * FROM claim.{view} loads ({len(rows)} rows), integers within 2^53-1",
              not bad, f"values {bad[:3]}")
    q, i = os.environ["RELEASED"].split(":")
    n = conn.execute("SELECT count(*) FROM claim.claimed_items WHERE queue = %s AND id = %s", (q, int(i))).fetchone()[0]
    check("psycopg: an item given back with release is not listed as claimed", n == 0, f"{n} rows")
    n = conn.execute("SELECT count(*) FROM claim.claimed_items WHERE NOT pg_catalog.isfinite(lease_until)"
                     " OR NOT pg_catalog.isfinite(claimed_at)").fetchone()[0]
    check("psycopg: claimed_items has finite times only", n == 0, f"{n} rows")
sys.exit(0 if all(results) else 1)
