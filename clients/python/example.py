#!/usr/bin/env python3
"""A pg_claim worker in a few lines: enqueue some jobs, then process them with
4 concurrent handlers until the queue is empty.

    /usr/bin/python3 clients/python/example.py "postgresql://user@host:port/db"

(or set PG_CLAIM_DSN; without either, libpq's PG* variables). Creates the queue "example" if it does not exist.
Stop it early with Ctrl-C: handlers in flight finish, the rest stays queued.
"""
import logging
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import pg_claim  # noqa: E402


def handler(job: pg_claim.Job) -> dict:
    time.sleep(0.01)                                   # the work
    if job.payload["n"] % 50 == 7 and job.attempt == 1:
        raise pg_claim.Retry(after=0.5, message="flaky the first time")
    return {"square": job.payload["n"] ** 2}           # the item's result


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    dsn = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("PG_CLAIM_DSN", "")
    with pg_claim.Client(dsn) as client:
        try:
            client.create_queue("example", lease="10 s")
        except pg_claim.QueueExists:
            pass
        ids = client.enqueue_batch("example", [{"n": n} for n in range(200)])
        print(f"enqueued {len(ids)} jobs")
        stats = pg_claim.Worker(dsn, "example", handler, concurrency=4, wait="2 s",
                                burst=True).run()
        print(f"worker: {stats}")
        for row in client.stats("example"):
            print(f"queue {row.queue}: ready {row.ready}, claimed {row.claimed}, dead {row.dead}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
