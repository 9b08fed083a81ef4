"""The sink: ``df.write.format("rocketmq")`` and ``df.writeStream.format("rocketmq")``.

Each row becomes one message. Columns (all but ``body`` optional; any other column is an
error, so a typo or a forgotten ``select`` does not silently drop data):

========================  =====================================  ==============================
column                    type                                   becomes
========================  =====================================  ==============================
``body``                  binary or string (UTF-8)               the message body (not null)
``topic``                 string                                 the topic (else option ``topic``)
``tags``                  string                                 the tag
``keys``                  string, or array<string>               KEYS (array elements joined by ' ')
``properties``            map<string, string>                    user properties
``sharding_key``          string                                 the queue: same key -> same queue
``delay_level``           any integer type, 0..18                RocketMQ's delay level (0: none)
``deliver_time``          timestamp                              5.x timer: delivered at that time
``delay_ms``              any integer type, >= 0                 5.x timer: delivered this late
========================  =====================================  ==============================

Both writers are Arrow writers (``DataSourceArrowWriter``, ``DataSourceStreamArrowWriter``):
a task gets its partition as Arrow record batches and converts them column by column
(pyspark 4.0 has no Arrow stream writer: there the stream writer gets rows and makes Arrow
batches of them first, ``features.STREAM_ARROW_WRITER``). It
sends the messages through its host's sidecar, ``batchSize`` messages per Send call, one
call at a time, and checks that the broker stored every message (SEND_OK) before the next
call; ``write`` returns, and the task commits, only after the last call succeeded. A failed
send fails the task with the broker's response code and remark. Rows of one sharding key
within a partition go to one queue in partition order (the sidecar sends a key's run of a
call as one batch to its queue, and calls are sequential).

Delivery is at-least-once by default: a retried task, a retried micro-batch or a resent
Send call (the sidecar restarted) sends its rows again. Nothing can be taken back, so
``abort`` has nothing to undo: messages sent by tasks that succeeded stay in RocketMQ.
With ``deliveryGuarantee=exactly-once`` the rows go out as half messages and the driver
commits them with the batch (``exactly_once``).

Timer rows (``deliver_time``, or ``delay_ms`` from when the task converts the row) carry
``TIMER_DELIVER_MS`` and go one per request (a 5.x broker times single sends only); a time
not ahead of the task's clock is sent as a plain message, as a 5.x broker would store it.
The client refuses to send them to a broker without a timer store (4.x would deliver them
at once). Exactly-once writes refuse the columns: RocketMQ's transactional and timer
messages are distinct message types.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterator, Sequence

from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage
from pyspark.sql.types import (ArrayType, BinaryType, ByteType, DataType, IntegerType, LongType,
                               MapType, ShortType, StringType, StructType, TimestampType)

from rocketmq_spark.errors import BrokerError, ConfigError, RocketMQError
from rocketmq_spark.remoting.codes import DELAY_LEVELS_MS, response_name
from rocketmq_spark.remoting import timer
from rocketmq_spark.remoting.message import NAME_VALUE_SEP, PROPERTY_SEP
from rocketmq_spark.sidecar import Outgoing
from rocketmq_spark.spark.options import _NAME_RE, _TOPIC_MAX
from rocketmq_spark.spark import exactly_once as eo
from rocketmq_spark.spark import features
from rocketmq_spark.spark.sink_options import SinkOptions
from rocketmq_spark.structs import Message, SendResult

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["RocketMQWriter", "RocketMQStreamWriter", "SinkCommit", "SinkError", "SendFailed",
           "Layout", "check_schema", "COLUMNS", "RESERVED_PROPERTIES", "to_outgoing"]

SEND_OK = "SEND_OK"
MAX_DELAY_LEVEL = len(DELAY_LEVELS_MS)
KEY_SEPARATOR = " "                    # RocketMQ joins several keys with a space
CALL_BYTES = 16 << 20                  # flush a Send call early past this many bytes
MAX_MESSAGE_BYTES = 60 << 20           # the sidecar takes calls of up to 64 MiB


# ------------------------------------------------------------------ columns

def _is_string(t: DataType) -> bool:
    return isinstance(t, StringType)


def _is_integral(t: DataType) -> bool:
    return isinstance(t, (ByteType, ShortType, IntegerType, LongType))


@dataclass(frozen=True)
class ColumnSpec:
    name: str
    accepts: Callable[[DataType], bool]
    types: str                         # what `accepts` allows, for errors


COLUMNS: dict[str, ColumnSpec] = {c.name: c for c in [
    ColumnSpec("body", lambda t: isinstance(t, BinaryType) or _is_string(t), "binary or string"),
    ColumnSpec("topic", _is_string, "string"),
    ColumnSpec("tags", _is_string, "string"),
    ColumnSpec("keys", lambda t: _is_string(t) or (isinstance(t, ArrayType)
                                                   and _is_string(t.elementType)),
               "string or array<string>"),
    ColumnSpec("properties", lambda t: isinstance(t, MapType) and _is_string(t.keyType)
               and _is_string(t.valueType), "map<string,string>"),
    ColumnSpec("sharding_key", _is_string, "string"),
    ColumnSpec("delay_level", _is_integral, "tinyint, smallint, int or bigint"),
    ColumnSpec("deliver_time", lambda t: isinstance(t, TimestampType), "timestamp"),
    ColumnSpec("delay_ms", _is_integral, "tinyint, smallint, int or bigint"),
]}
TIMER_COLUMNS = ("deliver_time", "delay_ms")
_NO_TIMER = ("RocketMQ's transactional messages cannot be timer messages (TRANSACTION and DELAY are "
             "distinct message types; its 5.x clients refuse a transactional message with a delivery "
             "timestamp)")
# Columns exactly-once writes refuse, and why (RocketMQ's message types are exclusive:
# NORMAL, FIFO, DELAY, TRANSACTION; a transactional message has no delay or timer).
_NOT_TRANSACTIONAL = {
    "delay_level": "RocketMQ's transactional messages have no delay",
    "deliver_time": _NO_TIMER,
    "delay_ms": _NO_TIMER,
}

# Property names RocketMQ itself sets or reads (its clients refuse them as user properties):
# they would change how the broker stores or delivers the message. The first five have a
# column of their own.
_OWN_COLUMN = {"TAGS": "tags", "KEYS": "keys", "DELAY": "delay_level", "__SHARDINGKEY": "sharding_key",
               timer.PROP_TIMER_DELIVER_MS: "deliver_time"}
RESERVED_PROPERTIES = frozenset(_OWN_COLUMN) | timer.TIMER_PROPERTIES | frozenset({
    "WAIT", "RETRY_TOPIC", "REAL_TOPIC", "REAL_QID", "TRAN_MSG", "PGROUP", "MIN_OFFSET",
    "MAX_OFFSET", "BUYER_ID", "ORIGIN_MESSAGE_ID", "TRANSFER_FLAG", "CORRECTION_FLAG",
    "MQ2_FLAG", "RECONSUME_TIME", "MSG_REGION", "TRACE_ON", "UNIQ_KEY", "MAX_RECONSUME_TIMES",
    "CONSUME_START_TIME", "TRAN_PREPARED_QUEUE_OFFSET", "TRANSACTION_CHECK_TIMES",
    "CHECK_IMMUNITY_TIME_IN_SECONDS", "INSTANCE_ID", "CORRELATION_ID", "REPLY_TO_CLIENT",
    "TTL", "ARRIVE_TIME", "PUSH_REPLY_TIME", "CLUSTER", "MSG_TYPE", "__STARTDELIVERTIME",
})


class SinkError(RocketMQError, ValueError):
    """A row the sink cannot turn into a message; the text names the row and the column."""


class SendFailed(RocketMQError):
    """A Send call failed, or the broker did not store a message with SEND_OK.

    ``code`` / ``remark``: the broker's response code and remark when the broker refused
    the messages (None when the failure was elsewhere, e.g. the sidecar was unreachable).
    """

    def __init__(self, text: str, *, code: int | None = None, remark: str | None = None) -> None:
        super().__init__(text)
        self.code = code
        self.remark = remark


@dataclass(frozen=True)
class Layout:
    """Which sink columns the DataFrame has, by position."""

    names: tuple[str, ...]
    body_is_string: bool

    @property
    def keyed(self) -> bool:
        """Rows carry sharding keys: each key's order in its queue must be kept."""
        return "sharding_key" in self.names


