"""Rows/s of the sink, at-least-once against exactly-once, on the same rows.

    python bench/sink_bench.py [--rows N] [--size BYTES] [--keys K] [--partitions P] [--runs R]
                               [--name-server HOST:PORT] [--option KEY=VALUE ...]

An embedded broker (two brokers, async flush) runs in a subprocess, or, with
``--name-server``, the cluster there is used (a real Apache cluster: ``scripts/apache-cluster
start 5.5.0 --dir DIR`` prints its address; topics are created on every master); Spark local[2] and an
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
import contextlib
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


EXTRA: dict[str, str] = {}      # --option: every write's and stream's, both guarantees


def write(df: Any, ns: str, topic: str, guarantee: str) -> float:
    with Timer() as t:
        (df.write.format("rocketmq").mode("append").option("nameServer", ns).option("topic", topic)
         .option("deliveryGuarantee", guarantee).options(**EXTRA).save())
    return t.seconds


def stream(spark: Any, ns: str, source: str, sink: str, guarantee: str, n: int, ck: str) -> float:
    q = (spark.readStream.format("rocketmq").option("nameServer", ns).option("topic", source)
         .option("consumerGroup", f"g_{sink}").option("startingOffsets", "earliest")
         .option("maxMessagesPerTrigger", str(max(1, n // 5))).options(**EXTRA).load().select("body")
         .writeStream.format("rocketmq").option("nameServer", ns).option("topic", sink)
         .option("deliveryGuarantee", guarantee).option("checkpointLocation", ck).options(**EXTRA)
         .trigger(availableNow=True).start())
    with Timer() as t:
        q.awaitTermination()
    if q.exception() is not None:
        raise RuntimeError(f"the {guarantee} stream failed: {q.exception()}")
    return t.seconds


def create(mq: MQClient, topic: str, queues: int = 4, timeout: float = 60.0) -> None:
    """A topic of ``queues`` queues on every master, once the NameServer routes them all
    (a real broker registers a new topic a moment after creating it)."""
    import time

    mq.create_topic(topic, queues=queues)
    want = queues * len(mq.cluster_brokers())
    deadline = time.monotonic() + timeout
    while True:
        try:
            if len(mq.subscribe_queues(topic, refresh=True)) >= want:
                return
        except Exception:  # noqa: BLE001 - not routed yet
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"topic {topic} not routed with {want} queues in {timeout:g} s")
        time.sleep(0.1)


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
    p.add_argument("--name-server", help="a running cluster's NameServer (default: an embedded broker)")
    p.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                   help="a source and sink option for every run (e.g. requestTimeoutMs=10000)")
    args = p.parse_args(argv)
    EXTRA.update(o.split("=", 1) for o in args.option)
    sidecar_dir = tempfile.mkdtemp(prefix="rmq-sink-bench-sc-")
    os.chmod(sidecar_dir, 0o700)
    os.environ["ROCKETMQ_SPARK_SIDECAR_DIR"] = sidecar_dir
    tmp = tempfile.mkdtemp(prefix="rmq-sink-bench-")
    results: dict[str, list[float]] = {f"write {g}": [] for g in GUARANTEES}
    results.update({f"stream {g}": [] for g in GUARANTEES})
    cluster = contextlib.nullcontext(args.name_server) if args.name_server else broker_process()
    with cluster as ns:
        mq = MQClient(ClientConfig.parse(ns))
        spark = spark_session()
        df = rows_df(spark, args.rows, args.size, args.keys, args.partitions)
        df.count()
        warm = rows_df(spark, 2000, args.size, args.keys, args.partitions)
        for g in GUARANTEES:
            topic = f"warm_{g.replace('-', '_')}_{uuid.uuid4().hex[:6]}"
            create(mq, topic)
            write(warm, ns, topic, g)
        for run in range(args.runs):
            for g in GUARANTEES:
                topic = f"sink_{g.replace('-', '_')}_{run}_{uuid.uuid4().hex[:6]}"
                create(mq, topic)
                secs = write(df, ns, topic, g)
                assert stored(mq, topic) == args.rows, f"{topic}: {stored(mq, topic)} stored"
                results[f"write {g}"].append(args.rows / secs)
        source = f"src_{uuid.uuid4().hex[:6]}"
        create(mq, source)
        queues = sorted(mq.subscribe_queues(source, refresh=True))
        produce_fast(mq, queues, args.rows, args.size)
        for g in GUARANTEES:
            sink = f"out_{g.replace('-', '_')}_{uuid.uuid4().hex[:6]}"
            create(mq, sink)
            secs = stream(spark, ns, source, sink, g, args.rows, str(Path(tmp) / sink))
            assert stored(mq, sink) == args.rows, f"{sink}: {stored(mq, sink)} stored"
            results[f"stream {g}"].append(args.rows / secs)
        spark.stop()
        mq.close()
    rows = [{"what": k, "rows": args.rows, "rows/s (median)": statistics.median(v),
             "rows/s (best)": max(v)} for k, v in results.items()]
    print(f"cluster: {args.name_server or 'embedded (bench/common.broker_process)'}; options {EXTRA or 'default'}")
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
