# Helpers of the Python parts of the bench scripts; lib.sh's bench_python
# runs a script after this file.
import os

import psycopg


def conn():
    """A connection in autocommit to the bench's cluster ($CONN)."""
    return psycopg.connect(os.environ["CONN"], autocommit=True)


def pct(xs, p):
    """The p-th percentile (0 to 100) of xs, nearest rank."""
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]
