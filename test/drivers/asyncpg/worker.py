# A pg_claim worker with asyncpg. Connects with the libpq environment (PGHOST, ...).
import asyncio
import json
from datetime import timedelta

import asyncpg

STALE = "PC001"  # the token is not the live claim (lease lost, item finished)


async def finish(conn, item_id, token, address):
    """The user's write and complete commit together, fenced by assert_token."""
    try:
        async with conn.transaction():
            await conn.execute("SELECT claim.assert_token($1)", token)
            await conn.execute("INSERT INTO sent_mail (item_id, token, address) VALUES ($1, $2, $3)",
                               item_id, token, address)
            # a jsonb argument is a str holding JSON
            await conn.execute("SELECT claim.complete($1, $2)", token, json.dumps([address]))
        return True
    except asyncpg.PostgresError as e:
        if e.sqlstate != STALE:
            raise
        print("stale", token, e.sqlstate)  # rolled back: nothing of this item was written
        return False


async def main():
    conn = await asyncpg.connect()
    last = None
    while True:
        # an interval argument is a timedelta
        row = await conn.fetchrow("SELECT id, token, payload->>'to' AS address"
                                  " FROM claim.claim_next($1, wait => $2)", "emails", timedelta(seconds=1))
        if row is None:
            break  # the queue stayed empty for a second
        item_id, token, address = row["id"], row["token"], row["address"]
        if address is None:
            await conn.execute("SELECT claim.fail($1, $2)", token, "no address")
            print("failed", item_id, token)
            continue
        await conn.execute("SELECT claim.extend($1, $2)", token, timedelta(seconds=30))  # heartbeat
        if await finish(conn, item_id, token, address):
            print("done", item_id, token)
        last = (item_id, token, address)
    if last:
        await finish(conn, *last)  # a finished token again: what a worker that lost its lease sees
    await conn.close()


asyncio.run(main())
