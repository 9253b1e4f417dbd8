"""``python3 -m pg_claim``: the ``pg_claim`` command line."""
from .cli import run

run()