def check_schema(schema: StructType, default_topic: str | None, *, exactly_once: bool = False) -> Layout:
    """The sink's view of ``schema``; ConfigError naming the first bad column."""
    names = tuple(schema.fieldNames())
    allowed = ", ".join(COLUMNS)
    seen: set[str] = set()
    for f in schema.fields:
        spec = COLUMNS.get(f.name)
        if spec is None:
            raise ConfigError(f"column {f.name!r} is not a column of the rocketmq sink; the allowed "
                              f"columns are {allowed} (select or drop the others)")
        if f.name in seen:
            raise ConfigError(f"column {f.name!r} appears twice")
        seen.add(f.name)
        if not spec.accepts(f.dataType):
            raise ConfigError(f"column {f.name!r} has type {f.dataType.simpleString()}; the rocketmq "
                              f"sink takes {spec.types} (cast it)")
    if "body" not in seen:
        raise ConfigError(f"the rocketmq sink needs a 'body' column (binary or string); the "
                          f"DataFrame has {', '.join(names) or 'no columns'}")
    if "topic" not in seen and default_topic is None:
        raise ConfigError("the rocketmq sink needs a topic: set option 'topic' or give the "
                          "DataFrame a 'topic' column")
    for column, why in _NOT_TRANSACTIONAL.items():
        if exactly_once and column in seen:
            raise ConfigError(f"column {column!r} cannot be written with "
                              f"deliveryGuarantee=exactly-once: {why} (drop the column, or write "
                              f"with deliveryGuarantee=at-least-once)")
    return Layout(names, _is_string(schema["body"].dataType))


