# A pg_claim worker with psycopg 3. Connects with the libpq environment (PGHOST, ...).
import psycopg
from psycopg.types.json import Jsonb

STALE = "PC001"  # the token is not the live claim (lease lost, item finished)


def finish(conn, item_id, token, address):
    """The user's write and complete commit together, fenced by assert_token."""
    try:
        with conn.transaction():
            conn.execute("SELECT claim.assert_token(%s)", (token,))
            conn.execute("INSERT INTO sent_mail (item_id, token, address) VALUES (%s, %s, %s)",
                         (item_id, token, address))
            conn.execute("SELECT claim.complete(%s, %s)", (token, Jsonb([address])))
        return True
    except psycopg.Error as e:
        if e.sqlstate != STALE:
            raise
        print("stale", token, e.sqlstate)  # rolled back: nothing of this item was written
        return False


with psycopg.connect(autocommit=True) as conn:
    last = None
    while True:
        row = conn.execute("SELECT id, token, payload->>'to' FROM claim.claim_next(%s, wait => %s)",
                           ("emails", "1 second")).fetchone()
        if row is None:
            break  # the queue stayed empty for a second
        item_id, token, address = row
        if address is None:
            conn.execute("SELECT claim.fail(%s, %s)", (token, "no address"))
            print("failed", item_id, token)
            continue
        conn.execute("SELECT claim.extend(%s, %s)", (token, "30 seconds"))  # heartbeat
        if finish(conn, item_id, token, address):
            print("done", item_id, token)
        last = (item_id, token, address)
    if last:
        finish(conn, *last)  # a finished token again: what a worker that lost its lease sees
