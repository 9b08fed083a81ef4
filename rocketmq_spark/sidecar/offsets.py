"""Queue offsets: min/max/committed per queue, and the first offset at or after a time.

"Never committed" is not what QUERY_CONSUMER_OFFSET says: an Apache broker answers SUCCESS
with 0 for a group that never committed while the queue's min offset is 0. GET_CONSUME_STATS
*without* a topic lists only topics the group has offsets for (with a topic, the broker
lists every queue of it), so a queue it does not list has no committed offset
(``QueueOffsets.committed is None``).

SEARCH_OFFSET_BY_TIMESTAMP answers the message whose store time is *nearest* (4.9.8) or
uses 5.x boundary rules; ``first_offset_at_or_after`` starts there and reads a few
messages around it to land on the first message stored at or after the time.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Iterable, Protocol, Sequence, TypeVar

from rocketmq_spark.errors import BrokerError
from rocketmq_spark.remoting.bodies import ConsumeStats
from rocketmq_spark.remoting.codes import ResponseCode
from rocketmq_spark.remoting.message import MessageExt
from rocketmq_spark.remoting.route import MessageQueue
from rocketmq_spark.sidecar.model import SIDECAR_GROUP
from rocketmq_spark.structs import PullResult, PullStatus, QueueOffsets

# Answers of GET_CONSUME_STATS that mean "this group has no offsets here".
_NO_STATS_CODES = frozenset({ResponseCode.TOPIC_NOT_EXIST, ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                             ResponseCode.SUBSCRIPTION_NOT_EXIST, ResponseCode.CONSUMER_NOT_ONLINE})
_WINDOW = 32
_WORKERS = 8     # queues asked in parallel (each costs 2-3 broker round trips)

T = TypeVar("T")
R = TypeVar("R")


def _pmap(fn: Callable[[T], R], items: Sequence[T]) -> list[R]:
    """``[fn(x) for x in items]``, in order, several at a time when there are many."""
    if len(items) <= 2:
        return [fn(x) for x in items]
    with ThreadPoolExecutor(max_workers=min(_WORKERS, len(items)),
                            thread_name_prefix="sidecar-offsets") as pool:
        return list(pool.map(fn, items))


class OffsetClient(Protocol):
    def min_offset(self, queue: MessageQueue, *, replica: bool = False) -> int: ...
    def max_offset(self, queue: MessageQueue, *, replica: bool = False) -> int: ...
    def query_consumer_offset(self, group: str, queue: MessageQueue) -> int | None: ...
    def consume_stats(self, group: str, topic: str | None = None) -> ConsumeStats: ...
    def search_offset(self, queue: MessageQueue, timestamp_ms: int) -> int: ...
    def pull(self, queue: MessageQueue, offset: int, *, group: str, max_nums: int = 32,
             expression: str = "*", commit_offset: int | None = None, suspend_ms: int = 0,
             timeout: float | None = None) -> PullResult: ...


def _listed_queues(client: OffsetClient, group: str) -> frozenset[MessageQueue]:
    try:
        return frozenset(client.consume_stats(group).offset_table)
    except BrokerError as exc:
        if exc.code in _NO_STATS_CODES:
            return frozenset()
        raise


def queue_offsets(client: OffsetClient, queues: Sequence[MessageQueue],
                  group: str | None = None, *, replica_reads: bool = False) -> list[QueueOffsets]:
    """Min, max and (with ``group``) committed offsets of each queue, in request order;
    ``replica_reads``: min and max from a slave where the master does not answer."""
    listed = _listed_queues(client, group) if group else frozenset()

    def one(q: MessageQueue) -> QueueOffsets:
        committed = None
        if group and q in listed:
            committed = client.query_consumer_offset(group, q)
        return QueueOffsets(q, client.min_offset(q, replica=replica_reads),
                            client.max_offset(q, replica=replica_reads), committed)
    return _pmap(one, list(queues))


def _read(client: OffsetClient, queue: MessageQueue, offset: int, n: int) -> list[MessageExt]:
    res = client.pull(queue, offset, group=SIDECAR_GROUP, max_nums=n, expression="*")
    if res.status is not PullStatus.FOUND:
        return []
    return [m for m in res.messages if m.queue_offset >= offset]


def first_offset_at_or_after(client: OffsetClient, queue: MessageQueue, timestamp_ms: int) -> int:
    """Offset of the first message stored at or after ``timestamp_ms`` (max offset if none)."""
    lo, hi = client.min_offset(queue), client.max_offset(queue)
    if hi <= lo:
        return hi
    off = min(max(client.search_offset(queue, timestamp_ms), lo), hi)
    if off < hi:
        first = _read(client, queue, off, 1)
        if first and first[0].store_timestamp < timestamp_ms:
            return _scan_forward(client, queue, first[0].queue_offset + 1, hi, timestamp_ms)
    return _scan_back(client, queue, off, lo, timestamp_ms)


def _scan_forward(client: OffsetClient, queue: MessageQueue, off: int, hi: int, ts: int) -> int:
    while off < hi:
        msgs = _read(client, queue, off, _WINDOW)
        if not msgs:
            return off
        for m in msgs:
            if m.store_timestamp >= ts:
                return m.queue_offset
        off = msgs[-1].queue_offset + 1
    return hi


def _scan_back(client: OffsetClient, queue: MessageQueue, off: int, lo: int, ts: int) -> int:
    """``off`` is stored at or after ``ts`` (or is the max): step back over earlier messages
    that are too."""
    while off > lo:
        start = max(lo, off - _WINDOW)
        msgs = [m for m in _read(client, queue, start, off - start) if m.queue_offset < off]
        if not msgs:
            return off
        older = [m for m in msgs if m.store_timestamp < ts]
        if older:
            return older[-1].queue_offset + 1
        off = msgs[0].queue_offset
    return off


def search_offsets(client: OffsetClient, queues: Iterable[MessageQueue],
                   timestamp_ms: int) -> list[tuple[MessageQueue, int]]:
    return _pmap(lambda q: (q, first_offset_at_or_after(client, q, timestamp_ms)), list(queues))