# ------------------------------------------------------------------ rows -> messages

class _Rows:
    """Names rows in errors: partition and row number within the task."""

    def __init__(self, partition: int | None) -> None:
        self.partition = partition
        self.row = 0

    def prefix(self) -> str:
        return f"partition {self.partition}, " if self.partition is not None else ""

    def where(self) -> str:
        return f"{self.prefix()}row {self.row}"

    def fail(self, column: str, problem: str) -> SinkError:
        return SinkError(f"rocketmq sink: {self.where()}: column {column!r} {problem}")


def _check_text(rows: _Rows, column: str, text: str) -> str:
    if NAME_VALUE_SEP in text or PROPERTY_SEP in text:
        raise rows.fail(column, f"value {text[:60]!r} contains \\x01 or \\x02, which RocketMQ "
                                f"reserves to separate properties")
    return text


def _topic(rows: _Rows, value: str, checked: set[str]) -> str:
    if value not in checked:
        if not _NAME_RE.match(value) or len(value) > _TOPIC_MAX:
            raise rows.fail("topic", f"value {value[:60]!r} is not a topic name (letters, digits, "
                                     f"'%', '|', '-', '_'; at most {_TOPIC_MAX} characters)")
        checked.add(value)
    return value


def _keys(rows: _Rows, value: Any) -> str | None:
    if isinstance(value, list):
        value = KEY_SEPARATOR.join(k for k in value if k)
    return _check_text(rows, "keys", value) or None


def _properties(rows: _Rows, pairs: Any) -> dict[str, str]:
    props: dict[str, str] = {}
    for name, value in pairs:
        if not name:
            raise rows.fail("properties", "has a property with an empty name")
        if name in RESERVED_PROPERTIES:
            own = _OWN_COLUMN.get(name)
            hint = (f"use the {own!r} column" if own
                    else "drop it, e.g. map_filter(properties, (k, v) -> k != '%s')" % name)
            raise rows.fail("properties", f"has property {name!r}, which RocketMQ reserves; {hint}")
        if value:                      # RocketMQ carries no empty or null property values
            props[_check_text(rows, "properties", name)] = _check_text(rows, "properties", value)
    return props


def _delay(rows: _Rows, value: int) -> int:
    if not 0 <= value <= MAX_DELAY_LEVEL:
        raise rows.fail("delay_level", f"value {value} is not a delay level (0 for none, "
                                       f"1..{MAX_DELAY_LEVEL})")
    return value


