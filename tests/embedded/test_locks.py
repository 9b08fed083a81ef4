"""Queue locks (section 7.3): the rules with a fake clock, then over TCP."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rocketmq_spark.embedded import EmbeddedCluster, FakeClock
from rocketmq_spark.embedded.locks import RebalanceLockManager
from rocketmq_spark.remoting.codes import RequestCode
from rocketmq_spark.remoting.route import MessageQueue
from tests.embedded.wire import Wire, lock_body, req

Q = [MessageQueue("T", "broker-a", i) for i in range(3)]


@pytest.fixture()
def clock() -> FakeClock:
    return FakeClock()


def test_lock_rules(clock: FakeClock) -> None:
    m = RebalanceLockManager(clock)
    assert m.try_lock_batch("g", Q[:2], "A") == Q[:2]
    assert m.try_lock_batch("g", Q, "B") == [Q[2]]           # held by A: left out
    clock.advance(30_000)
    assert m.try_lock_batch("g", Q[:2], "A") == Q[:2]         # renewal refreshes
    clock.advance(60_000)                                     # 60 s since the renewal: not expired yet
    assert m.try_lock_batch("g", Q[:1], "B") == []
    clock.advance(1)                                          # now past 60 s
    assert m.try_lock_batch("g", Q[:1], "B") == Q[:1]         # handed over
    assert m.holder("g", Q[0]) == "B" and m.holder("g", Q[1]) is None  # A's Q1 expired too
    assert m.try_lock_batch("other", Q[:1], "C") == Q[:1]     # groups are independent


def test_unlock_rules(clock: FakeClock) -> None:
    m = RebalanceLockManager(clock)
    m.try_lock_batch("g", Q[:2], "A")
    m.try_lock_batch("g", Q[2:], "B")
    m.unlock_batch("g", Q[2:], "A")                           # not the owner: nothing changes
    assert m.holder("g", Q[2]) == "B"
    m.unlock_batch("g", Q[:2], "A")
    assert m.try_lock_batch("g", Q, "B") == Q
    assert m.group_has_live_lock("g") and not m.group_has_live_lock("nobody")


def lock(w: Wire, client: str, qids: list[int], code: int = RequestCode.LOCK_BATCH_MQ, group: str = "lg"):  # type: ignore[no-untyped-def]
    return w.request(req(code, None, lock_body(group, client, [("T", "broker-a", q) for q in qids])))


def granted(ans) -> list[int]:  # type: ignore[no-untyped-def]
    assert (ans.code, ans.ext_fields) == (0, None)
    return sorted(m["queueId"] for m in json.loads(ans.body)["lockOKMQSet"])


def test_lock_over_tcp_with_fake_clock(tmp_path: Path) -> None:
    clock = FakeClock()
    with EmbeddedCluster(tmp_path, topics={"T": 4}, clock=clock) as c, Wire(c.broker_addrs["broker-a"]) as w:
        assert granted(lock(w, "A", [0, 1])) == [0, 1]
        assert granted(lock(w, "B", [0, 1, 2])) == [2]
        assert granted(lock(w, "A", [0, 1])) == [0, 1]
        ans = lock(w, "A", [0, 1], RequestCode.UNLOCK_BATCH_MQ)
        assert (ans.code, ans.ext_fields, ans.body) == (0, None, b"")
        assert granted(lock(w, "A", [2], RequestCode.LOCK_BATCH_MQ)) == []
        assert lock(w, "A", [2], RequestCode.UNLOCK_BATCH_MQ).code == 0  # not A's: B keeps it
        assert granted(lock(w, "B", [0, 1, 2])) == [0, 1, 2]
        assert granted(lock(w, "A", [0], group="never_registered")) == [0]
        clock.advance(60_001)
        assert granted(lock(w, "A", [0, 1, 2])) == [0, 1, 2]  # B never renewed


def test_bad_lock_body(wire: Wire) -> None:
    ans = wire.request(req(RequestCode.LOCK_BATCH_MQ, None, b"[]"))
    assert ans.code == 1
    ans = wire.request(req(RequestCode.UNLOCK_BATCH_MQ))
    assert ans.code == 1
