"""Client helpers, error mapping, and the SQL the clients rely on through a
transaction-mode pooler (waits, leases, once)."""
from __future__ import annotations

import datetime as dt
import threading
import time
import uuid
from typing import Any, Dict, List

import psycopg
import pytest

import pg_claim
from conftest import connect, scalar


def test_enqueue_in_callers_transaction(dsn: str, client: pg_claim.Client, queue: str) -> None:
    with connect(dsn, autocommit=False) as tx:
        c = pg_claim.Client(tx)
        rolled = c.enqueue(queue, {"a": 1})
        tx.rollback()
        with tx.cursor() as cur:
            kept = pg_claim.Client(cur).enqueue(queue, {"a": 2}, priority=5, group_key="g")
            # Not visible to others before the caller commits.
            assert client.stats(queue)[0].ready == 0
        tx.commit()
    assert rolled != kept
    rows = client.conn.execute("SELECT id, payload, priority, group_key FROM claim.items "
                               "WHERE queue_id = (SELECT queue_id FROM claim.queues "
                               "WHERE name = %s)", (queue,)).fetchall()
    assert rows == [(kept, {"a": 2}, 5, "g")]


def test_enqueue_options_and_batch(client: pg_claim.Client, queue: str) -> None:
    later = dt.datetime.now(dt.timezone.utc) + dt.timedelta(hours=1)
    client.enqueue(queue, None, run_at=later)
    first = client.enqueue(queue, {"k": 1}, dedup_key="d1")
    assert client.enqueue(queue, {"k": 2}, dedup_key="d1") == first
    ids = client.enqueue_batch(queue, [{"i": 1}, {"i": 2}, None], group_keys=["x", "x", None])
    assert len(ids) == 3 and ids == sorted(ids)
    st = client.stats(queue)
    assert len(st) == 1 and (st[0].ready, st[0].scheduled, st[0].claimed) == (4, 1, 0)
    assert any(s.queue == queue for s in client.stats())


def test_item_state_and_cancel(dsn: str, client: pg_claim.Client, queue: str,
                               features: pg_claim.Features) -> None:
    item = client.enqueue(queue, {})
    if not features.has("item_state"):
        with pytest.raises(pg_claim.NotSupported):
            client.item_state(queue, item)
    else:
        st = client.item_state(queue, item)
        assert st is not None and st.state == "ready"
        # Waits inside the server until a worker finishes it.
        done: Dict[str, Any] = {}

        def wait_for_it() -> None:
            with pg_claim.Client(dsn) as other:
                done["state"] = other.item_state(queue, item, wait=10)

        t = threading.Thread(target=wait_for_it)
        t.start()
        time.sleep(0.3)
        pg_claim.Worker(dsn, queue, lambda job: None, wait=0.2, max_jobs=1).run()
        t.join(15)
        # Finished: completed (kept while the queue retains results) or gone.
        assert done["state"] is None or done["state"].state == "completed"
    second = client.enqueue(queue, {})
    if not features.has("cancel"):
        with pytest.raises(pg_claim.NotSupported):
            client.cancel(queue, [second])
    else:
        assert client.cancel(queue, [second]) == 1


def test_error_mapping(dsn: str, client: pg_claim.Client, queue: str) -> None:
    with pytest.raises(pg_claim.UnknownQueue) as ei:
        client.enqueue("no_such_queue_" + uuid.uuid4().hex[:6], {})
    assert ei.value.sqlstate == "42704" and isinstance(ei.value.__cause__, psycopg.Error)
    with pytest.raises(pg_claim.QueueExists):
        client.create_queue(queue)
    with pytest.raises(pg_claim.InvalidName):
        client.create_queue("bad name!")
    with pytest.raises(pg_claim.InvalidArgument) as ei2:
        client.create_queue("q_" + uuid.uuid4().hex[:6], lease="0 s")
    assert ei2.value.sqlstate == "22023" and ei2.value.message
    with pytest.raises(pg_claim.InvalidArgument):
        client.enqueue_batch(queue, [{}, {}], group_keys=["only one"])
    with pytest.raises(pg_claim.NullArgument) as ei3:
        client.enqueue(None, {})  # type: ignore[arg-type]
    assert ei3.value.sqlstate == "22004" and isinstance(ei3.value, pg_claim.InvalidArgument)
    # Stale token.
    with pytest.raises(pg_claim.StaleToken) as ei4:
        client._exec("SELECT claim.complete(%s::bigint)", (1,))
    assert ei4.value.hint
    # Read-only transaction.
    with connect(dsn, autocommit=False) as tx:
        tx.execute("SET TRANSACTION READ ONLY")
        with pytest.raises(pg_claim.ReadOnly):
            pg_claim.Client(tx).enqueue(queue, {})
        tx.rollback()
    # A role without rights.
    role = "pgc_norights_" + uuid.uuid4().hex[:6]
    client.conn.execute(f"CREATE ROLE {role} NOLOGIN")
    try:
        with connect(dsn, autocommit=False) as tx:
            tx.execute(f"SET LOCAL ROLE {role}")
            with pytest.raises(pg_claim.PermissionDenied):
                pg_claim.Client(tx).create_queue("q_" + uuid.uuid4().hex[:6])
            tx.rollback()
    finally:
        client.conn.execute(f"DROP ROLE {role}")
    # Lease permits.
    name = "lease_" + uuid.uuid4().hex[:6]
    client._exec("SELECT claim.lease_acquire(%s, '5 s', permits => 2)", (name,))
    with pytest.raises(pg_claim.PermitMismatch):
        client._exec("SELECT claim.lease_acquire(%s, '5 s', permits => 3)", (name,))
    # The table behind it.
    assert pg_claim.error_class("PC001") is pg_claim.StaleToken
    assert pg_claim.error_class("57014") is pg_claim.Cancelled
    assert pg_claim.error_class("XX000") is pg_claim.PgClaimError
    assert issubclass(pg_claim.NotSupported, pg_claim.PgClaimError)


