#!/usr/bin/env python3
"""item_state(wait) wake latency: from the completing commit to the waiter's return.

    python3 wake_state.py SAMPLES [QUEUE]      (connects through the PG* environment variables)

One waiter process blocks in claim.item_state(QUEUE, id, wait => '5 s'); the completer (this
process) completes that item in its own transaction. One sample at a time: the completer
enqueues and claims an item, hands its id to the waiter, waits until pg_stat_activity shows the
waiter asleep in the extension's latch wait, then runs BEGIN; complete(token); COMMIT.

Two latencies per sample, all clocks being this machine's (client and server share it):
  commit_to_return  the waiter's item_state call returned in its client, minus the completer's
                    COMMIT returned in its client: the wake-up alone (negative when the waiter
                    was faster than the completer's own reply).
  precommit_to_return  clock_timestamp() in the waiter's statement after item_state returned,
                    minus clock_timestamp() in the completer's transaction just before COMMIT: an
                    upper bound that also holds the commit's WAL flush.
Prints one line per measure: n, p50, p99, max in ms; and the number of waits that ended
without seeing the item completed (lost).
"""
import math
import multiprocessing as mp
import sys
import time

import psycopg

WAITER_SQL = ("SELECT s.state, extract(epoch FROM clock_timestamp())::float8 "
              "FROM claim.item_state(%s, %s, wait => '5 s') s")


def waiter(queue, pipe):
    conn = psycopg.connect(autocommit=True, application_name="wake_waiter")
    pipe.send(conn.info.backend_pid)
    cur = conn.cursor()
    cur.execute("SELECT 1")  # warm up the statement path
    while True:
        item = pipe.recv()
        if item is None:
            break
        state, server_ts = cur.execute(WAITER_SQL, (queue, item)).fetchone()
        pipe.send((state, server_ts, time.time()))
    conn.close()


def pct(values, q):
    if not values:
        return float("nan")
    v = sorted(values)
    return v[max(0, math.ceil(q * len(v)) - 1)]


def main():
    samples = int(sys.argv[1]) if len(sys.argv) > 1 else 500
    queue = sys.argv[2] if len(sys.argv) > 2 else "wake"
    conn = psycopg.connect(autocommit=True, application_name="wake_completer")
    conn.execute("SELECT claim.create_queue(%s, retain => '1 hour') "
                 "WHERE NOT EXISTS (SELECT FROM claim.queue_stats WHERE queue = %s)", (queue, queue))
    ours, theirs = mp.Pipe()
    proc = mp.Process(target=waiter, args=(queue, theirs))
    proc.start()
    waiter_pid = ours.recv()
    a, b, lost, not_asleep = [], [], 0, 0
    for _ in range(samples):
        item = conn.execute("SELECT claim.enqueue(%s, '{}')", (queue,)).fetchone()[0]
        cid, token = conn.execute("SELECT id, token FROM claim.claim_next(%s)", (queue,)).fetchone()
        assert cid == item, (cid, item)
        ours.send(item)
        deadline = time.time() + 2
        while True:
            asleep = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE pid = %s AND state = 'active' "
                "AND wait_event_type = 'Extension'", (waiter_pid,)).fetchone()[0]
            if asleep or time.time() > deadline:
                break
        if not asleep:
            not_asleep += 1
        conn.execute("BEGIN")
        conn.execute("SELECT claim.complete(%s::bigint)", (token,))
        pre = conn.execute("SELECT extract(epoch FROM clock_timestamp())::float8").fetchone()[0]
        conn.execute("COMMIT")
        committed = time.time()
        state, server_ts, returned = ours.recv()
        if state != "completed":
            lost += 1
            continue
        a.append((returned - committed) * 1000)
        b.append((server_ts - pre) * 1000)
    ours.send(None)
    proc.join()
    conn.execute("SELECT claim.drop_queue(%s)", (queue,))
    for name, v in (("commit_to_return", a), ("precommit_to_return", b)):
        print(f"{name} n={len(v)} p50={pct(v, 0.5):.3f} p99={pct(v, 0.99):.3f} "
              f"max={max(v) if v else float('nan'):.3f} lost={lost} not_asleep={not_asleep}")


if __name__ == "__main__":
    main()
