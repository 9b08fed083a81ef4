"""read_range when the broker stops answering mid-range: it waits and goes on where it was,
on the address the caller's ``reconnect`` gives (pure logic, in-memory queues)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from rocketmq_spark.errors import RequestTimeout, TransportError
from rocketmq_spark.sidecar.errors import DataLossError
from rocketmq_spark.sidecar.model import PullSpec
from rocketmq_spark.sidecar.pull import BrokerUnavailable, PullPolicy, read_chunks
from tests.sidecar.fakes import Q, FakeQueue, make_messages, rows
from tests.sidecar.test_pull_logic import FakeClock


@dataclass
class Dying(FakeQueue):
    """A FakeQueue whose broker stops answering after ``answers`` pulls."""

    answers: int = 10**9
    error: type[Exception] = TransportError
    address: str = "master:10911"
    replica: bool = False
    closed: bool = False
    served: list[int] = field(default_factory=list)

    def pull(self, queue, offset, **kw):  # type: ignore[no-untyped-def, override]
        if self.answers <= 0:
            raise self.error(f"cannot connect to {self.address}")
        self.answers -= 1
        self.served.append(offset)
        return super().pull(queue, offset, **kw)

    def close(self) -> None:
        self.closed = True


def spec(start: int, end: int, wait_ms: int = 60_000, batch: int = 8) -> PullSpec:
    return PullSpec(Q, start, end, pull_batch_size=batch, broker_unavailable_timeout_ms=wait_ms)


def test_a_master_that_dies_mid_range_is_read_on_from_its_slave_once_each() -> None:
    messages = make_messages(100)
    master = Dying(messages, answers=3)
    slave = Dying(messages, address="slave:10921", replica=True)
    clock = FakeClock()
    calls: list[tuple[str, str]] = []

    def reconnect(failed, exc):  # type: ignore[no-untyped-def]
        calls.append((failed.address, str(exc)))
        return slave
    got = rows(_read(master, spec(5, 90), clock, reconnect), spec(5, 90))
    assert got == list(range(5, 90))                     # every offset once, in order
    assert master.served == [5, 13, 21] and slave.served[0] == 29
    assert calls == [("master:10911", "cannot connect to master:10911")]
    assert clock.sleeps and clock.sleeps[0] == pytest.approx(0.1)


def _read(client, s: PullSpec, clock: FakeClock, reconnect):  # type: ignore[no-untyped-def]
    policy = PullPolicy(clock=clock, sleep=clock.sleep)
    for chunk in read_chunks(client, s, policy, reconnect):
        yield from chunk


def test_reconnects_until_the_broker_is_back_then_goes_on() -> None:
    messages = make_messages(40)
    first = Dying(messages, answers=2, error=RequestTimeout)
    back = Dying(messages)
    clock = FakeClock()
    attempts = []

    def reconnect(failed, exc):  # type: ignore[no-untyped-def]
        attempts.append(clock.now)
        if len(attempts) < 4:
            raise TransportError("connection refused")
        return back
    assert rows(_read(first, spec(0, 40), clock, reconnect), spec(0, 40)) == list(range(40))
    assert len(attempts) == 4
    assert clock.sleeps[:4] == pytest.approx([0.1, 0.2, 0.4, 0.8])   # pauses double


def test_past_the_timeout_the_read_fails_naming_the_option() -> None:
    messages = make_messages(40)
    clock = FakeClock()

    def reconnect(failed, exc):  # type: ignore[no-untyped-def]
        raise TransportError("connection refused")
    with pytest.raises(BrokerUnavailable) as info:
        list(_read(Dying(messages, answers=1), spec(0, 40, wait_ms=5_000), clock, reconnect))
    text = str(info.value)
    assert "brokerUnavailableTimeoutMs" in text and "5000" in text and "offset 8" in text
    assert 5.0 <= clock.now < 7.5


def test_without_a_wait_the_first_failure_fails_the_read() -> None:
    clock = FakeClock()
    with pytest.raises(TransportError) as info:
        list(_read(Dying(make_messages(40), answers=1), spec(0, 40, wait_ms=0), clock,
                   lambda failed, exc: pytest.fail("no reconnect without a wait")))
    assert not isinstance(info.value, BrokerUnavailable)


@dataclass
class Behind(Dying):
    """A slave that has replicated only up to ``upto``."""

    upto: int = 0

    def pull(self, queue, offset, **kw):  # type: ignore[no-untyped-def, override]
        self.visible = self.upto
        return super().pull(queue, offset, **kw)


def test_a_slave_behind_the_range_end_is_left_for_the_master_once_it_is_back() -> None:
    messages = make_messages(60)
    master = Dying(messages, answers=1)
    slave = Behind(messages, address="slave:10921", replica=True, upto=30)
    back = Dying(messages)
    clock = FakeClock()
    order = [slave, back]

    def reconnect(failed, exc):  # type: ignore[no-untyped-def]
        return order.pop(0)
    policy = PullPolicy(clock=clock, sleep=clock.sleep, stall_timeout=2.0)
    got = rows((b for c in read_chunks(master, spec(0, 60), policy, reconnect) for b in c), spec(0, 60))
    assert got == list(range(60))
    assert slave.served[0] == 8 and max(slave.served) == 30 and back.served[0] == 30


def test_what_a_master_lacks_is_data_loss_not_a_failover() -> None:
    fq = Dying(make_messages(20))
    fq.visible = 10                       # the master shows 10 messages but the range asks 15
    clock = FakeClock()
    with pytest.raises(DataLossError) as info:
        list(_read(fq, spec(0, 15), clock, lambda failed, exc: pytest.fail("a master's gap is not a failover")))
    assert info.value.beyond_max