def _timer_ms(rows: _Rows, at_us: int | None, delay_ms: int | None, level: int, now_ms: int) -> int | None:
    """The TIMER_DELIVER_MS of a row (None: no timer, or a time not ahead of now)."""
    if delay_ms is not None and delay_ms < 0:
        raise rows.fail("delay_ms", f"value {delay_ms} is negative (0 or null for none)")
    if at_us is not None and delay_ms:
        raise rows.fail("delay_ms", "and column 'deliver_time' are both set; a row takes one of them")
    deliver = at_us // 1000 if at_us is not None else (now_ms + delay_ms if delay_ms else None)
    if deliver is not None and level:
        raise rows.fail("delay_level", "and a timer (deliver_time / delay_ms) are both set; a row "
                                       "takes one of them (a broker would drop the timer)")
    return deliver if deliver is not None and deliver > now_ms else None


def _column(batch: "pa.RecordBatch", i: int, name: str) -> list[Any]:
    col = batch.column(i)
    if name == "deliver_time":          # microseconds since the epoch, as integers
        import pyarrow as pa

        col = col.cast(pa.int64())
    return col.to_pylist()


def to_outgoing(batch: "pa.RecordBatch", layout: Layout, default_topic: str | None,
                rows: _Rows, checked_topics: set[str], *,
                now_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000) -> Iterator[tuple[Outgoing, int]]:
    """The messages of an Arrow batch, with the bytes each adds to a Send call. ``now_ms``:
    the clock ``delay_ms`` counts from (read once per batch)."""
    cols = {name: _column(batch, i, name) for i, name in enumerate(layout.names)}
    n = batch.num_rows
    none = [None] * n
    bodies, topics, tags = cols["body"], cols.get("topic", none), cols.get("tags", none)
    keys, props = cols.get("keys", none), cols.get("properties", none)
    shard, delay = cols.get("sharding_key", none), cols.get("delay_level", none)
    at, after = cols.get("deliver_time"), cols.get("delay_ms")
    now = now_ms() if at is not None or after is not None else 0
    for i in range(n):
        rows.row += 1
        body = bodies[i]
        if body is None:
            raise rows.fail("body", "is null; every message needs a body")
        if layout.body_is_string:
            body = body.encode("utf-8")
        if not body:
            raise rows.fail("body", "is empty; RocketMQ refuses a message without a body (the "
                                    "Java producer refuses it, RocketMQ 5 brokers fail on it)")
        topic = topics[i] if topics[i] is not None else default_topic
        if topic is None:
            raise rows.fail("topic", "is null and option 'topic' is not set")
        level = _delay(rows, delay[i]) if delay[i] is not None else 0
        properties = _properties(rows, props[i]) if props[i] else {}
        if at is not None or after is not None:
            deliver = _timer_ms(rows, at[i] if at is not None else None,
                                after[i] if after is not None else None, level, now)
            if deliver is not None:
                properties[timer.PROP_TIMER_DELIVER_MS] = str(deliver)
        message = Message(
            topic=_topic(rows, topic, checked_topics),
            body=body,
            tags=_check_text(rows, "tags", tags[i]) if tags[i] else None,
            keys=_keys(rows, keys[i]) if keys[i] is not None else None,
            properties=properties,
            delay_level=level)
        size = len(body) + sum(len(k) + len(v) for k, v in message.properties.items()) + 128
        if size > MAX_MESSAGE_BYTES:
            raise rows.fail("body", f"holds {len(body)} bytes, more than a message can have "
                                    f"(RocketMQ brokers take 4 MiB by default)")
        key = _check_text(rows, "sharding_key", shard[i]) if shard[i] is not None else None
        yield Outgoing(message, key or None), size


# ------------------------------------------------------------------ sending

def _describe(exc: RocketMQError) -> tuple[str, int | None, str | None]:
    if isinstance(exc, BrokerError):
        return (f"the broker answered {response_name(exc.code)} (code {exc.code}): {exc.remark}",
                exc.code, exc.remark)
    return f"{type(exc).__name__}: {exc}", None, None


