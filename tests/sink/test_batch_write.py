"""df.write.format("rocketmq") for real: a local[2] Spark, the embedded cluster (or
$ROCKETMQ_NAMESRV) and an auto-started sidecar; what arrives is read back with the C++
client and with our own."""

from __future__ import annotations

import os

import pytest
from pyspark.sql import functions as F
from pyspark.sql.types import (ArrayType, BinaryType, IntegerType, LongType, MapType, StringType,
                               StructField, StructType)

from rocketmq_spark.remoting.codes import MessageSysFlag
from rocketmq_spark.remoting.compression import DEFLATE
from rocketmq_spark.remoting.message import PROP_SHARDING_KEY, PROP_UNIQ_KEY
from rocketmq_spark.sharding import select_queue
from tests.interop.helpers import big, binary, wait_until

from .readback import count, cpp_read, ours_read, write

ROWS = StructType([
    StructField("seq", IntegerType(), False),
    StructField("body", BinaryType(), False),
    StructField("tags", StringType(), True),
    StructField("keys", ArrayType(StringType()), True),
    StructField("properties", MapType(StringType(), StringType()), True),
    StructField("sharding_key", StringType(), True),
])
KEYS = [f"customer-{k}" for k in range(5)]
N = 120


def _rows() -> list[tuple]:
    rows = []
    for i in range(N):
        body = big(f"row-{i}") if i % 40 == 7 else binary(f"row-{i}")     # some compressed
        rows.append((i, body, f"Tag{i % 3}", [f"k{i}", f"order-{i}"],
                     {"seq": str(i), "note": "x\x00y" if i % 2 else "plain"}, KEYS[i % len(KEYS)]))
    return rows


def test_rows_arrive_byte_for_byte_and_in_order_per_sharding_key(spark, rocketmq, cpp_home):
    topic = rocketmq.create_topic("sink", queues=2)
    sent = _rows()
    df = (spark.createDataFrame(sent, ROWS)
          .repartition(2, "sharding_key").sortWithinPartitions("seq").drop("seq"))
    write(df, rocketmq, topic=topic, batchSize=16)

    by_seq = {r[0]: r for r in sent}
    publish = sorted(rocketmq.admin.publish_queues(topic, refresh=True))

    # Our client: every message once, fields intact, each key on its own queue in row order.
    ours = ours_read(rocketmq, topic)
    got = [m for msgs in ours.values() for m in msgs]
    assert len(got) == N
    for (broker, qid), msgs in ours.items():
        for m in msgs:
            seq, body, tags, keys, props, key = by_seq[int(m.properties["seq"])]
            assert (m.payload(), m.tags, m.keys, m.properties["note"], m.properties[PROP_SHARDING_KEY]) == \
                (body, tags, " ".join(keys), props["note"], key)
            want_q = select_queue(key, publish)
            assert (want_q.broker_name, want_q.queue_id) == (broker, qid), f"{key} on the wrong queue"
    for key in KEYS:
        placed = {q for q, msgs in ours.items() for m in msgs if m.properties[PROP_SHARDING_KEY] == key}
        assert len(placed) == 1, f"{key} spread over {placed}"
        seqs = [int(m.properties["seq"]) for m in ours[placed.pop()] if m.properties[PROP_SHARDING_KEY] == key]
        assert seqs == sorted(seqs) == [s for s in range(N) if KEYS[s % len(KEYS)] == key]

    # The C++ client reads the same messages: same queues, offsets, bodies and fields.
    cpp = cpp_read(rocketmq, topic)
    assert set(cpp) == set(ours)
    for q, msgs in cpp.items():
        assert [(m.queue_offset, m.body, m.tags, m.keys, m.properties.get("note"), m.msg_id) for m in msgs] == \
            [(m.queue_offset, m.payload(), m.tags, m.keys, m.properties["note"], m.properties[PROP_UNIQ_KEY])
             for m in ours[q]]
    assert sorted(m.body for msgs in cpp.values() for m in msgs) == sorted(r[1] for r in sent)


def test_string_bodies_topic_per_row_and_delay_level(spark, rocketmq):
    default = rocketmq.create_topic("sink_default", queues=1)
    other = rocketmq.create_topic("sink_other", queues=1)
    rows = [("héllo ✓", None, "single-key", None), ("to other", other, None, None),
            ("x", default, "k", None), ("later", None, None, 1)]
    df = spark.createDataFrame(rows, "body string, topic string, keys string, delay_level int")
    write(df, rocketmq, topic=default)

    # delay level 1 (1 s): the broker holds the message back, then puts it in the topic
    wait_until(lambda: count(rocketmq, default) == 3, 30, "the delayed message in " + default)
    got = [m for msgs in ours_read(rocketmq, default).values() for m in msgs]
    assert sorted((m.payload(), m.keys) for m in got) == \
        sorted([("héllo ✓".encode(), "single-key"), (b"x", "k"), (b"later", None)])
    delayed = next(m for m in got if m.payload() == b"later")
    assert delayed.properties.get("DELAY") == "1"
    assert [m.payload() for msgs in ours_read(rocketmq, other).values() for m in msgs] == [b"to other"]


