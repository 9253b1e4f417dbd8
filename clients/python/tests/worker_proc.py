"""A worker process for the tests: runs pg_claim.Worker on a queue and records
each job in table ``<queue>_done`` (primary key: the item id).

In transactional mode the record commits with the completion; otherwise the
handler writes it through a connection of its own before returning.
"""
from __future__ import annotations

import argparse
import logging
import os
import sys
import threading
import time
from typing import Any

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import psycopg  # noqa: E402

import pg_claim  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dsn", required=True)
    ap.add_argument("--queue", required=True)
    ap.add_argument("--name", required=True)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--lease", type=float, default=None)
    ap.add_argument("--wait", type=float, default=0.5)
    ap.add_argument("--grace", type=float, default=30.0)
    ap.add_argument("--sleep", type=float, default=0.0)
    ap.add_argument("--transactional", action="store_true")
    ap.add_argument("--burst", action="store_true")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING, format=f"[{args.name}] %(levelname)s %(message)s")
    table = f"{args.queue}_done"
    local = threading.local()

    def own_conn() -> "psycopg.Connection[Any]":
        conn = getattr(local, "conn", None)
        if conn is None:
            conn = psycopg.connect(args.dsn, autocommit=True, prepare_threshold=None)
            local.conn = conn
        return conn

    def handler(job: pg_claim.Job) -> Any:
        if args.sleep:
            time.sleep(args.sleep)
        conn = job.conn if args.transactional else own_conn()
        conn.execute(f"INSERT INTO {table} (id, worker, token, attempt) VALUES (%s, %s, %s, %s)",
                     (job.id, args.name, job.token, job.attempt))
        return None

    worker = pg_claim.Worker(args.dsn, args.queue, handler, concurrency=args.concurrency,
                             lease=args.lease, wait=args.wait, grace=args.grace,
                             transactional=args.transactional, name=args.name, burst=args.burst)
    print(f"ready {os.getpid()}", flush=True)
    stats = worker.run()
    print(f"stats {stats}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
