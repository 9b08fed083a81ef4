"""Our sink -> RocketMQ's Java consumers: a push consumer (concurrent and orderly) and a pull
consumer each read every row once, at-least-once and exactly-once writes alike; rows with
a sharding key reach the orderly and the pull consumer in the order they were written."""

from __future__ import annotations

from collections import Counter, defaultdict

import pytest

from tests.java.peer import JavaPeer, Received
from tests.sink.readback import write

KEYED, UNKEYED = 60, 40
KEYS = [f"order-{k}" for k in range(6)]


def rows() -> list[tuple[str, str | None]]:
    """body "seq:key", the first KEYED with a sharding key, the rest without."""
    out: list[tuple[str, str | None]] = [(f"{i}:{KEYS[i % len(KEYS)]}", KEYS[i % len(KEYS)]) for i in range(KEYED)]
    return out + [(f"{i}:-", None) for i in range(KEYED, KEYED + UNKEYED)]


def seq(m: Received) -> int:
    return int(m.body.decode().split(":")[0])


def check_once(got: list[Received]) -> None:
    counts = Counter(seq(m) for m in got)
    assert sorted(counts) == list(range(KEYED + UNKEYED)), sorted(set(range(KEYED + UNKEYED)) - set(counts))
    assert max(counts.values()) == 1, counts.most_common(3)


def check_key_order(got: list[Received]) -> None:
    """For each key: one queue, and the order received is the order written."""
    by_key: dict[str, list[Received]] = defaultdict(list)
    for m in got:
        key = m.body.decode().split(":")[1]
        if key != "-":
            by_key[key].append(m)
    for key, ms in by_key.items():
        assert len({(m.broker, m.queue_id) for m in ms}) == 1, key
        assert [seq(m) for m in ms] == sorted(seq(m) for m in ms), key


@pytest.fixture(scope="module", params=["at-least-once", "exactly-once"])
def written(request, spark, rocketmq) -> str:
    topic = rocketmq.create_topic("java_read", queues=2)
    # each key in one partition, in written order (order is kept per key within a
    # partition: two tasks writing the same key run side by side)
    df = (spark.createDataFrame([(b, k, seq) for seq, (b, k) in enumerate(rows())],
                                "body string, sharding_key string, seq int")
          .repartition(2, "sharding_key").sortWithinPartitions("seq").drop("seq"))
    write(df, rocketmq, topic=topic, deliveryGuarantee=request.param, batchSize=16)
    return topic


@pytest.mark.parametrize("kind", ["push-concurrent", "push-orderly", "pull"])
def test_a_java_consumer_reads_every_row_the_sink_wrote_once(rocketmq, java: JavaPeer, written: str,
                                                             kind: str) -> None:
    got = java.consume(rocketmq.namesrv_addr, written, rocketmq.unique("java_g"), kind, KEYED + UNKEYED)
    check_once(got)
    assert all(m.topic == written and m.reconsume_times == 0 for m in got)
    if kind != "push-concurrent":     # one thread a queue / offset order: the written order per key
        check_key_order(got)


def _compressible(i: int) -> str:
    return f"{i}:-:" + "".join(f'{{"line": {j}, "order": {i}}}' for j in range(400))   # ~8 KiB of JSON


def _write_compressed(spark, rocketmq, codec: str) -> tuple[str, list[str]]:  # type: ignore[no-untyped-def]
    topic = rocketmq.create_topic(f"java_{codec}", queues=2)
    bodies = [_compressible(i) for i in range(20)]
    df = spark.createDataFrame([(b,) for b in bodies], "body string").coalesce(1)
    write(df, rocketmq, topic=topic, compressionType=codec)
    return topic, bodies


def test_a_java_consumer_inflates_the_bodies_the_sink_compressed_with_zlib(spark, rocketmq, java: JavaPeer) -> None:
    topic, bodies = _write_compressed(spark, rocketmq, "zlib")
    got = java.consume(rocketmq.namesrv_addr, topic, rocketmq.unique("java_z"), "push-concurrent", len(bodies))
    assert sorted(m.body.decode() for m in got) == sorted(bodies)


@pytest.mark.parametrize("codec", ["lz4", "zstd"])
def test_a_5x_java_consumer_inflates_lz4_and_zstd_bodies_the_sink_wrote(spark, rocketmq, java5: JavaPeer,
                                                                         codec: str) -> None:
    """On 5.x brokers; a broker older than 5.0 refuses the write (4.x consumers read zlib
    bodies only), which tests/sink/test_batch_write.py shows."""
    if not rocketmq.is_5x:
        with pytest.raises(Exception, match="needs RocketMQ 5.x brokers"):
            _write_compressed(spark, rocketmq, codec)
        return
    topic, bodies = _write_compressed(spark, rocketmq, codec)
    got = java5.consume(rocketmq.namesrv_addr, topic, rocketmq.unique("java_c"), "pull", len(bodies))
    assert sorted(m.body.decode() for m in got) == sorted(bodies)