@pytest.mark.parametrize("make, options, message", [
    (lambda s: s.createDataFrame([("x",)], "tags string"), {}, "needs a 'body' column"),
    (lambda s: s.createDataFrame([(b"x", 1)], "body binary, queue_id int"), {},
     "column 'queue_id' is not a column of the rocketmq sink; the allowed columns are body, topic"),
    (lambda s: s.createDataFrame([(1,)], "body int"), {}, "column 'body' has type int"),
    (lambda s: s.createDataFrame([(b"x",)], "body binary"), {"topic": None},
     "needs a topic: set option 'topic'"),
    (lambda s: s.createDataFrame([(b"x",)], "body binary"), {"batchSize": "0"},
     "option 'batchSize': 0 must be between 1 and 8192"),
    (lambda s: s.createDataFrame([(b"x",)], "body binary"), {"consumeMode": "orderly"},
     "(?i)unknown option 'consumeMode' for the rocketmq sink"),
])
def test_bad_schema_or_options_fail_before_any_row_is_sent(spark, rocketmq, make, options, message):
    topic = rocketmq.create_topic("sink_bad", queues=1)
    opts = {"topic": topic, **options}
    with pytest.raises(Exception, match=message):
        write(make(spark), rocketmq, **{k: v for k, v in opts.items() if v is not None})
    assert count(rocketmq, topic) == 0


def test_columns_are_checked_on_the_driver_before_any_task_runs(spark, rocketmq, tmp_path):
    topic = rocketmq.create_topic("sink_driver", queues=1)
    ran = tmp_path / "ran"
    ran.mkdir()

    @F.udf("binary", useArrow=False)
    def body(i):                               # leaves a mark for every row a task computes
        (ran / str(i)).touch()
        return b"row-%d" % i

    df = spark.range(3).select(body("id").alias("body"), F.lit(1).alias("extra"))
    with pytest.raises(Exception, match="column 'extra' is not a column of the rocketmq sink"):
        write(df, rocketmq, topic=topic)
    assert list(ran.iterdir()) == []
    write(df.drop("extra"), rocketmq, topic=topic)
    assert sorted(p.name for p in ran.iterdir()) == ["0", "1", "2"]
    assert count(rocketmq, topic) == 3


def test_overwrite_and_missing_name_server_are_refused(spark, rocketmq):
    df = spark.createDataFrame([(b"x",)], "body binary")
    with pytest.raises(Exception, match=r"only appends .*write with mode\('append'\)"):
        df.write.format("rocketmq").mode("overwrite").option("nameServer", rocketmq.namesrv_addr) \
            .option("topic", "t").save()
    with pytest.raises(Exception, match="option 'nameServer' is required"):
        df.write.format("rocketmq").mode("append").option("topic", "t").save()


def test_a_bad_row_fails_the_job_naming_row_and_column(spark, rocketmq):
    topic = rocketmq.create_topic("sink_badrow", queues=1)
    df = spark.createDataFrame([(b"ok", {"UNIQ_KEY": "mine"})], "body binary, properties map<string,string>")
    with pytest.raises(Exception, match="row 1: column 'properties' has property 'UNIQ_KEY', which RocketMQ reserves"):
        write(df.coalesce(1), rocketmq, topic=topic)
    df = spark.createDataFrame([(b"a", 0), (None, 1)], "body binary, delay_level long")
    with pytest.raises(Exception, match="row 2: column 'body' is null"):
        write(df.coalesce(1), rocketmq, topic=topic)
    df = spark.createDataFrame([("a",), ("",)], "body string")      # Java refuses, 5.x brokers fail
    with pytest.raises(Exception, match="row 2: column 'body' is empty; RocketMQ refuses"):
        write(df.coalesce(1), rocketmq, topic=topic)
    df = spark.createDataFrame([(b"a", 99)], StructType([StructField("body", BinaryType()),
                                                         StructField("delay_level", LongType())]))
    with pytest.raises(Exception, match="column 'delay_level' value 99 is not a delay level"):
        write(df, rocketmq, topic=topic)


@pytest.mark.parametrize("guarantee, batch", [("at-least-once", 8), ("exactly-once", 3)])
def test_rows_without_a_key_take_turns_over_every_queue(spark, rocketmq, guarantee, batch):
    """Each Send call (batchSize rows) used to start again on the topic's first queue, so a
    write without sharding keys put every row on one queue of one broker (half messages: on
    the first three of four). Now the calls go on where the last one stopped: a batch a
    queue (a message a queue for half messages)."""
    topic = rocketmq.create_topic("sink_spread", queues=2)
    queues = sorted(rocketmq.admin.publish_queues(topic, refresh=True))
    n = 16 * len(queues)
    df = spark.createDataFrame([(f"row-{i}",) for i in range(n)], "body string").coalesce(1)
    write(df, rocketmq, topic=topic, batchSize=batch, deliveryGuarantee=guarantee)
    stored = ours_read(rocketmq, topic)
    assert {q: len(msgs) for q, msgs in stored.items()} == {(q.broker_name, q.queue_id): 16 for q in queues}
    assert sorted(m.payload() for msgs in stored.values() for m in msgs) == sorted(b"row-%d" % i for i in range(n))


