"""Rows/s of the sink, at-least-once against exactly-once, on the same rows.

    python bench/sink_bench.py [--rows N] [--size BYTES] [--keys K] [--partitions P] [--runs R]

An embedded broker (two brokers, async flush) runs in a subprocess; Spark local[2] and an
auto-started sidecar in a private directory run here. Each run writes the same N rows (a
body of SIZE bytes; with K > 0 a sharding key of K distinct values) with ``df.write`` into a
fresh topic, once per guarantee, alternating, after one small warm-up write of each: rows/s
of the write (the job, commit included). Then a RocketMQ -> Spark -> RocketMQ stream of the
same N messages in 5 micro-batches (AvailableNow) for each guarantee: rows/s, and for
exactly-once the time each batch's commit took in the sidecar (its log). Prints a table and
exactly-once / at-least-once.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

from common import Timer, broker_process, local_spark, produce_fast, table  # also puts the project root on sys.path

from rocketmq_spark.client import ClientConfig, MQClient

GUARANTEES = ("at-least-once", "exactly-once")
_COMMIT_LINE = re.compile(r"commit of batch (\d+) of (\S+): .* in ([\d.]+) s")


def spark_session() -> Any:
    return local_spark("rocketmq-sink-bench")


def rows_df(spark: Any, n: int, size: int, keys: int, partitions: int) -> Any:
    from pyspark.sql import functions as F

    body = F.concat(F.lit("r"), F.lpad(F.col("id").cast("string"), size - 1, "0")).cast("binary")
    cols = [body.alias("body")]
    if keys:
        cols.append(F.concat(F.lit("k"), (F.col("id") % keys).cast("string")).alias("sharding_key"))
    return spark.range(n, numPartitions=partitions).select(*cols).cache()


def write(df: Any, ns: str, topic: str, guarantee: str) -> float:
    with Timer() as t:
        (df.write.format("rocketmq").mode("append").option("nameServer", ns).option("topic", topic)
         .option("deliveryGuarantee", guarantee).save())
    return t.seconds


def stream(spark: Any, ns: str, source: str, sink: str, guarantee: str, n: int, ck: str) -> float:
    q = (spark.readStream.format("rocketmq").option("nameServer", ns).option("topic", source)
         .option("consumerGroup", f"g_{sink}").option("startingOffsets", "earliest")
         .option("maxMessagesPerTrigger", str(max(1, n // 5))).load().select("body")
         .writeStream.format("rocketmq").option("nameServer", ns).option("topic", sink)
         .option("deliveryGuarantee", guarantee).option("checkpointLocation", ck)
         .trigger(availableNow=True).start())
    with Timer() as t:
        q.awaitTermination()
    if q.exception() is not None:
        raise RuntimeError(f"the {guarantee} stream failed: {q.exception()}")
    return t.seconds


def stored(mq: MQClient, topic: str) -> int:
    return sum(mq.max_offset(q) for q in mq.subscribe_queues(topic, refresh=True))


def commit_times(sidecar_dir: str) -> dict[str, list[float]]:
    """Per transactional id, each batch's commit seconds, from the sidecar's log."""
    out: dict[str, list[float]] = {}
    for log in Path(sidecar_dir).rglob("*.log"):
        for m in _COMMIT_LINE.finditer(log.read_text(errors="replace")):
            out.setdefault(m.group(2), []).append(float(m.group(3)))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=100_000)
    p.add_argument("--size", type=int, default=100)
    p.add_argument("--keys", type=int, default=0, help="distinct sharding keys (0: none)")
    p.add_argument("--partitions", type=int, default=2)
    p.add_argument("--runs", type=int, default=2)
    args = p.parse_args(argv)
    sidecar_dir = tempfile.mkdtemp(prefix="rmq-sink-bench-sc-")
    os.chmod(sidecar_dir, 0o700)
    os.environ["ROCKETMQ_SPARK_SIDECAR_DIR"] = sidecar_dir
    tmp = tempfile.mkdtemp(prefix="rmq-sink-bench-")
    results: dict[str, list[float]] = {f"write {g}": [] for g in GUARANTEES}
    results.update({f"stream {g}": [] for g in GUARANTEES})
    with broker_process() as ns:
        mq = MQClient(ClientConfig.parse(ns))
        spark = spark_session()
        df = rows_df(spark, args.rows, args.size, args.keys, args.partitions)
        df.count()
        warm = rows_df(spark, 2000, args.size, args.keys, args.partitions)
        for g in GUARANTEES:
            topic = f"warm_{g.replace('-', '_')}_{uuid.uuid4().hex[:6]}"
            mq.create_topic(topic, queues=4)
            write(warm, ns, topic, g)
        for run in range(args.runs):
            for g in GUARANTEES:
                topic = f"sink_{g.replace('-', '_')}_{run}_{uuid.uuid4().hex[:6]}"
                mq.create_topic(topic, queues=4)
                secs = write(df, ns, topic, g)
                assert stored(mq, topic) == args.rows, f"{topic}: {stored(mq, topic)} stored"
                results[f"write {g}"].append(args.rows / secs)
        source = f"src_{uuid.uuid4().hex[:6]}"
        mq.create_topic(source, queues=4)
        queues = sorted(mq.subscribe_queues(source, refresh=True))
        produce_fast(mq, queues, args.rows, args.size)
        for g in GUARANTEES:
            sink = f"out_{g.replace('-', '_')}_{uuid.uuid4().hex[:6]}"
            mq.create_topic(sink, queues=4)
            secs = stream(spark, ns, source, sink, g, args.rows, str(Path(tmp) / sink))
            assert stored(mq, sink) == args.rows, f"{sink}: {stored(mq, sink)} stored"
            results[f"stream {g}"].append(args.rows / secs)
        spark.stop()
        mq.close()
    rows = [{"what": k, "rows": args.rows, "rows/s (median)": statistics.median(v),
             "rows/s (best)": max(v)} for k, v in results.items()]
    print(table(rows))
    for kind in ("write", "stream"):
        ratio = statistics.median(results[f"{kind} exactly-once"]) / statistics.median(results[f"{kind} at-least-once"])
        print(f"{kind}: exactly-once / at-least-once = {ratio:.2f}")
    times = commit_times(sidecar_dir)
    per_batch = [s for txn, ss in times.items() if txn.startswith("ck-") for s in ss]
    whole_jobs = [s for txn, ss in times.items() if txn.startswith("write-") for s in ss]
    if per_batch:
        print(f"stream commit per micro-batch ({args.rows // 5} rows): median {statistics.median(per_batch):.3f} s, "
              f"max {max(per_batch):.3f} s over {len(per_batch)} batches")
    if whole_jobs:
        print(f"batch write commit ({args.rows} rows): median {statistics.median(whole_jobs):.3f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
