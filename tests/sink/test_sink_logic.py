"""The sink's pure logic without Spark or a cluster: options, the schema check, rows to
messages, and how messages are grouped into Send calls (with a recording send function)."""

from __future__ import annotations

import pickle

import pyarrow as pa
import pytest
from pyspark.sql.types import (ArrayType, BinaryType, IntegerType, LongType, MapType, StringType,
                               StructField, StructType, TimestampType)

from rocketmq_spark.errors import BrokerError, ConfigError
from rocketmq_spark.sidecar import SidecarError
from rocketmq_spark.remoting.route import MessageQueue
from rocketmq_spark.spark import sink_options
from rocketmq_spark.spark.writer import (CALL_BYTES, Layout, SendFailed, SinkCommit, SinkError,
                                         check_schema, write_batches)
from rocketmq_spark.structs import SendResult

NS = "127.0.0.1:9876"


def schema(**cols) -> StructType:
    return StructType([StructField(name, t, True) for name, t in cols.items()])


# ------------------------------------------------------------------ options

def test_options_parse_with_defaults_and_hide_secrets():
    o = sink_options.parse({"NameServer": f"{NS};127.0.0.2:9876", "topic": "orders",
                            "accessKey": "AK", "secretkey": "very-secret", "path": "ignored"})
    assert (o.name_server, o.topic, o.producer_group, o.sidecar, o.batch_size) == \
        (f"{NS};127.0.0.2:9876", "orders", None, "auto", sink_options.DEFAULT_BATCH_SIZE)
    assert o.cluster.access_key == "AK" and o.cluster.secret_key == "very-secret"
    assert "very-secret" not in repr(o) and "very-secret" not in repr(o.cluster)
    o = sink_options.parse({"nameServer": NS, "producerGroup": "pg_1", "batchSize": "10",
                            "sidecar": "unix:/run/s.sock"})
    assert (o.topic, o.producer_group, o.batch_size, o.sidecar) == (None, "pg_1", 10, "unix:/run/s.sock")


@pytest.mark.parametrize("opts, message", [
    ({}, "option 'nameServer' is required"),
    ({"nameServer": "nohost"}, "'nohost' is not host:port"),
    ({"nameServer": NS, "batchSize": "0"}, "option 'batchSize': 0 must be between 1 and 8192"),
    ({"nameServer": NS, "batchSize": "many"}, "option 'batchSize': 'many' is not an integer"),
    ({"nameServer": NS, "topic": "a,b"}, "names 2 topics; the sink writes to one"),
    ({"nameServer": NS, "topic": "bad topic"}, "topic 'bad topic' may only contain"),
    ({"nameServer": NS, "consumerGroup": "g"}, "unknown option 'consumerGroup' for the rocketmq sink"),
    ({"nameServer": NS, "producerGroup": "p g"}, "option 'producerGroup': group 'p g'"),
    ({"nameServer": NS, "sidecar": "somewhere"}, "option 'sidecar': 'somewhere' is not one of"),
    ({"nameServer": NS, "accessKey": "AK"}, "'accessKey' and 'secretKey' must be set together"),
])
def test_bad_options_are_named(opts, message):
    with pytest.raises(ConfigError, match=message) as info:
        sink_options.parse(opts)
    assert "very-secret" not in str(info.value)


# ------------------------------------------------------------------ schema

def test_schema_check_accepts_every_sink_column():
    layout = check_schema(schema(body=StringType(), topic=StringType(), tags=StringType(),
                                 keys=ArrayType(StringType()), properties=MapType(StringType(), StringType()),
                                 sharding_key=StringType(), delay_level=LongType()), None)
    assert layout.body_is_string
    assert layout.names == ("body", "topic", "tags", "keys", "properties", "sharding_key", "delay_level")
    assert not check_schema(schema(body=BinaryType()), "t").body_is_string


