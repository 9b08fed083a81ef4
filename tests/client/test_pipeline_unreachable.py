"""SendPipeline when a queue's broker cannot be reached (no connection, no master in the
route: nothing sent): unkeyed requests go to another broker at once, keyed ones wait for
their own queue within ``unreachable_timeout`` and then fail naming the queue and the
option (a scripted sender; pure logic)."""

from __future__ import annotations

import pytest

from rocketmq_spark.client.pipeline import PipelineFailed, SendPipeline
from rocketmq_spark.errors import BrokerError, BrokerUnavailable, ConnectError
from rocketmq_spark.remoting.route import MessageQueue
from rocketmq_spark.sharding import select_queue
from rocketmq_spark.structs import Message, SendResult

QS = [MessageQueue("t", b, i) for b in ("broker-a", "broker-b") for i in range(2)]


class Answered:
    def __init__(self, result: SendResult) -> None:
        self._result = result

    def result(self) -> SendResult:
        return self._result


class Restarting:
    """broker-a refuses connections (or has no master in the route) for its first ``down``
    attempts; broker-b always answers."""

    def __init__(self, down: int, error: Exception | None = None) -> None:
        self.down = down
        self.error = error or ConnectError("cannot connect to 127.0.0.1:10911: [Errno 111] Connection refused")
        self.stored: dict[MessageQueue, list[bytes]] = {}
        self.refused = 0
        self.routes = 0

    def send_queues(self, topic: str, *, keyed: bool = False) -> list[MessageQueue]:
        return QS

    def route(self, topic: str, *, refresh: bool = False) -> None:
        self.routes += 1

    def _send(self, queue: MessageQueue, messages: list[Message]) -> Answered:
        if queue.broker_name == "broker-a" and self.down > 0:
            self.down -= 1
            self.refused += 1
            raise self.error
        stored = self.stored.setdefault(queue, [])
        first = len(stored)
        stored.extend(m.body for m in messages)
        return Answered(SendResult("SEND_OK", "id", "off", queue, first))

    def send_async(self, message, *, queue, producer_group="g", compression=None):  # type: ignore[no-untyped-def]
        return self._send(queue, [message])

    def send_batch_async(self, messages, *, queue, producer_group="g", compression=None):  # type: ignore[no-untyped-def]
        return self._send(queue, list(messages))


def _key_on(broker: str) -> str:
    return next(k for k in (f"k{i}" for i in range(100)) if select_queue(k, QS).broker_name == broker)


def test_unkeyed_messages_go_to_another_broker_at_once() -> None:
    s = Restarting(down=10**6)
    pipe = SendPipeline(s, producer_group="g", batch_size=4, unreachable_timeout=0)
    for i in range(40):
        pipe.add(Message("t", b"m%d" % i), None, i)
    assert pipe.close() == 40
    assert {q.broker_name for q in s.stored} == {"broker-b"}
    assert sorted(b for bs in s.stored.values() for b in bs) == sorted(b"m%d" % i for i in range(40))


@pytest.mark.parametrize("error", [ConnectError("cannot connect to 127.0.0.1:10911"),
                                   BrokerError(14, "no master address known for broker 'broker-a'")])
def test_a_keyed_message_waits_for_its_broker_and_keeps_its_queue_and_order(error: Exception) -> None:
    key = _key_on("broker-a")
    s = Restarting(down=3, error=error)
    pipe = SendPipeline(s, producer_group="g", batch_size=2, unreachable_timeout=30)
    for i in range(10):
        pipe.add(Message("t", b"m%d" % i), key, i)
    assert pipe.close() == 10
    assert s.stored == {select_queue(key, QS): [b"m%d" % i for i in range(10)]}   # its queue, in order
    assert s.refused == 3 and s.routes >= 2                     # the route asked again meanwhile


def test_past_the_bound_a_keyed_message_fails_naming_the_queue_and_the_option() -> None:
    key = _key_on("broker-a")
    q = select_queue(key, QS)
    s = Restarting(down=10**6)
    pipe = SendPipeline(s, producer_group="g", unreachable_timeout=0.5)
    pipe.add(Message("t", b"m"), key, "row 1")
    with pytest.raises(PipelineFailed) as info:
        pipe.close()
    err = info.value.cause()
    assert isinstance(err, BrokerUnavailable)
    text = str(err)
    assert f"t/broker-a/{q.queue_id}" in text and "broker broker-a" in text
    assert "brokerUnavailableTimeoutMs" in text and "500" in text and "Connection refused" in text


def test_without_a_bound_a_keyed_message_fails_at_once() -> None:
    key = _key_on("broker-a")
    s = Restarting(down=10**6)
    pipe = SendPipeline(s, producer_group="g", unreachable_timeout=0)
    pipe.add(Message("t", b"m"), key, 1)
    with pytest.raises(PipelineFailed) as info:
        pipe.close()
    assert isinstance(info.value.cause(), ConnectError) and s.refused == 1
