"""Reading what the sink wrote, queue by queue, with two independent clients: the C++
client (PyPI ``rocketmq``, through tests/cppclient.py) and our own client."""

from __future__ import annotations

from typing import Any

from rocketmq_spark.remoting.message import MessageExt
from tests.cluster import ClusterHandle
from tests.cppclient import (CppPullConsumer, MessageQueue, PullResult, PullStatus,
                             ReceivedMessage)
from tests.interop.helpers import read_queue, wait_until


def _pull(consumer: CppPullConsumer, mq: MessageQueue, offset: int) -> PullResult:
    """One pull, repeated while the C++ client answers BROKER_TIMEOUT (its pull may give up
    on a connection its heartbeat is opening; see tests/interop/test_cpp_pull_consumer.py)."""
    def attempt() -> PullResult | None:
        result = consumer.pull(mq, offset=offset, max_nums=32)
        return None if result.status is PullStatus.BROKER_TIMEOUT else result

    return wait_until(attempt, timeout=10.0, what=f"a pull of {mq} that reaches the broker")


def cpp_read(cluster: ClusterHandle, topic: str) -> dict[tuple[str, int], list[ReceivedMessage]]:
    """Every message of ``topic`` per (broker, queue id), in offset order, read by the C++ client."""
    out: dict[tuple[str, int], list[ReceivedMessage]] = {}
    with CppPullConsumer(cluster.namesrv_addr, cluster.unique("cpp_sink_reader")) as consumer:
        queues = wait_until(lambda: consumer.queues(topic), 10.0, f"the C++ client's route of {topic}")
        for mq in queues:
            got: list[ReceivedMessage] = []
            while True:
                result = _pull(consumer, mq, len(got))
                if result.status is not PullStatus.FOUND:
                    break
                assert [m.queue_offset for m in result.messages] == \
                    list(range(len(got), len(got) + len(result.messages)))
                got.extend(result.messages)
            out[(mq.broker_name, mq.queue_id)] = got
    return out


def ours_read(cluster: ClusterHandle, topic: str) -> dict[tuple[str, int], list[MessageExt]]:
    """Every message of ``topic`` per (broker, queue id), in offset order, read by our client."""
    group = cluster.unique("sink_reader")
    return {(mq.broker_name, mq.queue_id): read_queue(cluster.admin, mq, group)
            for mq in sorted(cluster.admin.subscribe_queues(topic, refresh=True))}


def count(cluster: ClusterHandle, topic: str) -> int:
    return sum(cluster.admin.max_offset(mq) for mq in cluster.admin.subscribe_queues(topic, refresh=True))


def write(df: Any, cluster: ClusterHandle, **options: Any) -> None:
    """``df.write.format("rocketmq").mode("append")`` with ``nameServer`` and ``options``."""
    w = df.write.format("rocketmq").mode("append").option("nameServer", cluster.namesrv_addr)
    for k, v in options.items():
        w = w.option(k, str(v))
    w.save()