@pytest.mark.parametrize("cols, topic, message", [
    ({"tags": StringType()}, "t", "needs a 'body' column .*the DataFrame has tags"),
    ({"body": BinaryType(), "queue_id": IntegerType()}, "t",
     "column 'queue_id' is not a column of the rocketmq sink; the allowed columns are body, topic, "
     "tags, keys, properties, sharding_key, delay_level, deliver_time, delay_ms"),
    ({"body": IntegerType()}, "t", "column 'body' has type int; the rocketmq sink takes binary or string"),
    ({"body": BinaryType(), "keys": ArrayType(IntegerType())}, "t",
     "column 'keys' has type array<int>; .* string or array<string>"),
    ({"body": BinaryType(), "properties": MapType(StringType(), IntegerType())}, "t",
     "column 'properties' has type map<string,int>"),
    ({"body": BinaryType(), "delay_level": StringType()}, "t", "column 'delay_level' has type string"),
    ({"body": BinaryType()}, None, "needs a topic: set option 'topic' or give the DataFrame a 'topic' column"),
])
def test_schema_check_names_the_bad_column(cols, topic, message):
    with pytest.raises(ConfigError, match=message):
        check_schema(schema(**cols), topic)


# ------------------------------------------------------------------ rows and Send calls

Q = MessageQueue("t", "broker-a", 0)


class Recorder:
    """A send function that records each call and answers SEND_OK (or ``status``)."""

    def __init__(self, status: str = "SEND_OK", error: Exception | None = None) -> None:
        self.calls: list[list] = []
        self.status, self.error = status, error

    def __call__(self, items):
        if self.error is not None:
            raise self.error
        self.calls.append(list(items))
        return [SendResult(self.status, f"id{i}", f"off{i}", Q, i) for i in range(len(items))]


def opts(**kw) -> sink_options.SinkOptions:
    return sink_options.parse({"nameServer": NS, **{k: str(v) for k, v in kw.items()}})


def arrow(**cols) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict(cols)


def layout_of(batch: pa.RecordBatch) -> Layout:
    return Layout(tuple(batch.schema.names), pa.types.is_string(batch.schema.field("body").type))


def test_rows_become_messages_in_order():
    batch = arrow(body=[b"\x00a\x00", b"b", b"c"], topic=["t1", None, "t2"], tags=["A", "", None],
                  keys=[["k1", "k2"], None, ["", "k3", None]],
                  properties=pa.array([[("p", "1"), ("e", ""), ("n", None)], None, []],
                                      pa.map_(pa.string(), pa.string())),
                  sharding_key=["s", None, ""], delay_level=pa.array([0, 3, None], pa.int8()))
    rec = Recorder()
    commit = write_batches(opts(topic="dflt"), layout_of(batch), iter([batch]), send=rec, partition=4)
    assert commit == SinkCommit(partition=4, messages=3, send_calls=1)
    assert pickle.loads(pickle.dumps(commit)) == commit          # goes back to the driver
    [(a, b, c)] = rec.calls
    assert (a.message.topic, a.message.body, a.message.tags, a.message.keys, dict(a.message.properties),
            a.sharding_key, a.message.delay_level) == ("t1", b"\x00a\x00", "A", "k1 k2", {"p": "1"}, "s", 0)
    assert (b.message.topic, b.message.body, b.message.tags, b.message.keys, b.sharding_key,
            b.message.delay_level) == ("dflt", b"b", None, None, None, 3)
    assert (c.message.topic, c.message.keys, c.sharding_key, c.message.tags) == ("t2", "k3", None, None)


def test_string_bodies_are_utf8():
    batch = arrow(body=["größe ✓"], keys=["a b"])
    rec = Recorder()
    write_batches(opts(topic="t"), layout_of(batch), iter([batch]), send=rec)
    assert rec.calls[0][0].message.body == "größe ✓".encode()
    assert rec.calls[0][0].message.keys == "a b"


def test_send_calls_hold_batch_size_messages_and_keep_row_order():
    batches = [arrow(body=[b"%d" % i for i in range(j, j + 7)]) for j in range(0, 21, 7)]
    rec = Recorder()
    commit = write_batches(opts(topic="t", batchSize=5), layout_of(batches[0]), iter(batches), send=rec)
    assert [len(c) for c in rec.calls] == [5, 5, 5, 5, 1]
    assert [o.message.body for c in rec.calls for o in c] == [b"%d" % i for i in range(21)]
    assert (commit.messages, commit.send_calls) == (21, 5)