def test_a_refused_send_fails_the_job_with_the_broker_code(spark, rocketmq):
    topic = rocketmq.create_topic("sink_refused", queues=1)
    too_big = os.urandom(4 * 1024 * 1024 + 1)                   # over maxMessageSize, incompressible
    df = spark.createDataFrame([(b"fine",), (too_big,)], "body binary").coalesce(1)
    with pytest.raises(Exception, match=r"rows 1\.\.2 to \S+ failed: the broker answered "
                                        r"MESSAGE_ILLEGAL \(code 13\)") as info:
        write(df, rocketmq, topic=topic, batchSize=2)
    assert "SendFailed" in str(info.value)


def test_sharding_keys_into_a_topic_that_does_not_exist_yet(spark, rocketmq):
    """The broker creates a topic at its first send (autoCreateTopicEnable): a keyed write
    must work there as an unkeyed one does, each key on one queue, in row order."""
    from rocketmq_spark.errors import BrokerError

    topic = rocketmq.unique("sink_new")
    rows = [(f"{KEYS[i % len(KEYS)]}:{i}", KEYS[i % len(KEYS)]) for i in range(50)]
    write(spark.createDataFrame(rows, "body string, sharding_key string").coalesce(1), rocketmq, topic=topic)

    def stored() -> int:
        try:
            return count(rocketmq, topic)
        except BrokerError as exc:            # TOPIC_NOT_EXIST until the broker registers it
            if exc.code != 17:
                raise
            return 0

    wait_until(lambda: stored() == len(rows), 60, f"{topic} routed with every message")
    placed: dict[str, set] = {}
    for q, msgs in ours_read(rocketmq, topic).items():
        for m in msgs:
            key, seq = m.payload().decode().split(":")
            placed.setdefault(key, set()).add(q)
            assert m.properties[PROP_SHARDING_KEY] == key
        per_key: dict[str, list[int]] = {}
        for m in msgs:
            key, seq = m.payload().decode().split(":")
            per_key.setdefault(key, []).append(int(seq))
        assert all(s == sorted(s) for s in per_key.values())
    assert set(placed) == set(KEYS) and all(len(qs) == 1 for qs in placed.values()), placed


def _json_body(i: int, size: int) -> bytes:
    row = '{"order": %d, "region": "eu", "amount": %d, "items": [' % (i, i * 7)
    item = '{"sku": "sku-%05d", "qty": %d}, '
    out = row
    while len(out) < size - 2:
        out += item % (i * 31 + len(out), len(out) % 9)
    return (out[:size - 2] + "]}").encode()


@pytest.mark.parametrize("codec", ["zlib", "lz4", "zstd", "none"])
def test_bodies_over_the_threshold_go_compressed_as_the_options_ask(spark, rocketmq, codec):
    """compressionType / compressBodyOverBytes: bodies at or over the threshold are stored
    compressed with the codec (sysFlag bit 0, and 5.x's type bits for lz4 and zstd), smaller
    ones as they are; both read back byte for byte, by our client and by the source. lz4 and
    zstd are refused, naming the broker's version, by brokers older than 5.0."""
    topic = rocketmq.create_topic(f"sink_{codec}", queues=2)
    bodies = [_json_body(i, 8192) if i % 3 else b"small %d" % i for i in range(30)]
    df = spark.createDataFrame([(b,) for b in bodies], "body binary").coalesce(1)
    options = dict(topic=topic, compressionType=codec, compressBodyOverBytes=1000)
    if codec in ("lz4", "zstd") and not rocketmq.is_5x:
        with pytest.raises(Exception, match=f"compressionType '{codec}' needs RocketMQ 5.x brokers"):
            write(df, rocketmq, **options)
        assert count(rocketmq, topic) == 0
        return
    write(df, rocketmq, **options)

    stored = [m for msgs in ours_read(rocketmq, topic).values() for m in msgs]
    assert sorted(m.payload() for m in stored) == sorted(bodies)
    flags = {codec: MessageSysFlag.COMPRESSED for codec in ("zlib",)}
    flags.update({name: MessageSysFlag.COMPRESSED | DEFLATE[name][0] for name in ("lz4", "zstd")})
    for m in stored:
        big_one = len(m.payload()) >= 1000
        want = flags[codec] if big_one and codec != "none" else 0
        assert m.sys_flag & (MessageSysFlag.COMPRESSED | MessageSysFlag.COMPRESSION_TYPE_MASK) == want
        if want:
            assert len(m.body) < len(m.payload()) // 2      # JSON compresses well
    read = (spark.read.format("rocketmq").option("nameServer", rocketmq.namesrv_addr)
            .option("topic", topic).load())
    assert sorted(bytes(r.body) for r in read.collect()) == sorted(bodies)
