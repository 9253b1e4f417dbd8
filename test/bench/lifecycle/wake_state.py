#!/usr/bin/env python3
"""item_state(wait) wake latency, from the completing commit to the waiter's return, beside the
same measure for LISTEN/NOTIFY (the hand-written way to wait for a job's end).

    python3 wake_state.py SAMPLES [QUEUE]      (connects through the PG* environment variables)

One sample at a time. pg_claim: the completer (this process) enqueues and claims an item, hands
its id to the waiter process, waits until pg_stat_activity shows the waiter asleep in
claim.item_state(QUEUE, id, wait => '5 s') (wait event Extension), then runs
BEGIN; complete(token); COMMIT. Baseline: the waiter has run LISTEN once; per sample it says it
is about to block on its socket, the completer sleeps 2 ms and runs
BEGIN; UPDATE of a one-row job table; NOTIFY with the job id; COMMIT.

Measures, all clocks being this machine's (client and server share it):
  commit_to_return     the waiter got its answer (its client) minus the completer's COMMIT
                       returned (its client): the wake-up alone, negative when the waiter was
                       faster than the completer's own reply.
  precommit_to_return  (pg_claim only) clock_timestamp() in the waiter's statement after
                       item_state returned minus clock_timestamp() in the completer's
                       transaction just before COMMIT: an upper bound holding the WAL flush.
  item_state_nowait_call / trivial_select_call  one item_state(wait => 0) call on a completed item
                       and one trivial SELECT, round trip each (what the waiter does once woken).
Prints one line per measure: n, p50, p99, max in ms, and the samples whose wait ended without
the item completed (lost).
"""
import math
import multiprocessing as mp
import select
import sys
import time

import psycopg

WAITER_SQL = ("SELECT s.state, extract(epoch FROM clock_timestamp())::float8 "
              "FROM claim.item_state(%s, %s, wait => '5 s') s")


def claim_waiter(queue, pipe):
    conn = psycopg.connect(autocommit=True, application_name="wake_waiter")
    pipe.send(conn.info.backend_pid)
    cur = conn.cursor()
    while True:
        item = pipe.recv()
        if item is None:
            break
        state, server_ts = cur.execute(WAITER_SQL, (queue, item)).fetchone()
        pipe.send((state == "completed", server_ts, time.time()))
    conn.close()


def notify_waiter(pipe):
    conn = psycopg.connect(autocommit=True, application_name="wake_listener")
    conn.execute("LISTEN job_done")
    pipe.send(conn.info.backend_pid)
    pgconn = conn.pgconn
    while True:
        item = pipe.recv()
        if item is None:
            break
        pipe.send("ready")
        got = False
        deadline = time.time() + 5
        while not got and time.time() < deadline:
            select.select([pgconn.socket], [], [], max(0.0, deadline - time.time()))
            pgconn.consume_input()
            while True:
                n = pgconn.notifies()
                if n is None:
                    break
                if n.extra.decode() == str(item):
                    got = True
        pipe.send((got, None, time.time()))
    conn.close()


def pct(values, q):
    if not values:
        return float("nan")
    v = sorted(values)
    return v[max(0, math.ceil(q * len(v)) - 1)]


def report(name, v, lost):
    print(f"{name} n={len(v)} p50={pct(v, 0.5):.3f} p99={pct(v, 0.99):.3f} "
          f"max={max(v) if v else float('nan'):.3f} lost={lost}", flush=True)


def complete_and_wake(conn, pipe, statements, stamp):
    """BEGIN; the (sql, params) statements; with stamp, clock_timestamp() read just before COMMIT;
    COMMIT; then the waiter's answer on pipe. None when its wait ended without the item completed
    (lost), else (commit_to_return, precommit_to_return) in ms, the second None without stamp."""
    conn.execute("BEGIN")
    for sql, params in statements:
        conn.execute(sql, params)
    if stamp:
        pre = conn.execute("SELECT extract(epoch FROM clock_timestamp())::float8").fetchone()[0]
    conn.execute("COMMIT")
    committed = time.time()
    ok, server_ts, returned = pipe.recv()
    if not ok:
        return None
    return (returned - committed) * 1000, (server_ts - pre) * 1000 if stamp else None


def run_claim(conn, samples, queue):
    conn.execute("SELECT claim.create_queue(%s, retain => '1 hour') "
                 "WHERE NOT EXISTS (SELECT FROM claim.queue_stats WHERE queue = %s)", (queue, queue))
    ours, theirs = mp.Pipe()
    proc = mp.Process(target=claim_waiter, args=(queue, theirs))
    proc.start()
    waiter_pid = ours.recv()
    a, b, lost = [], [], 0
    for _ in range(samples):
        item = conn.execute("SELECT claim.enqueue(%s, '{}')", (queue,)).fetchone()[0]
        cid, token = conn.execute("SELECT id, token FROM claim.claim_next(%s)", (queue,)).fetchone()
        assert cid == item, (cid, item)
        ours.send(item)
        deadline = time.time() + 2
        while time.time() < deadline:
            if conn.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s AND state = 'active' "
                            "AND wait_event_type = 'Extension'", (waiter_pid,)).fetchone()[0]:
                break
        wake = complete_and_wake(conn, ours, [("SELECT claim.complete(%s::bigint)", (token,))], stamp=True)
        if wake is None:
            lost += 1
        else:
            a.append(wake[0])
            b.append(wake[1])
    ours.send(None)
    proc.join()
    # What the waiter does after its wake-up, alone: item_state without wait on a completed
    # item, beside a trivial statement's round trip.
    lookup, trivial = [], []
    for _ in range(200):
        t0 = time.perf_counter()
        conn.execute("SELECT state FROM claim.item_state(%s, %s)", (queue, item)).fetchone()
        t1 = time.perf_counter()
        conn.execute("SELECT %s::bigint", (item,)).fetchone()
        t2 = time.perf_counter()
        lookup.append((t1 - t0) * 1000)
        trivial.append((t2 - t1) * 1000)
    conn.execute("SELECT claim.drop_queue(%s)", (queue,))
    report("commit_to_return", a, lost)
    report("precommit_to_return", b, lost)
    report("item_state_nowait_call", lookup, 0)
    report("trivial_select_call", trivial, 0)


def run_notify(conn, samples):
    conn.execute("CREATE TABLE IF NOT EXISTS wake_jobs (id bigint PRIMARY KEY, status text)")
    conn.execute("INSERT INTO wake_jobs VALUES (1, 'new') ON CONFLICT DO NOTHING")
    ours, theirs = mp.Pipe()
    proc = mp.Process(target=notify_waiter, args=(theirs,))
    proc.start()
    ours.recv()
    a, lost = [], 0
    for item in range(1, samples + 1):
        ours.send(item)
        ours.recv()  # "ready": the waiter is about to block on its socket
        time.sleep(0.002)
        wake = complete_and_wake(conn, ours, [("UPDATE wake_jobs SET status = 'complete' WHERE id = 1", None),
                                              ("SELECT pg_notify('job_done', %s)", (str(item),))], stamp=False)
        if wake is None:
            lost += 1
        else:
            a.append(wake[0])
    ours.send(None)
    proc.join()
    report("notify_commit_to_return", a, lost)


def main():
    samples = int(sys.argv[1]) if len(sys.argv) > 1 else 500
    queue = sys.argv[2] if len(sys.argv) > 2 else "wake"
    conn = psycopg.connect(autocommit=True, application_name="wake_completer")
    run_claim(conn, samples, queue)
    run_notify(conn, samples)


if __name__ == "__main__":
    main()
