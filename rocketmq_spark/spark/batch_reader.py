"""Batch reads (``spark.read.format("rocketmq")``): one bounded range per queue.

``startingOffsets`` (default ``earliest``; also ``group``, JSON, or ``startingTimestamp``)
and ``endingOffsets`` (default ``latest``, JSON, or ``endingTimestamp``) are resolved when
Spark plans the read. Orderly mode gives one partition per queue, rows in offset order;
concurrent mode splits ranges to reach ``minPartitions`` and reads ``%RETRY%<group>`` too.
A batch read takes no locks and commits nothing.

``RocketMQPushdownBatchReader`` also takes Spark's filters (``pushFilters``, pyspark 4.1+
with ``spark.sql.python.filterPushdown.enabled``): queue, topic, broker and tag filters
drop queues or narrow the subscription, store-time bounds narrow each queue's range,
``keys = 'v'`` / ``msg_id = 'v'`` read only the offsets the brokers' message indexes give
(``pushdown.py``). It is a class of its own because pyspark fails every read of a reader
that has ``pushFilters`` while that setting is off (``source.py`` picks the class).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Iterable, Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition

from rocketmq_spark.errors import ConfigError
from rocketmq_spark.remoting.route import MessageQueue
from rocketmq_spark.spark import link
from rocketmq_spark.spark.offset_reader import OffsetReader, queue_name
from rocketmq_spark.spark.offsets import QueueOffsetMap, SpecificOffsets
from rocketmq_spark.spark.options import SourceOptions
from rocketmq_spark.spark.partition import RocketMQPartition
from rocketmq_spark.spark.planner import QueueRange, plan_partitions, ranges
from rocketmq_spark.spark.pushdown import NOTHING, Pushed, push
from rocketmq_spark.spark.reader import read_partition

__all__ = ["RocketMQBatchReader", "RocketMQPushdownBatchReader"]


class RocketMQBatchReader(DataSourceReader):
    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self.pushed: Pushed = NOTHING

    def partitions(self) -> list[InputPartition]:  # type: ignore[override]
        if self.pushed.empty:
            return []
        self._check_subscription()
        r = OffsetReader(self.opts)
        queues = r.queues(force=True)
        start = r.resolve_start(self.opts.starting, queues)
        end = r.resolve_end(self.opts.ending, queues)
        if isinstance(self.opts.ending, SpecificOffsets):
            for q in sorted(self.opts.ending.offsets):
                if end[q] < start[q]:
                    raise ConfigError(f"option 'endingOffsets': {queue_name(q)} ends at {end[q]}, "
                                      f"before its starting offset {start[q]}")
        # pushed filters: options are checked above against every queue, then queues go
        kept = [q for q in queues if self._retry(q) or self.pushed.keeps(q)]
        start, end = self._in_time(r, kept, start, end)
        todo = ranges({q: start[q] for q in kept}, {q: max(end[q], start[q]) for q in kept})
        if self.pushed.lookup is not None and not self.opts.reads_retry_topic:
            found = self._looked_up(todo)
            todo = todo if found is None else found
        parts = plan_partitions(todo, orderly=self.opts.orderly,
                                min_partitions=self.opts.min_partitions)
        return [RocketMQPartition.of(p) for p in parts]

    def _check_subscription(self) -> None:
        """A selector that is not TAG is checked with the brokers before anything is read, as
        a stream checks it when it starts: the check (CHECK_CLIENT_CONFIG to every master) is
        made when the sidecar registers a consumer, so the read joins its group under an id
        of its own for the moment of the check. BrokerError with the brokers' code and remark
        when they refuse it; an Apache broker would instead deliver every message to a pull
        carrying a selector it cannot compile."""
        o = self.opts
        if o.sub_expression_type == "TAG":
            return
        import uuid

        from rocketmq_spark.spark.options import consumer_data
        cluster, client_id = link.cluster_of(o), f"{o.lock_owner}@check-{uuid.uuid4().hex[:12]}"
        link.call(o.sidecar, lambda c: c.register_consumer(cluster, client_id, consumer_data(o)))
        link.call(o.sidecar, lambda c: c.unregister_consumer(cluster, o.consumer_group, client_id))

    def _looked_up(self, todo: list[QueueRange]) -> list[QueueRange] | None:
        """The offsets of ``todo`` whose message has the pushed ``keys`` / ``msg_id``, from
        every broker's message index, one range each; None when a broker did not answer or
        an answer may have been cut (the read then scans ``todo``)."""
        lookup = self.pushed.lookup
        assert lookup is not None
        by_topic: dict[str, set[str]] = {}
        for qr in todo:
            by_topic.setdefault(qr.queue.topic, set()).add(qr.queue.broker_name)
        out = []
        for topic, brokers in sorted(by_topic.items()):
            answers = link.call(self.opts.sidecar, lambda c: c.query_messages(
                link.cluster_of(self.opts), topic, lookup.key, unique=lookup.unique,
                max_num=lookup.max_num, brokers=sorted(brokers)))
            # a broker without a master (mqadmin asks masters only) did not answer, and an
            # answer of max_num records may have left some out: scan
            if set(answers) != brokers or any(len(found) >= lookup.max_num for found in answers.values()):
                return None
            for found in answers.values():
                for f in found:
                    value = f.msg_id if lookup.unique else f.keys
                    if value == lookup.value and any(qr.queue == f.queue and qr.start <= f.queue_offset < qr.end
                                                     for qr in todo):
                        out.append(QueueRange(f.queue, f.queue_offset, f.queue_offset + 1))
        return sorted(set(out))

    def _retry(self, q: MessageQueue) -> bool:
        return self.opts.reads_retry_topic and q.topic == self.opts.retry_topic

    def _in_time(self, r: OffsetReader, queues: list[MessageQueue], start: QueueOffsetMap,
                 end: QueueOffsetMap) -> tuple[QueueOffsetMap, QueueOffsetMap]:
        """Each queue's range cut to the pushed store-time window (the retry topic's rows
        are read whole: Spark checks the time of every row anyway)."""
        timed = [q for q in queues if not self._retry(q) and start[q] < end[q]]
        start, end = dict(start), dict(end)
        if self.pushed.since_ms is not None and timed:
            since = r.at_time(timed, self.pushed.since_ms)
            start.update({q: max(start[q], since[q]) for q in timed})
        if self.pushed.until_ms is not None and timed:
            until = r.at_time(timed, self.pushed.until_ms)
            end.update({q: min(end[q], until[q]) for q in timed})
        return start, end

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:  # type: ignore[override]
        return read_partition(self.opts, partition)


class RocketMQPushdownBatchReader(RocketMQBatchReader):
    def pushFilters(self, filters: list[Any]) -> Iterable[Any]:
        # tags narrow a TAG subscription only: with a SQL92 selector they stay with Spark
        held = [] if self.opts.sub_expression_type == "TAG" else \
            [f for f in filters if tuple(getattr(f, "attribute", ())) == ("tags",)]
        pushed, rest = push([f for f in filters if not any(f is h for h in held)],
                            exact=not self.opts.reads_retry_topic)
        rest = held + rest
        self.pushed = pushed
        if pushed.tags is not None:
            # the sidecar subscribes with these tags: the broker and then the sidecar drop
            # every other message, as a consumer subscribed to them sees it
            self.opts = replace(self.opts, sub_expression=pushed.sub_expression(self.opts.sub_expression))
            if not self.opts.sub_expression:
                self.pushed = replace(pushed, tags=frozenset())
        return rest
