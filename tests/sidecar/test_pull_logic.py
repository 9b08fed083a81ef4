"""read_range: the loop over one queue's range, against an in-memory queue (pure logic)."""

from __future__ import annotations

import pytest

from rocketmq_spark.errors import RequestTimeout
from rocketmq_spark.sidecar.errors import DataLossError
from rocketmq_spark.sidecar.model import PullSpec
from rocketmq_spark.sidecar.pull import PullPolicy, read_range
from tests.sidecar.fakes import Q, FakeQueue, make_messages, rows


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.sleeps.append(s)
        self.now += s


def policy(clock: FakeClock, stall: float = 1.0) -> PullPolicy:
    return PullPolicy(stall_timeout=stall, clock=clock, sleep=clock.sleep)


def offsets(client, spec: PullSpec, pull_policy: PullPolicy = PullPolicy()) -> list[int]:  # type: ignore[no-untyped-def]
    """The offsets of the rows ``read_range`` delivers for ``spec``."""
    return rows(read_range(client, spec, pull_policy), spec)


def test_reads_exactly_the_range_across_pulls() -> None:
    fq = FakeQueue(make_messages(100))
    got = offsets(fq, PullSpec(Q, 10, 77, pull_batch_size=16))
    assert got == list(range(10, 77))
    assert [c[0] for c in fq.calls] == [10, 26, 42, 58, 74]


def test_empty_range_does_not_pull() -> None:
    fq = FakeQueue(make_messages(5))
    assert list(read_range(fq, PullSpec(Q, 3, 3))) == []
    assert fq.calls == []


def test_tag_filter_gaps_are_not_data_loss() -> None:
    fq = FakeQueue(make_messages(60, tags=["TagA", "TagB", "TagC", "TagC", "TagC", "TagC", "TagC",
                                           "TagC", "TagC", "TagC"]))
    got = offsets(fq, PullSpec(Q, 0, 60, sub_expression="TagA || TagB", pull_batch_size=4))
    assert got == [i for i in range(60) if i % 10 in (0, 1)]


def test_below_min_fails_naming_queue_and_offsets() -> None:
    fq = FakeQueue(make_messages(20), min_offset=8)
    with pytest.raises(DataLossError) as e:
        list(read_range(fq, PullSpec(Q, 3, 15)))
    assert "orders/broker-a/0" in str(e.value) and "[3, 8)" in str(e.value)
    assert not e.value.beyond_max


def test_below_min_skips_when_allowed(caplog: pytest.LogCaptureFixture) -> None:
    fq = FakeQueue(make_messages(20), min_offset=8)
    got = offsets(fq, PullSpec(Q, 3, 15, fail_on_data_loss=False))
    assert got == list(range(8, 15))
    assert "[3, 8)" in caplog.text


def test_whole_range_below_min_skipped() -> None:
    fq = FakeQueue(make_messages(20), min_offset=18)
    assert offsets(fq, PullSpec(Q, 3, 15, fail_on_data_loss=False)) == []


def test_beyond_max_fails_or_stops() -> None:
    fq = FakeQueue(make_messages(5))
    with pytest.raises(DataLossError) as e:
        list(read_range(fq, PullSpec(Q, 7, 9)))
    assert e.value.beyond_max and "max offset is 5" in str(e.value)
    assert list(read_range(fq, PullSpec(Q, 7, 9, fail_on_data_loss=False))) == []


def test_not_yet_visible_messages_are_waited_for() -> None:
    fq = FakeQueue(make_messages(10), visible=4)
    clock = FakeClock()
    calls = 0

    def pull(*a, **kw):
        nonlocal calls
        calls += 1
        if calls == 4:
            fq.visible = None        # the rest becomes readable
        return fq.pull(*a, **kw)

    fq_pull = type("P", (), {"pull": staticmethod(pull)})()
    got = offsets(fq_pull, PullSpec(Q, 0, 10), policy(clock))
    assert got == list(range(10))
    assert clock.sleeps and clock.sleeps == sorted(clock.sleeps)   # backoff grows


def test_stall_beyond_max_is_data_loss_after_the_deadline() -> None:
    fq = FakeQueue(make_messages(10), visible=4)
    clock = FakeClock()
    with pytest.raises(DataLossError) as e:
        list(read_range(fq, PullSpec(Q, 0, 10), policy(clock, stall=2.0)))
    assert clock.now >= 2.0 and "[4, 10)" in str(e.value)
    clock2 = FakeClock()
    got = offsets(fq, PullSpec(Q, 0, 10, fail_on_data_loss=False), policy(clock2))
    assert got == [0, 1, 2, 3]


def test_stall_with_messages_counted_is_a_timeout() -> None:
    class Stuck:
        def pull(self, queue, offset, **kw):
            from rocketmq_spark.structs import PullResult, PullStatus
            return PullResult(PullStatus.NO_NEW_MSG, offset, 0, 10)

    clock = FakeClock()
    with pytest.raises(RequestTimeout, match="offset 0"):
        list(read_range(Stuck(), PullSpec(Q, 0, 10), policy(clock)))


def test_found_drops_messages_at_or_after_end() -> None:
    fq = FakeQueue(make_messages(50))
    got = offsets(fq, PullSpec(Q, 0, 5, pull_batch_size=32))
    assert got == [0, 1, 2, 3, 4]
    assert len(fq.calls) == 1
