"""Shared bodies and read-back helpers for the C++ client interop tests.

Our own client (``ClusterHandle.admin``) is the independent witness: what the C++ client
sends is read back with plain pulls, what the C++ client consumes is sent with our client.
"""

from __future__ import annotations

from collections import Counter
from typing import Iterable

from rocketmq_spark.client import MQClient
from rocketmq_spark.errors import BrokerError
from rocketmq_spark.remoting.codes import MessageSysFlag, ResponseCode
from rocketmq_spark.remoting.message import MessageExt
from rocketmq_spark.remoting.route import MessageQueue
from rocketmq_spark.structs import PullStatus
from tests.cluster import ClusterHandle
from tests.cppclient import CppClientError, CppProducer
from tests.waiting import wait_until


COMPRESS_AT = 4096  # both clients compress single bodies of this many bytes or more

# NUL bytes first, in the middle and last, and every byte value.
BINARY = b"\x00lead\x00\xff\xfe\x01\x02 mid \x00" + bytes(range(256)) + b"\x00"


def binary(label: str) -> bytes:
    """A unique binary body full of NUL bytes."""
    return label.encode() + BINARY


def big(label: str, size: int = 6000) -> bytes:
    """A unique compressible body of ``size`` (> 4 KiB) bytes with NUL bytes in it."""
    unit = label.encode() + b"\x00" + bytes(range(256))
    return (unit * (size // len(unit) + 1))[:size]


def is_compressed(message: MessageExt) -> bool:
    return bool(message.sys_flag & MessageSysFlag.COMPRESSED)


def read_queue(client: MQClient, queue: MessageQueue, group: str, start: int = 0) -> list[MessageExt]:
    """Every message of ``queue`` from ``start`` to its current end, in offset order."""
    out: list[MessageExt] = []
    offset = start
    while True:
        result = client.pull(queue, offset, group=group, max_nums=32)
        if result.status is not PullStatus.FOUND:
            return out
        out.extend(result.messages)
        if result.next_begin_offset <= offset:
            raise AssertionError(f"pull of {queue} at {offset} did not advance: {result}")
        offset = result.next_begin_offset


def read_topic(cluster: ClusterHandle, topic: str, count: int, timeout: float = 10.0) -> list[MessageExt]:
    """Every message of ``topic`` once it holds at least ``count``, ordered by queue and offset."""
    group = cluster.unique("reader")

    def everything() -> list[MessageExt] | None:
        try:
            queues = sorted(cluster.admin.subscribe_queues(topic, refresh=True))
        except BrokerError as exc:  # e.g. a retry topic the NameServer does not route yet
            if exc.code != ResponseCode.TOPIC_NOT_EXIST:
                raise
            return None
        found = [m for mq in queues for m in read_queue(cluster.admin, mq, group)]
        return found if len(found) >= count else None

    return wait_until(everything, timeout, f"{count} messages in {topic}", poll=0.1)


def single(messages: Iterable[MessageExt], body: bytes) -> MessageExt:
    """The one message whose payload is ``body``."""
    found = [m for m in messages if m.payload() == body]
    assert len(found) == 1, f"{len(found)} messages with body {body[:40]!r}..."
    return found[0]


def same_bodies(got: Iterable[bytes], want: Iterable[bytes]) -> bool:
    """Equal as multisets (every body exactly as often as sent)."""
    return Counter(list(got)) == Counter(list(want))  # list(): a dict's keys, not its values


def warm_up(producer: CppProducer, rocketmq: ClusterHandle) -> None:
    """Warm-up sends, one per queue of a topic on every broker, repeated until they pass
    (see ``cpp_producer`` in conftest.py): after this the C++ producer's connections are all made."""
    topic = rocketmq.create_topic("cpp_warmup", queues=1)
    queues = len(rocketmq.admin.publish_queues(topic, refresh=True))

    def sent(arg: int) -> bool:
        try:
            producer.send_orderly(topic, b"warm-up", sharding_arg=arg)
            return True
        except CppClientError:
            return False

    for arg in range(queues):
        wait_until(lambda: sent(arg), timeout=10.0, what=f"a warm-up send to queue #{arg} of {topic}")