def test_a_send_call_is_cut_before_it_gets_too_big():
    big = b"x" * (CALL_BYTES // 3)
    batch = arrow(body=[big] * 5)
    rec = Recorder()
    write_batches(opts(topic="t"), layout_of(batch), iter([batch]), send=rec)
    assert [len(c) for c in rec.calls] == [2, 2, 1]


def test_no_rows_no_call():
    rec = Recorder()
    commit = write_batches(opts(topic="t"), Layout(("body",), False), iter([]), send=rec)
    assert rec.calls == [] and commit.messages == 0


@pytest.mark.parametrize("cols, message", [
    ({"body": [b"a", None]}, "partition 2, row 2: column 'body' is null"),
    ({"body": [b"a", b""]}, "partition 2, row 2: column 'body' is empty; RocketMQ refuses"),
    ({"body": ["a", ""]}, "row 2: column 'body' is empty"),
    ({"body": [b"a"], "topic": pa.array([None], pa.string())}, "row 1: column 'topic' is null and option"),
    ({"body": [b"a"], "topic": ["no spaces"]}, "column 'topic' value 'no spaces' is not a topic name"),
    ({"body": [b"a"], "tags": ["x\x01y"]}, "column 'tags' value 'x\\\\x01y' contains \\\\x01 or \\\\x02"),
    ({"body": [b"a"], "delay_level": [19]}, "column 'delay_level' value 19 is not a delay level"),
    ({"body": [b"a"], "delay_level": [-1]}, "value -1 is not a delay level"),
    ({"body": [b"a"], "properties": pa.array([[("UNIQ_KEY", "x")]], pa.map_(pa.string(), pa.string()))},
     "has property 'UNIQ_KEY', which RocketMQ reserves; drop it"),
    ({"body": [b"a"], "properties": pa.array([[("TAGS", "x")]], pa.map_(pa.string(), pa.string()))},
     "has property 'TAGS', which RocketMQ reserves; use the 'tags' column"),
    ({"body": [b"a"], "properties": pa.array([[("", "x")]], pa.map_(pa.string(), pa.string()))},
     "has a property with an empty name"),
])
def test_bad_rows_are_named(cols, message):
    batch = arrow(**cols)
    if "topic" not in cols:
        o = opts(topic="t")
    else:
        o = opts()
    rec = Recorder()
    with pytest.raises(SinkError, match=message):
        write_batches(o, layout_of(batch), iter([batch]), send=rec, partition=2)


def test_a_refused_send_names_the_code_and_remark():
    rec = Recorder(error=BrokerError(13, "the message is illegal, maybe msg body or properties length not matched"))
    batch = arrow(body=[b"a", b"b"])
    with pytest.raises(SendFailed, match=r"partition 1, rows 1\.\.2 to t failed: the broker answered "
                                         r"MESSAGE_ILLEGAL \(code 13\): the message is illegal") as info:
        write_batches(opts(topic="t"), layout_of(batch), iter([batch]), send=rec, partition=1)
    assert (info.value.code, info.value.remark.startswith("the message is illegal")) == (13, True)

    rec = Recorder(error=SidecarError("sidecar at unix:/x: UNAVAILABLE"))
    with pytest.raises(SendFailed, match="SidecarError: sidecar at unix:/x: UNAVAILABLE") as info:
        write_batches(opts(topic="t"), layout_of(batch), iter([batch]), send=rec)
    assert info.value.code is None


def test_a_message_not_stored_with_send_ok_fails_the_task():
    batch = arrow(body=[b"a"])
    with pytest.raises(SendFailed, match="row 1: the broker stored the message in t/broker-a/0 at "
                                         "offset 0 with status FLUSH_DISK_TIMEOUT, not SEND_OK"):
        write_batches(opts(topic="t"), layout_of(batch), iter([batch]), send=Recorder("FLUSH_DISK_TIMEOUT"))


def test_writers_come_from_the_data_source_without_showing_secrets():
    from rocketmq_spark.spark.source import RocketMQDataSource
    from rocketmq_spark.spark.writer import RocketMQStreamWriter, RocketMQWriter

    ds = RocketMQDataSource({"nameServer": NS, "topic": "t", "accessKey": "AK", "secretKey": "very-secret"})
    w = ds.writer(schema(body=BinaryType()), False)
    sw = ds.streamWriter(schema(body=StringType()), True)      # complete mode: resends each trigger
    assert isinstance(w, RocketMQWriter) and isinstance(sw, RocketMQStreamWriter)
    assert sw.layout.body_is_string and not w.layout.body_is_string
    restored = pickle.loads(pickle.dumps(w))                     # Spark ships it to the tasks
    assert restored.opts == w.opts and restored.opts.secret_key == "very-secret"
    assert "very-secret" not in repr(w) and "very-secret" not in repr(sw)
    with pytest.raises(ConfigError, match=r"only appends .*mode\('append'\)"):
        ds.writer(schema(body=BinaryType()), True)


# ------------------------------------------------------------------ timer rows

def test_timer_rows_carry_timer_deliver_ms_and_go_one_per_row():
    """deliver_time (a timestamp) and delay_ms (from the task's clock) both become
    TIMER_DELIVER_MS; a time not ahead of now, a null or a 0 delay: a plain message."""
    import time

    future = time.time_ns() // 1000 + 3_600_000_000          # an hour ahead, in µs
    batch = pa.RecordBatch.from_pydict({
        "body": [b"at", b"after", b"past", b"none"],
        "deliver_time": pa.array([future, None, 1_000_000, None], pa.timestamp("us", tz="UTC")),
        "delay_ms": pa.array([None, 5000, None, 0], pa.int64())})
    rec = Recorder()
    before = time.time_ns() // 1_000_000
    write_batches(opts(topic="t"), layout_of(batch), iter([batch]), send=rec)
    after = time.time_ns() // 1_000_000
    at, later, past, none = (o.message.properties for o in rec.calls[0])
    assert at == {"TIMER_DELIVER_MS": str(future // 1000)}
    assert before + 5000 <= int(later["TIMER_DELIVER_MS"]) <= after + 5000
    assert past == {} and none == {}


def test_timer_columns_in_the_schema_and_refused_with_exactly_once():
    layout = check_schema(schema(body=BinaryType(), deliver_time=TimestampType(), delay_ms=IntegerType()), "t")
    assert layout.names == ("body", "deliver_time", "delay_ms")
    with pytest.raises(ConfigError, match="column 'deliver_time' has type string; the rocketmq sink takes timestamp"):
        check_schema(schema(body=BinaryType(), deliver_time=StringType()), "t")
    for column, kind in (("deliver_time", TimestampType()), ("delay_ms", LongType())):
        with pytest.raises(ConfigError, match=f"column '{column}' cannot be written with "
                                              f"deliveryGuarantee=exactly-once: RocketMQ's transactional "
                                              f"messages cannot be timer messages"):
            check_schema(schema(body=BinaryType(), **{column: kind}), "t", exactly_once=True)


@pytest.mark.parametrize("cols, message", [
    ({"delay_ms": [-5]}, "row 1: column 'delay_ms' value -5 is negative"),
    ({"delay_ms": [10], "deliver_time": pa.array([10**18], pa.timestamp("us", tz="UTC"))},
     "column 'delay_ms' and column 'deliver_time' are both set"),
    ({"delay_ms": [10], "delay_level": [2]}, "column 'delay_level' and a timer .* are both set"),
    ({"properties": pa.array([[("TIMER_DELIVER_MS", "1")]], pa.map_(pa.string(), pa.string()))},
     "has property 'TIMER_DELIVER_MS', which RocketMQ reserves; use the 'deliver_time' column"),
    ({"properties": pa.array([[("TIMER_DELAY_SEC", "1")]], pa.map_(pa.string(), pa.string()))},
     "has property 'TIMER_DELAY_SEC', which RocketMQ reserves; drop it"),
])
def test_bad_timer_rows_are_named(cols, message):
    batch = arrow(body=[b"a"], **cols)
    with pytest.raises(SinkError, match=message):
        write_batches(opts(topic="t"), layout_of(batch), iter([batch]), send=Recorder())
