"""pg_claim.coordination: a session kept alive in the background, election,
barrier, latch and a resuming watch."""
from __future__ import annotations

import threading
import time
import uuid

import pytest

from pg_claim.coordination import Session, watch
from pg_claim.errors import StaleToken


def _name(what: str) -> str:
    return f"py/{what}/{uuid.uuid4().hex[:8]}"


def test_session_keeps_itself_alive_and_leads(dsn: str, conn) -> None:
    name = _name("leader")
    with Session(dsn, ttl=0.6, holder="py-a") as s:
        lead = s.elect(name)
        assert lead is not None and lead.epoch > s.id
        time.sleep(1.0)  # past its ttl: the background keepalives kept it
        assert not s.lost.is_set()
        row = conn.execute("SELECT holder, epoch FROM claim.leader(%s)", (name,)).fetchone()
        assert row == ("py-a", lead.epoch)
        with Session(dsn, ttl=5, holder="py-b") as other:
            assert other.elect(name) is None
    # closing released the leadership
    assert conn.execute("SELECT count(*) FROM claim.leader(%s)", (name,)).fetchone()[0] == 0


def test_lost_session_calls_back(dsn: str, conn) -> None:
    lost = threading.Event()
    s = Session(dsn, ttl=5, on_lost=lambda _s: lost.set())
    conn.execute("SELECT claim.session_close(%s)", (s.id,))  # ended behind its back
    s.ttl = 0.3  # the next keepalive comes soon
    assert lost.wait(10)
    assert s.close() == 0
    with pytest.raises(StaleToken):
        with Session(dsn) as t:
            conn.execute("SELECT claim.session_close(%s)", (t.id,))
            t.elect(_name("gone"))


def test_barrier_latch_and_watch(dsn: str) -> None:
    prefix = _name("w")
    with Session(dsn) as s, Session(dsn) as t:
        orders = []
        th = threading.Thread(target=lambda: orders.append(t.barrier(prefix + "/b", 2, 10)))
        th.start()
        time.sleep(0.2)
        orders.append(s.barrier(prefix + "/b", 2, 10))
        th.join()
        assert sorted(orders) == [1, 2]
        s.latch(prefix + "/l", 1)
        assert s.latch_wait(prefix + "/l", 0.05) is False
        assert t.count_down(prefix + "/l") == 0
        assert s.latch_wait(prefix + "/l", 5) is True
    stop = threading.Event()
    seen = []
    for change in watch(dsn, prefix, 0, wait=0.2, stop=stop):
        seen.append((change.name, change.event))
        if len(seen) == 2:
            stop.set()
    assert seen == [(prefix + "/l", "set"), (prefix + "/l", "count_down")]
    # resuming after the last revision: nothing more
    last = max(c.revision for c in watch(dsn, prefix, 0, wait=0, stop=_once()))
    assert list(watch(dsn, prefix, last, wait=0, stop=_once())) == []


class _once(threading.Event):
    """A stop event that lets the watch run one statement."""

    def is_set(self) -> bool:
        done = super().is_set()
        self.set()
        return done


def test_lock_is_held_with_the_session(dsn: str, conn) -> None:
    name = _name("lock")
    with Session(dsn, ttl=5, holder="py-a") as s:
        with s.lock(name) as token:
            assert token is not None
            assert conn.execute("SELECT claim.lease_acquire(%s, '10 s')", (name,)).fetchone()[0] is None
            conn.execute("SELECT claim.lease_assert(%s, %s)", (name, token))
        # released when the block ends
        t2 = conn.execute("SELECT claim.lease_acquire(%s, '10 s')", (name,)).fetchone()[0]
        assert t2 is not None and t2 > token


def test_shared_lock_is_held_by_many(dsn: str, conn) -> None:
    name = _name("shared")
    with Session(dsn, ttl=5, holder="py-a") as a, Session(dsn, ttl=5, holder="py-b") as b:
        with a.shared_lock(name) as ta, b.shared_lock(name) as tb:
            assert ta is not None and tb is not None and tb > ta
            # the exclusive mode waits for both
            with a.lock(name) as tx:
                assert tx is None
            conn.execute("SELECT claim.lease_assert(%s, %s)", (name, tb))
        # both released when the blocks end
        with a.lock(name) as tx:
            assert tx is not None and tx > tb
