"""pg_claim.durable: durable runs on claim.step / step_done (docs/steps.md)."""
from __future__ import annotations

import uuid
from typing import Any, Dict, Iterator

import psycopg
import pytest

from conftest import connect

from pg_claim.durable import Context, durable


@pytest.fixture
def steps_queue(dsn: str) -> Iterator[str]:
    with connect(dsn) as c:
        if c.execute("SELECT to_regprocedure('claim.step(bigint, text)') IS NULL").fetchone()[0]:
            pytest.skip("the server's pg_claim has no durable steps (0.4.0)")
        name = "d_" + uuid.uuid4().hex[:10]
        c.execute("SELECT claim.create_queue(%s, lease => '30 s', retain => '1 hour')", (name,))
        c.execute(f"CREATE TABLE {name}_fx (item bigint, step text)")
    yield name
    with connect(dsn) as c:
        c.execute("SELECT claim.drop_queue(%s)", (name,))
        c.execute(f"DROP TABLE IF EXISTS {name}_fx")


def test_charge_ship_email_resumes_after_a_failure(dsn: str, steps_queue: str) -> None:
    calls: Dict[str, int] = {"ship": 0, "email": 0}
    fx = f"{steps_queue}_fx"

    def charge(conn: "psycopg.Connection[Any]", item: int) -> Any:
        conn.execute(f"INSERT INTO {fx} VALUES (%s, 'charge')", (item,))
        return {"ok": True}

    @durable
    def job(ctx: Context) -> Any:
        ctx.transaction("charge", lambda conn: charge(conn, ctx.id))

        def ship() -> str:
            calls["ship"] += 1
            if calls["ship"] == 1:
                raise RuntimeError("shipper down")
            return "P-1"

        parcel = ctx.step("ship", ship)
        ctx.step("email", lambda: calls.__setitem__("email", calls["email"] + 1))
        return {"parcel": parcel}

    with connect(dsn) as c:
        item = c.execute("SELECT claim.enqueue(%s, '{}')", (steps_queue,)).fetchone()[0]
        c.execute("UPDATE claim.queues SET backoff = '0' WHERE name = %s", (steps_queue,))
        assert job.run_one(c, steps_queue, wait="5 s") == "failed"
        assert job.run_one(c, steps_queue, wait="5 s") == "completed"
        assert c.execute(f"SELECT count(*) FROM {fx}").fetchone()[0] == 1
        assert calls == {"ship": 2, "email": 1}
        state = c.execute("SELECT state, result, steps FROM claim.item_state(%s, %s)",
                          (steps_queue, item)).fetchone()
        assert state[0] == "completed" and state[1] == {"parcel": "P-1"}
        assert set(state[2]) == {"charge", "ship", "email"} and state[2]["ship"] == "P-1"


def test_sleep_parks_and_does_not_sleep_again(dsn: str, steps_queue: str) -> None:
    seen = []

    @durable
    def job(ctx: Context) -> Any:
        seen.append(ctx.attempt)
        ctx.sleep(0.2)
        return "woke"

    with connect(dsn) as c:
        item = c.execute("SELECT claim.enqueue(%s, '{}')", (steps_queue,)).fetchone()[0]
        assert job.run_one(c, steps_queue, wait="5 s") == "suspended"
        assert c.execute("SELECT state FROM claim.item_state(%s, %s)",
                         (steps_queue, item)).fetchone()[0] == "scheduled"
        assert job.run_one(c, steps_queue, wait="10 s") == "completed"
        assert seen == [1, 1]   # the sleep did not count as an attempt


def test_await_event_and_children(dsn: str, steps_queue: str) -> None:
    @durable
    def job(ctx: Context) -> Any:
        paid = ctx.await_event(f"paid:{ctx.id}", timeout="1 hour")
        kids = ctx.step("fan-out", lambda: [
            ctx.conn.execute("SELECT claim.enqueue(%s, %s::jsonb)",
                             (ctx.queue, f'{{"kid": {k}}}')).fetchone()[0] for k in (1, 2)])
        return {"paid": paid, "kids": ctx.await_children(kids)}

    @durable
    def kid(ctx: Context) -> Any:
        return ctx.payload["kid"] * 10

    with connect(dsn) as c:
        item = c.execute("SELECT claim.enqueue(%s, '{}')", (steps_queue,)).fetchone()[0]
        assert job.run_one(c, steps_queue, wait="5 s") == "suspended"
        c.execute("SELECT claim.emit_event(%s, '{\"amount\": 5}')", (f"paid:{item}",))
        assert job.run_one(c, steps_queue, wait="5 s") == "suspended"   # waits for the kids
        assert kid.run_one(c, steps_queue, wait="5 s") == "completed"
        assert kid.run_one(c, steps_queue, wait="5 s") == "completed"
        assert job.run_one(c, steps_queue, wait="5 s") == "completed"
        result = c.execute("SELECT result FROM claim.item_state(%s, %s)",
                           (steps_queue, item)).fetchone()[0]
        assert result == {"paid": {"amount": 5}, "kids": [10, 20]}


def test_a_stale_run_records_nothing(dsn: str, steps_queue: str) -> None:
    @durable
    def job(ctx: Context) -> Any:
        ctx.conn.execute("SELECT claim.release(%s)", (ctx.token,))   # the claim is lost
        return ctx.step("a", lambda: 1)

    with connect(dsn) as c:
        c.execute("SELECT claim.enqueue(%s, '{}')", (steps_queue,))
        assert job.run_one(c, steps_queue, wait="5 s") == "stale"
        assert c.execute("SELECT count(*) FROM claim.item_steps WHERE queue = %s",
                         (steps_queue,)).fetchone()[0] == 0