class _Sender:
    """Sends messages ``batch_size`` per Send call, one call at a time, checking SEND_OK."""

    def __init__(self, opts: SinkOptions, rows: _Rows,
                 send: Callable[[Sequence[Outgoing]], list[SendResult]]) -> None:
        self.opts, self.rows, self._send = opts, rows, send
        self.pending: list[Outgoing] = []
        self.pending_bytes = 0
        self.sent = 0
        self.calls = 0

    def add(self, item: Outgoing, size: int) -> None:
        if self.pending and self.pending_bytes + size > CALL_BYTES:
            self.flush()
        self.pending.append(item)
        self.pending_bytes += size
        if len(self.pending) >= self.opts.batch_size:
            self.flush()

    def flush(self) -> None:
        items, self.pending, self.pending_bytes = self.pending, [], 0
        if not items:
            return
        first, last = self.sent + 1, self.sent + len(items)
        where = f"{self.rows.prefix()}rows {first}..{last}"
        topics = ", ".join(sorted({o.message.topic for o in items}))
        try:
            results = self._send(items)
        except RocketMQError as exc:
            text, code, remark = _describe(exc)
            raise SendFailed(f"rocketmq sink: sending {where} to {topics} failed: {text}",
                             code=code, remark=remark) from exc
        self.calls += 1
        if len(results) != len(items):
            raise SendFailed(f"rocketmq sink: sending {where} to {topics}: the sidecar answered "
                             f"{len(results)} results for {len(items)} messages")
        for i, r in enumerate(results):
            if r.status != SEND_OK:
                q = r.queue
                raise SendFailed(f"rocketmq sink: {self.rows.prefix()}row {first + i}: "
                                 f"the broker stored the message in {q.topic}/{q.broker_name}/"
                                 f"{q.queue_id} at offset {r.queue_offset} with status {r.status}, "
                                 f"not {SEND_OK}")
        self.sent += len(items)


def _sidecar_send(opts: SinkOptions) -> Callable[[Sequence[Outgoing]], list[SendResult]]:
    from rocketmq_spark.spark import link

    cluster = opts.cluster

    def send(items: Sequence[Outgoing]) -> list[SendResult]:
        return link.call(opts.sidecar,
                         lambda c: c.send(cluster, items, producer_group=opts.producer_group,
                                          broker_unavailable_timeout_ms=opts.broker_unavailable_ms,
                                          compression=opts.compression))
    return send


def _partition_id() -> int | None:
    from pyspark import TaskContext

    ctx = TaskContext.get()
    return ctx.partitionId() if ctx is not None else None


def write_batches(opts: SinkOptions, layout: Layout, batches: Iterator["pa.RecordBatch"], *,
                  send: Callable[[Sequence[Outgoing]], list[SendResult]] | None = None,
                  partition: int | None = None) -> "SinkCommit":
    """Send every row of ``batches``; returns once the broker has stored all of them."""
    rows = _Rows(partition)
    sender = _Sender(opts, rows, send or _sidecar_send(opts))
    _send_rows(sender, opts, layout, batches, rows)
    return SinkCommit(partition=partition, messages=sender.sent, send_calls=sender.calls)


def _send_rows(sender: "_Sender", opts: SinkOptions, layout: Layout,
               batches: Iterator["pa.RecordBatch"], rows: "_Rows") -> None:
    checked: set[str] = set()
    for batch in batches:
        for item, size in to_outgoing(batch, layout, opts.topic, rows, checked):
            sender.add(item, size)
    sender.flush()


def write_halves(opts: SinkOptions, layout: Layout, batches: Iterator["pa.RecordBatch"],
                 txn: eo.Transactional, *, send: eo.Send | None = None,
                 identity: tuple[int, int, int] | None = None) -> eo.TxnCommit:
    """Exactly-once: every row of ``batches`` as a half message (stored, not visible); a
    failing task rolls back what it sent."""
    partition, attempt, batch = identity or eo.task_identity()
    rows = _Rows(partition)
    collector = eo.HalfCollector(send or eo.sidecar_send(opts, eo.tag_for(txn, batch, partition, attempt)))
    sender = _Sender(opts, rows, collector)
    try:
        _send_rows(sender, opts, layout, batches, rows)
    except BaseException:
        eo.roll_back_task(opts, txn, collector.halves, batch)
        raise
    return eo.TxnCommit(partition, attempt, batch, sender.sent, sender.calls, eo.pack(collector.halves))


