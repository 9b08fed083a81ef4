"""Pulled messages -> Arrow record batches -> a chunked Arrow IPC stream, and back.

``SOURCE_SCHEMA`` is the row schema of the ``rocketmq`` source (docs/architecture.md,
"Source schema"); the Spark layer derives its Spark schema from it. Spark's Python data
source checks that every batch ``read()`` yields has exactly the Arrow schema
``to_arrow_schema(spark_schema, timezone="UTC")`` produces, so timestamps are
``timestamp[us, tz=UTC]`` (Spark's TimestampType) holding the broker's millisecond times.

Columns:
  * ``msg_id``: the UNIQ_KEY property when present, else the offset message id.
  * ``body``: the payload as the producer sent it (inflated when stored compressed).
  * ``properties``: every property of the stored message, user and system alike (TAGS,
    KEYS, UNIQ_KEY, RETRY_TOPIC, ...), so nothing the broker stored is lost.
  * ``topic``: for rows read from ``%RETRY%<group>`` with ``restore_retry_topic_of=group``,
    the original topic (RETRY_TOPIC property), as RocketMQ's consumers show it; ``broker``
    and ``queue_id`` stay those of the queue that was read.
"""

from __future__ import annotations

from typing import Iterable, Iterator, Sequence

import pyarrow as pa

from rocketmq_spark.remoting.codes import retry_topic
from rocketmq_spark.remoting.message import PROP_RETRY_TOPIC, MessageExt

TIMESTAMP = pa.timestamp("us", tz="UTC")
SOURCE_SCHEMA = pa.schema([
    pa.field("topic", pa.string(), nullable=False),
    pa.field("broker", pa.string(), nullable=False),
    pa.field("queue_id", pa.int32(), nullable=False),
    pa.field("queue_offset", pa.int64(), nullable=False),
    pa.field("msg_id", pa.string(), nullable=False),
    pa.field("offset_msg_id", pa.string(), nullable=False),
    pa.field("tags", pa.string()),
    pa.field("keys", pa.string()),
    pa.field("body", pa.binary(), nullable=False),
    pa.field("properties", pa.map_(pa.string(), pa.string()), nullable=False),
    pa.field("born_timestamp", TIMESTAMP, nullable=False),
    pa.field("store_timestamp", TIMESTAMP, nullable=False),
    pa.field("born_host", pa.string(), nullable=False),
    pa.field("store_host", pa.string(), nullable=False),
    pa.field("reconsume_times", pa.int32(), nullable=False),
])

# A stream chunk never exceeds this (gRPC messages are capped at 64 MiB; smaller chunks
# keep both ends' buffers small).
DEFAULT_CHUNK_BYTES = 1 << 20


def _timestamps(ms: list[int]) -> pa.Array:
    return pa.array([t * 1000 for t in ms], type=TIMESTAMP)


def messages_to_batch(messages: Sequence[MessageExt], *, broker: str,
                      restore_retry_topic_of: str | None = None) -> pa.RecordBatch:
    """Rows of ``SOURCE_SCHEMA`` for messages read from one queue of ``broker``."""
    retry = retry_topic(restore_retry_topic_of) if restore_retry_topic_of else None

    def topic(m: MessageExt) -> str:
        if retry is not None and m.topic == retry:
            return m.properties.get(PROP_RETRY_TOPIC) or m.topic
        return m.topic

    columns = [
        pa.array([topic(m) for m in messages], pa.string()),
        pa.array([broker] * len(messages), pa.string()),
        pa.array([m.queue_id for m in messages], pa.int32()),
        pa.array([m.queue_offset for m in messages], pa.int64()),
        pa.array([m.msg_id for m in messages], pa.string()),
        pa.array([m.offset_msg_id for m in messages], pa.string()),
        pa.array([m.tags for m in messages], pa.string()),
        pa.array([m.keys for m in messages], pa.string()),
        pa.array([m.payload() for m in messages], pa.binary()),
        pa.array([list(m.properties.items()) for m in messages], SOURCE_SCHEMA.field("properties").type),
        _timestamps([m.born_timestamp for m in messages]),
        _timestamps([m.store_timestamp for m in messages]),
        pa.array([str(m.born_host) for m in messages], pa.string()),
        pa.array([str(m.store_host) for m in messages], pa.string()),
        pa.array([m.reconsume_times for m in messages], pa.int32()),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=SOURCE_SCHEMA)


class _Sink:
    """A write-only file object collecting what the IPC writer writes, taken chunk by chunk."""

    def __init__(self) -> None:
        self._parts: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> int:
        self._parts.append(bytes(data))
        return len(data)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True

    def writable(self) -> bool:
        return True

    def take(self) -> bytes:
        data = b"".join(self._parts)
        self._parts.clear()
        return data


def _split(data: bytes, size: int) -> Iterator[bytes]:
    for i in range(0, len(data), size):
        yield data[i:i + size]


def ipc_chunks(batches: Iterable[pa.RecordBatch], *, schema: pa.Schema = SOURCE_SCHEMA,
               chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> Iterator[bytes]:
    """One Arrow IPC stream (schema, batches, end marker) as chunks of <= ``chunk_bytes``,
    produced batch by batch: only one batch's bytes are held at a time."""
    sink = _Sink()
    writer = pa.ipc.new_stream(sink, schema)
    yield from _split(sink.take(), chunk_bytes)
    for batch in batches:
        writer.write_batch(batch)
        yield from _split(sink.take(), chunk_bytes)
    writer.close()
    yield from _split(sink.take(), chunk_bytes)


class _ChunkReader:
    """A read-only file object over an iterator of byte chunks (for ``pa.ipc.open_stream``)."""

    def __init__(self, chunks: Iterable[bytes]) -> None:
        self._chunks = iter(chunks)
        self._buf = memoryview(b"")
        self.closed = False

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    def read(self, n: int = -1) -> bytes:
        out = bytearray()
        while n < 0 or len(out) < n:
            if not self._buf:
                nxt = next(self._chunks, None)
                if nxt is None:
                    break
                self._buf = memoryview(nxt)
                continue
            take = len(self._buf) if n < 0 else min(n - len(out), len(self._buf))
            out += self._buf[:take]
            self._buf = self._buf[take:]
        return bytes(out)

    def close(self) -> None:
        self.closed = True
        close = getattr(self._chunks, "close", None)
        if close is not None:
            close()


def read_ipc_chunks(chunks: Iterable[bytes]) -> Iterator[pa.RecordBatch]:
    """Record batches of a chunked IPC stream, decoded one at a time as chunks arrive."""
    src = _ChunkReader(chunks)
    try:
        reader = pa.ipc.open_stream(pa.PythonFile(src, mode="r"))
        while True:
            try:
                yield reader.read_next_batch()
            except StopIteration:
                return
    finally:
        src.close()
