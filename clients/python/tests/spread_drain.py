"""Run by test/t/142_spread.pl (not a pytest module).

  spread_drain.py hash                       keys on stdin, one a line: prints
      route_hash, the partition of P = 4, spread_partition over [1, 3] and
      over [0, 1, 2], as the front's functions give them
  spread_drain.py drain QUEUE WORKERS DSN...  drains QUEUE with WORKERS threads,
      each a PartitionedClient over the partitions DSN..., claiming 50 at a
      time; prints "partition id token" per completed item
"""
import os
import sys
import threading

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from pg_claim.routing import PartitionedClient, route_hash, spread_partition, token_partition  # noqa: E402


def hashes() -> None:
    for line in sys.stdin.buffer.read().decode("utf-8").split("\n")[:-1]:
        h = route_hash(line)
        print(h, h & 3, spread_partition([1, 3], line), spread_partition([0, 1, 2], line))


def drain(queue: str, workers: int, dsns: list) -> None:
    lock = threading.Lock()
    out = []
    errors = []

    def work() -> None:
        try:
            with PartitionedClient(dsns) as c:
                while True:
                    rows = c.claim_next(queue, 50)
                    if not rows:
                        s = c.queue_stats(queue)
                        if s["ready"] + s["claimed"] + s["scheduled"] == 0:
                            return
                        continue
                    c.complete_many([r["token"] for r in rows])
                    with lock:
                        out.extend(f"{token_partition(r['token'])} {r['id']} {r['token']}" for r in rows)
        except Exception as e:  # reported, and the run fails
            errors.append(repr(e))

    threads = [threading.Thread(target=work) for _ in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    sys.stdout.write("".join(line + "\n" for line in out))
    if errors:
        sys.stderr.write("\n".join(errors) + "\n")
        sys.exit(1)


if __name__ == "__main__":
    if sys.argv[1] == "hash":
        hashes()
    else:
        drain(sys.argv[2], int(sys.argv[3]), sys.argv[4:])