# ------------------------------------------------------------------ Spark's writers

@dataclass(frozen=True)
class SinkCommit(WriterCommitMessage):
    """What one task sent (every message acknowledged with SEND_OK)."""

    partition: int | None
    messages: int
    send_calls: int


class RocketMQWriter(DataSourceArrowWriter):
    """Batch writes (``df.write.format("rocketmq").mode("append")``). At-least-once: the
    rows are stored when the tasks end. Exactly-once: the job is one transaction, every row
    visible once the driver commits, or none."""

    def __init__(self, opts: SinkOptions, layout: Layout) -> None:
        self.opts = opts
        self.layout = layout
        self.txn = (eo.Transactional(opts.transaction_log_topic, eo.batch_txn_id(opts), eo.new_epoch(),
                                     streaming=False) if opts.exactly_once else None)

    def __repr__(self) -> str:                       # the options' repr hides the secrets
        return f"{type(self).__name__}({self.opts!r})"

    def write(self, iterator: Iterator["pa.RecordBatch"]) -> WriterCommitMessage:
        if self.txn is not None:
            return write_halves(self.opts, self.layout, iterator, self.txn)
        return write_batches(self.opts, self.layout, iterator, partition=_partition_id())

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """At-least-once: nothing to do, each task's messages were stored before it ended.
        Exactly-once: decide and commit the job's half messages."""
        if self.txn is not None:
            eo.commit(self.opts, self.txn, messages, 0, ordered=self.layout.keyed)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """At-least-once: nothing can be undone, messages of the tasks that finished stay.
        Exactly-once: roll the half messages back."""
        if self.txn is not None:
            eo.abort(self.opts, self.txn, messages, 0)


ROWS_PER_BATCH = 4096      # rows made into one Arrow batch where Spark hands rows (pyspark 4.0)


def rows_to_batches(rows: Iterator[Any], schema: StructType) -> Iterator["pa.RecordBatch"]:
    """Spark rows as Arrow record batches of ``schema`` (the stream writer of pyspark 4.0)."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema

    arrow_schema = to_arrow_schema(schema)
    names = schema.names
    chunk: list[dict[str, Any]] = []
    for row in rows:
        chunk.append(dict(zip(names, row)))
        if len(chunk) >= ROWS_PER_BATCH:
            yield pa.RecordBatch.from_pylist(chunk, schema=arrow_schema)
            chunk = []
    if chunk:
        yield pa.RecordBatch.from_pylist(chunk, schema=arrow_schema)


class RocketMQStreamWriter(features.StreamWriterBase):  # type: ignore[misc]
    """Streaming writes (``df.writeStream.format("rocketmq")``): each micro-batch like a batch
    write. In complete output mode every trigger sends the whole result table again."""

    def __init__(self, opts: SinkOptions, layout: Layout, txn_id: str | None = None,
                 schema: StructType | None = None) -> None:
        self.opts = opts
        self.layout = layout
        self.schema = schema        # for the rows of pyspark 4.0 (no Arrow stream writer)
        self.txn = (eo.Transactional(opts.transaction_log_topic, txn_id or "", eo.new_epoch(),
                                     streaming=True) if opts.exactly_once else None)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.opts!r})"

    def write(self, iterator: Iterator["pa.RecordBatch"]) -> WriterCommitMessage:
        if not features.STREAM_ARROW_WRITER:
            if self.schema is None:
                raise SinkError("the stream writer got rows but knows no schema to make Arrow batches of")
            iterator = rows_to_batches(iterator, self.schema)
        if self.txn is not None:
            return write_halves(self.opts, self.layout, iterator, self.txn)
        return write_batches(self.opts, self.layout, iterator, partition=_partition_id())

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        """At-least-once: nothing to do. Exactly-once: decide the micro-batch and commit its
        half messages (or roll them back when an earlier run committed this batch)."""
        if self.txn is not None:
            eo.commit(self.opts, self.txn, messages, batchId, ordered=self.layout.keyed)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        """At-least-once: nothing can be undone, a retried micro-batch sends its rows again.
        Exactly-once: roll the half messages back."""
        if self.txn is not None:
            eo.abort(self.opts, self.txn, messages, batchId)
