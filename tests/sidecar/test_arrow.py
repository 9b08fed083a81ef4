"""Pulled messages -> Arrow rows, and the chunked IPC stream (pure)."""

from __future__ import annotations

import datetime as dt
import zlib

import pyarrow as pa
import pytest
from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema
from pyspark.sql.types import BinaryType, IntegerType, LongType, MapType, StringType, TimestampType

from rocketmq_spark.remoting.codes import MessageSysFlag
from rocketmq_spark.remoting.message import HostPort, MessageExt, offset_msg_id
from rocketmq_spark.sidecar.arrow import (SOURCE_SCHEMA, ipc_chunks, messages_to_batch,
                                          read_ipc_chunks)

STORE = HostPort("10.0.0.1", 10911)


def msg(offset: int, **kw: object) -> MessageExt:
    base = dict(topic="orders", body=b"body-%d" % offset, queue_id=2, queue_offset=offset,
                commit_log_offset=1000 + offset, born_timestamp=1_700_000_000_123,
                born_host=HostPort("192.168.1.5", 50000), store_timestamp=1_700_000_000_456,
                store_host=STORE, properties={"TAGS": "TagA", "KEYS": "k1 k2",
                                              "UNIQ_KEY": f"U{offset}", "color": "red"})
    base.update(kw)
    return MessageExt(**base)  # type: ignore[arg-type]


def test_schema_is_what_spark_expects_back() -> None:
    spark_schema = from_arrow_schema(SOURCE_SCHEMA)
    types = {f.name: type(f.dataType) for f in spark_schema.fields}
    assert types == {"topic": StringType, "broker": StringType, "queue_id": IntegerType,
                     "queue_offset": LongType, "msg_id": StringType, "offset_msg_id": StringType,
                     "tags": StringType, "keys": StringType, "body": BinaryType,
                     "properties": MapType, "born_timestamp": TimestampType,
                     "store_timestamp": TimestampType, "born_host": StringType,
                     "store_host": StringType, "reconsume_times": IntegerType}
    # Spark's Python data source rejects batches whose schema differs from this.
    assert to_arrow_schema(spark_schema, timezone="UTC").equals(SOURCE_SCHEMA)


def test_row_values() -> None:
    batch = messages_to_batch([msg(7, reconsume_times=3)], broker="broker-a")
    assert batch.schema.equals(SOURCE_SCHEMA)
    row = batch.to_pylist()[0]
    assert row["topic"] == "orders" and row["broker"] == "broker-a"
    assert (row["queue_id"], row["queue_offset"]) == (2, 7)
    assert row["msg_id"] == "U7"
    assert row["offset_msg_id"] == offset_msg_id(STORE, 1007) == "0A00000100002A9F00000000000003EF"
    assert (row["tags"], row["keys"], row["body"]) == ("TagA", "k1 k2", b"body-7")
    assert dict(row["properties"]) == {"TAGS": "TagA", "KEYS": "k1 k2", "UNIQ_KEY": "U7", "color": "red"}
    utc = dt.timezone.utc
    assert row["born_timestamp"] == dt.datetime(2023, 11, 14, 22, 13, 20, 123000, tzinfo=utc)
    assert row["store_timestamp"] == dt.datetime(2023, 11, 14, 22, 13, 20, 456000, tzinfo=utc)
    assert (row["born_host"], row["store_host"]) == ("192.168.1.5:50000", "10.0.0.1:10911")
    assert row["reconsume_times"] == 3


def test_missing_uniq_key_tags_keys() -> None:
    m = msg(1, properties={}, store_host=HostPort("::1", 10911))
    row = messages_to_batch([m], broker="b").to_pylist()[0]
    assert row["msg_id"] == row["offset_msg_id"] == m.offset_msg_id
    assert len(row["msg_id"]) == 56          # IPv6 store host
    assert row["tags"] is None and row["keys"] is None and row["properties"] == []
    assert row["store_host"] == "[::1]:10911"


def test_compressed_body_is_inflated() -> None:
    m = msg(1, body=zlib.compress(b"x" * 1000), sys_flag=MessageSysFlag.COMPRESSED)
    assert messages_to_batch([m], broker="b").column("body")[0].as_py() == b"x" * 1000


def test_retry_topic_restored_only_for_the_named_group() -> None:
    retried = msg(0, topic="%RETRY%g1", properties={"RETRY_TOPIC": "orders", "UNIQ_KEY": "U"})
    other = msg(1, topic="%RETRY%g2", properties={"RETRY_TOPIC": "payments"})
    no_prop = msg(2, topic="%RETRY%g1", properties={})
    b = messages_to_batch([retried, other, no_prop], broker="broker-b", restore_retry_topic_of="g1")
    assert b.column("topic").to_pylist() == ["orders", "%RETRY%g2", "%RETRY%g1"]
    assert b.column("broker").to_pylist() == ["broker-b"] * 3
    plain = messages_to_batch([retried], broker="broker-b")
    assert plain.column("topic").to_pylist() == ["%RETRY%g1"]


def test_empty_batch() -> None:
    b = messages_to_batch([], broker="b")
    assert b.num_rows == 0 and b.schema.equals(SOURCE_SCHEMA)


def test_ipc_round_trip_with_small_chunks() -> None:
    batches = [messages_to_batch([msg(i) for i in range(k, k + 3)], broker="b") for k in (0, 3, 6)]
    chunks = list(ipc_chunks(iter(batches), chunk_bytes=64))
    assert max(len(c) for c in chunks) <= 64
    out = list(read_ipc_chunks(iter(chunks)))
    assert [b.num_rows for b in out] == [3, 3, 3]
    assert pa.Table.from_batches(out).equals(pa.Table.from_batches(batches))


def test_empty_stream_has_schema_only() -> None:
    chunks = list(ipc_chunks(iter([])))
    assert chunks and list(read_ipc_chunks(iter(chunks))) == []


def test_reading_is_incremental() -> None:
    """The reader yields a batch before the stream's later chunks are produced."""
    produced: list[int] = []

    def batches():
        for k in range(5):
            produced.append(k)
            yield messages_to_batch([msg(i, body=b"y" * 5000) for i in range(10)], broker="b")

    reader = read_ipc_chunks(ipc_chunks(batches(), chunk_bytes=4096))
    first = next(reader)
    assert first.num_rows == 10
    assert len(produced) <= 2, "the whole stream was read before the first batch"
    assert sum(b.num_rows for b in reader) == 40


def test_truncated_stream_fails() -> None:
    data = b"".join(ipc_chunks(iter([messages_to_batch([msg(1)], broker="b")])))
    with pytest.raises(pa.ArrowInvalid):
        list(read_ipc_chunks(iter([data[: len(data) // 2]])))
