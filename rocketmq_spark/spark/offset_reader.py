"""Driver side: what the brokers say about queues and offsets, through the sidecar.

Turns the user's requested positions (``offsets.StartSpec`` / ``EndSpec``) into concrete
offsets per queue; the JSON sentinels (-2 earliest, -1 latest) are resolved here and go no
further. Rules:

* ``group``: the consumer group's committed offset; a queue the group never committed
  starts at latest (RocketMQ's CONSUME_FROM_LAST_OFFSET).
* ``earliest`` / ``latest``: the queue's min / max offset.
* timestamp: the first message stored at or after it (the sidecar's SearchOffsets).
* JSON: as written; subscribed queues it does not list start at earliest (like a queue
  that appears while the query runs); as an *end*, unlisted queues end at latest.

The queue list is cached and re-read every ``queueRefreshIntervalMs`` (Spark asks for
the latest offsets many times a second when idle); offsets come in one GetOffsets call.
When a NameServer or broker does not answer (``transient``), the last queue list is kept,
and ``reachable_offsets`` asks broker by broker, so the others' queues go on.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Callable, Iterable, Mapping, Sequence

from rocketmq_spark.errors import BrokerError, ConfigError, RocketMQError
from rocketmq_spark.remoting.codes import ResponseCode
from rocketmq_spark.remoting.route import MessageQueue
from rocketmq_spark.spark import link
from rocketmq_spark.spark.offsets import (EARLIEST, LATEST, EarliestStart, EndSpec, GroupStart,
                                          LatestEnd, LatestStart, QueueOffsetMap,
                                          SpecificOffsets, StartSpec, TimestampEnd,
                                          TimestampStart)
from rocketmq_spark.sidecar.errors import SidecarUnavailable
from rocketmq_spark.spark.options import SourceOptions
from rocketmq_spark.structs import QueueOffsets

if TYPE_CHECKING:
    from rocketmq_spark.sidecar.client import SidecarClient

__all__ = ["OffsetReader", "queue_name", "transient"]

log = logging.getLogger(__name__)

Caller = Callable[[str, Callable[["SidecarClient"], object]], object]


def queue_name(q: MessageQueue) -> str:
    return f"{q.topic}/{q.broker_name}/{q.queue_id}"


def transient(exc: BaseException) -> bool:
    """A NameServer or broker that did not answer (refused, lost, timed out) or answered
    busy: the same call may work later. The sidecar itself not answering is not
    (``link.call`` has already tried a new one)."""
    return bool(getattr(exc, "retriable", False)) and not isinstance(exc, SidecarUnavailable)


class OffsetReader:
    def __init__(self, opts: SourceOptions, *, clock: Callable[[], float] = time.monotonic,
                 call: Caller = link.call) -> None:
        self.opts = opts
        self.cluster = link.cluster_of(opts)
        self._clock = clock
        self._call = call
        self._queues: list[MessageQueue] | None = None
        self._queues_at = 0.0
        self.listings = 0      # queue lists read from fresh routes (the stream reader locks again after one)

    # ------------------------------------------------------------ broker facts

    def queues(self, *, force: bool = False) -> list[MessageQueue]:
        """Subscribed queues of every topic (plus ``%RETRY%<group>`` in concurrent mode)."""
        now = self._clock()
        stale = now - self._queues_at >= self.opts.queue_refresh_ms / 1000.0
        if self._queues is None or stale or force:
            refresh = self._queues is not None      # the first read may use the route cache
            try:
                found = self._call(self.opts.sidecar, lambda c: c.get_queues(
                    self.cluster, list(self.opts.topics), refresh=refresh))
                if self.opts.reads_retry_topic:
                    found = list(found) + self._retry_queues(refresh)  # type: ignore[call-overload]
            except RocketMQError as exc:
                if self._queues is None or force or not transient(exc):
                    raise
                # a RocketMQ client goes on with the routes it has while a NameServer is away
                log.warning("re-reading the queue list failed; keeping the last one (%d queue(s)), "
                            "retrying in %d ms: %s", len(self._queues), self.opts.queue_refresh_ms, exc)
                self._queues_at = now
                return list(self._queues)
            self._queues = sorted(found)  # type: ignore[call-overload]
            self._queues_at = now
            self.listings += 1
        return list(self._queues)

    def _retry_queues(self, refresh: bool) -> list[MessageQueue]:
        """``%RETRY%<group>``'s queues; none until the broker creates the topic (on the
        first send-back)."""
        try:
            return list(self._call(self.opts.sidecar, lambda c: c.get_queues(  # type: ignore[call-overload]
                self.cluster, [self.opts.retry_topic], refresh=refresh)))
        except BrokerError as exc:
            if exc.code == ResponseCode.TOPIC_NOT_EXIST:
                return []
            raise

    def offsets(self, queues: Sequence[MessageQueue], *, with_group: bool = False) -> dict[MessageQueue, QueueOffsets]:
        """Min/max (and with ``with_group`` committed) offsets of ``queues`` in one call."""
        if not queues:
            return {}
        group = self.opts.consumer_group if with_group else None
        # concurrent consumers read from a slave while its master is away (orderly ones
        # wait: their locks live on the master)
        replicas = not self.opts.uses_locks
        got = self._call(self.opts.sidecar,
                         lambda c: c.get_offsets(self.cluster, list(queues), group, replica_reads=replicas))
        return {o.queue: o for o in got}  # type: ignore[attr-defined]

    def reachable_offsets(self, queues: Sequence[MessageQueue]) -> tuple[
            dict[MessageQueue, QueueOffsets], dict[str, RocketMQError]]:
        """``offsets(queues)`` of the brokers that answer, and the error of each broker (by
        name) that did not (``transient``). One call when all answer; else one per broker."""
        try:
            return self.offsets(queues), {}
        except RocketMQError as exc:
            if not transient(exc):
                raise
            first = exc
        by_broker: dict[str, list[MessageQueue]] = {}
        for q in queues:
            by_broker.setdefault(q.broker_name, []).append(q)
        if len(by_broker) == 1:
            return {}, {next(iter(by_broker)): first}
        found: dict[MessageQueue, QueueOffsets] = {}
        down: dict[str, RocketMQError] = {}
        for name, group in by_broker.items():
            try:
                found.update(self.offsets(group))
            except RocketMQError as exc:
                if not transient(exc):
                    raise
                down[name] = exc
        return found, down

    def earliest(self, queues: Sequence[MessageQueue]) -> QueueOffsetMap:
        return {q: o.min_offset for q, o in self.offsets(queues).items()}

    def latest(self, queues: Sequence[MessageQueue]) -> QueueOffsetMap:
        return {q: o.max_offset for q, o in self.offsets(queues).items()}

    # ------------------------------------------------------------ requested positions

    def resolve_start(self, spec: StartSpec, queues: Sequence[MessageQueue] | None = None) -> QueueOffsetMap:
        queues = self.queues() if queues is None else list(queues)
        if isinstance(spec, TimestampStart):
            return self.at_time(queues, spec.timestamp_ms)
        if isinstance(spec, SpecificOffsets):
            return self._specific(spec.offsets, queues, "startingOffsets", unlisted=EARLIEST)
        info = self.offsets(queues, with_group=isinstance(spec, GroupStart))
        if isinstance(spec, EarliestStart):
            return {q: info[q].min_offset for q in queues}
        if isinstance(spec, LatestStart):
            return {q: info[q].max_offset for q in queues}
        if isinstance(spec, GroupStart):
            return {q: info[q].max_offset if info[q].committed is None else info[q].committed
                    for q in queues}
        raise TypeError(f"not a starting position: {spec!r}")

    def resolve_end(self, spec: EndSpec, queues: Sequence[MessageQueue] | None = None) -> QueueOffsetMap:
        queues = self.queues() if queues is None else list(queues)
        if isinstance(spec, LatestEnd):
            return self.latest(queues)
        if isinstance(spec, TimestampEnd):
            return self.at_time(queues, spec.timestamp_ms)
        if isinstance(spec, SpecificOffsets):
            return self._specific(spec.offsets, queues, "endingOffsets", unlisted=LATEST)
        raise TypeError(f"not an ending position: {spec!r}")

    def at_time(self, queues: Sequence[MessageQueue], timestamp_ms: int) -> QueueOffsetMap:
        """Each queue's first offset stored at or after ``timestamp_ms`` (its max offset when
        none is): a start from that time, or the exclusive end of what came before it."""
        found = self._call(self.opts.sidecar,
                           lambda c: c.search_offsets(self.cluster, queues, timestamp_ms))
        return {q: int(found[q]) for q in queues}  # type: ignore[index]

    def _specific(self, given: Mapping[MessageQueue, int], queues: Sequence[MessageQueue],
                  option: str, *, unlisted: int) -> QueueOffsetMap:
        _check_known(given, queues, self.opts.subscribed_topics, option)
        wanted = {q: given.get(q, unlisted) for q in queues}
        need = [q for q, o in wanted.items() if o in (EARLIEST, LATEST)]
        info = self.offsets(need)
        out: QueueOffsetMap = {}
        for q, o in wanted.items():
            if o == EARLIEST:
                o = info[q].min_offset
            elif o == LATEST:
                o = info[q].max_offset
            out[q] = o
        return out


def _check_known(given: Iterable[MessageQueue], queues: Sequence[MessageQueue],
                 topics: Sequence[str], option: str) -> None:
    known = set(queues)
    for q in sorted(given):
        if q.topic not in topics:
            raise ConfigError(f"option {option!r} names topic {q.topic!r}, which the query does "
                              f"not read (topics: {', '.join(topics)})")
        if q not in known:
            have = sorted(f"{k.broker_name}/{k.queue_id}" for k in known if k.topic == q.topic)
            raise ConfigError(f"option {option!r} names queue {queue_name(q)}, which does not exist "
                              f"(queues of {q.topic}: {', '.join(have) or 'none'})")
