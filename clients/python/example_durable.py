"""A durable three-step job on pg_claim: charge, ship, email.

    PG_CLAIM_DSN=postgresql://user@host:port/db /usr/bin/python3 clients/python/example_durable.py

The charge step writes its row through the step's own transaction, so the
charge and its checkpoint commit together: however often the job is
delivered again, the card is charged once. Shipping and the email call other
services (here: functions that print), at least once, with an idempotency
key. Between charge and ship the job sleeps without holding a worker.
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import psycopg  # noqa: E402

from pg_claim.durable import Context, durable  # noqa: E402

SETUP = """
CREATE TABLE IF NOT EXISTS example_charges (
    run bigint PRIMARY KEY, order_id bigint NOT NULL, amount numeric NOT NULL,
    charged_at timestamptz NOT NULL DEFAULT now());
DO $$ BEGIN
    PERFORM claim.create_queue('example_orders', lease => '30 s');
EXCEPTION WHEN duplicate_object THEN NULL;
END $$;
"""


def charge(conn: "psycopg.Connection", run: int, order: dict) -> dict:
    # The primary key is the run: a second charge of one run would fail.
    conn.execute("INSERT INTO example_charges (run, order_id, amount) VALUES (%s, %s, %s)",
                 (run, order["order"], order["amount"]))
    return {"charged": order["amount"]}


def ship(order: dict, key: str) -> dict:
    print(f"ship order {order['order']} (idempotency key {key})")
    return {"parcel": f"P-{order['order']}"}


def email(order: dict, parcel: str, key: str) -> None:
    print(f"mail: order {order['order']} shipped as {parcel} (idempotency key {key})")


@durable
def order_job(ctx: Context) -> dict:
    paid = ctx.transaction("charge", lambda conn: charge(conn, ctx.id, ctx.payload))
    ctx.sleep(ctx.payload.get("cool_off", 0))
    parcel = ctx.step("ship", lambda: ship(ctx.payload, ctx.key("ship")))
    ctx.step("email", lambda: email(ctx.payload, parcel["parcel"], ctx.key("email")))
    return {"paid": paid, "parcel": parcel}


def main() -> None:
    dsn = os.environ.get("PG_CLAIM_DSN")
    with psycopg.connect(dsn or "", autocommit=True) as conn:
        conn.execute(SETUP)
        for n in (1, 2, 3):
            conn.execute("SELECT claim.enqueue('example_orders', %s::jsonb)",
                         (f'{{"order": {n}, "amount": {10 * n}, "cool_off": 1}}',))
    # Three runs, each delivered twice (the sleep parks it in between).
    order_job.run(dsn, "example_orders", wait="5 s", max_runs=6)


if __name__ == "__main__":
    main()