def test_features_require(features: pg_claim.Features) -> None:
    assert features.has("claim_next") and features.has_arg("claim_next", "wait")
    with pytest.raises(pg_claim.NotSupported):
        features.require("no_such_function")
    with pytest.raises(pg_claim.NotSupported):
        features.require("claim_next", "no_such_argument")


def test_waits_leases_once_through_one_statement(dsn: str, client: pg_claim.Client,
                                                 queue: str) -> None:
    """Each wait is one statement, so it works the same directly and through a
    transaction-mode pooler: a claim waiting in the server is woken by an
    enqueue from another connection; a lease waited for is granted when its
    holder releases it; once() answers once."""
    a, b = connect(dsn), connect(dsn)
    try:
        got: Dict[str, Any] = {}

        def claimer() -> None:
            got["rows"] = a.execute("SELECT id FROM claim.claim_next(%s, wait => '10 s')",
                                    (queue,)).fetchall()

        t = threading.Thread(target=claimer)
        t.start()
        time.sleep(0.3)
        item = client.enqueue(queue, {})
        t.join(15)
        assert got["rows"] == [(item,)]

        name = "mutex_" + uuid.uuid4().hex[:6]
        tok = scalar(a, "SELECT claim.lease_acquire(%s, '30 s')", (name,))
        assert tok is not None
        assert scalar(b, "SELECT claim.lease_acquire(%s, '30 s')", (name,)) is None
        timer = threading.Timer(0.3, lambda: a.execute("SELECT claim.lease_release(%s, %s)",
                                                       (name, tok)))
        timer.start()
        tok2 = scalar(b, "SELECT claim.lease_acquire(%s, '30 s', wait => '10 s')", (name,))
        timer.join()
        assert tok2 is not None and tok2 > tok

        key = "once_" + uuid.uuid4().hex[:6]
        assert scalar(a, "SELECT claim.once(%s)", (key,)) is True
        assert scalar(b, "SELECT claim.once(%s)", (key,)) is False
    finally:
        a.close()
        b.close()


def test_after_pause_resume(dsn: str, client: pg_claim.Client, queue: str,
                            features: pg_claim.Features) -> None:
    if not (features.has_arg("enqueue", "after") and features.has("pause")):
        with pytest.raises(pg_claim.NotSupported):
            if not features.has_arg("enqueue", "after"):
                client.enqueue(queue, {}, after=[1])
            else:
                client.pause(queue)
        return
    first = client.enqueue(queue, {"step": 1})
    second = client.enqueue(queue, {"step": 2}, after=[first])
    third, = client.enqueue_batch(queue, [{"step": 3}], after=[second])
    order: List[int] = []
    client.pause(queue)
    stats = pg_claim.Worker(dsn, queue, lambda job: order.append(job.id), wait=0.3,
                            burst=True).run()
    assert stats.claimed == 0 and order == []          # paused: nothing delivered
    client.resume(queue)
    pg_claim.Worker(dsn, queue, lambda job: order.append(job.id), wait=0.5, burst=True).run()
    assert order == [first, second, third]             # each after the one it waits for


def test_metrics(client: pg_claim.Client, queue: str, features: pg_claim.Features) -> None:
    if not features.has("metrics"):
        with pytest.raises(pg_claim.NotSupported):
            client.metrics()
        return
    client.enqueue(queue, {})
    rows = [r for r in client.metrics() if r.get("queue") == queue]
    assert len(rows) == 1


def test_fair_key_and_weight(client: pg_claim.Client, queue: str) -> None:
    if not client.features.has("set_fair_weight"):
        pytest.skip("the server's pg_claim has no fair queues")
    client.conn.execute("SELECT claim.alter_queue(%s, fair => true)", (queue,))
    client.set_fair_weight(queue, "heavy", 3)
    client.enqueue_batch(queue, [{"k": "heavy"}] * 40, fair_key="heavy")
    client.enqueue_batch(queue, [{"k": "light"}] * 40, fair_key="light")
    one = client.enqueue(queue, {"k": "solo"}, fair_key="solo")
    rows = client.conn.execute("SELECT payload->>'k' FROM claim.claim_next(%s, n => 9)",
                               (queue,)).fetchall()
    got = [r[0] for r in rows]
    # Weights 3, 1, 1 over 9 claims: every key is served, heavy the most.
    assert got.count("solo") == 1 and got.count("light") >= 1
    assert got.count("heavy") > got.count("light")
    keys = {r[0]: r[1] for r in client.conn.execute(
        "SELECT fair_key, weight FROM claim.fair_stats WHERE queue = %s AND fair_key IS NOT NULL",
        (queue,)).fetchall()}
    assert keys == {"heavy": 3, "light": 1, "solo": 1}
    assert one > 0
