"""Throughput and latency of ``format("rocketmq")`` as a Spark source.

    python bench/source_bench.py [--messages N] [--queues Q] [--size BYTES]
                                 [--rate MSG_PER_S] [--seconds S] [--trigger-ms MS]
                                 [--pull-batch-size N] [--broker-max-transfer N]

An embedded broker runs in a subprocess (async flush); N small messages are produced fast
with our client's ``send_batch``. Then, in this process with Spark local[2] and an
auto-started sidecar in a private directory:

* ``rocketmq``: the N messages read with Trigger.AvailableNow into ``format("noop")``;
* ``rate-micro-batch``: Spark's own rate source, N rows in one AvailableNow batch, same sink;
* ``Python source, prebuilt Arrow``: a Python streaming data source with the same schema
  whose ``read()`` only yields batches built in advance (``ceiling_source.py``): what
  Spark's Python Data Source API costs by itself, the ceiling for any Python source;
* ``C++ pull``: the C++ client (``rocketmq==0.4.4``) pulling the same N messages, 32 per
  pull, queue by queue (each message copied into Python by the test harness);
* latency: a processing-time query (trigger every MS) with ``foreachBatch`` while messages
  are sent one by one at MSG_PER_S for S seconds; latency = when ``foreachBatch`` has the
  row minus the message's born (client) / store (broker) timestamp.

Each Spark query is run once on a small warm-up first (JVM, Python workers, sidecar), so
the figures are steady-state. Prints a table, the ratios, and the CPU seconds each process
(broker, sidecar, Spark JVM, Python workers) spent on the orderly run.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import sys
import tempfile
import time
import uuid
from typing import Any

from ceiling_source import ceiling_df
from common import (Timer, broker_process, cpu_spent, local_spark, produce_fast,  # also puts the project root on sys.path
                    stored_properties, table)

from rocketmq_spark.client import ClientConfig, MQClient
from rocketmq_spark.remoting.route import MessageQueue
from rocketmq_spark.structs import Message


def spark_session() -> Any:
    return local_spark("rocketmq-source-bench", **{"spark.sql.session.timeZone": "UTC"})


def run_noop(df: Any, ck: str) -> tuple[float, int, float]:
    """AvailableNow into noop: (wall seconds, rows, seconds inside triggers)."""
    with Timer() as t:
        q = (df.writeStream.format("noop").option("checkpointLocation", ck)
             .trigger(availableNow=True).start())
        q.awaitTermination()
    if q.exception() is not None:
        raise RuntimeError(f"query failed: {q.exception()}")
    rows = sum(p["numInputRows"] for p in q.recentProgress)
    busy = sum(p["durationMs"].get("triggerExecution", 0) for p in q.recentProgress) / 1000.0
    return t.seconds, rows, busy


def rocketmq_df(spark: Any, addr: str, topic: str, **options: Any) -> Any:
    r = (spark.readStream.format("rocketmq").option("nameServer", addr).option("topic", topic)
         .option("consumerGroup", f"bench_{uuid.uuid4().hex[:8]}").option("startingOffsets", "earliest"))
    for k, v in options.items():
        r = r.option(k, str(v))
    return r.load()


def rate_df(spark: Any, n: int) -> Any:
    return (spark.readStream.format("rate-micro-batch").option("rowsPerBatch", n)
            .option("numPartitions", 2).load())


def cpp_pull_all(addr: str, topic: str, n: int) -> float:
    from tests.cppclient import CppPullConsumer

    with CppPullConsumer(addr, f"bench_cpp_{uuid.uuid4().hex[:8]}") as pc:
        queues = pc.queues(topic)
        got = 0
        with Timer() as t:
            for q in queues:
                offset = 0
                while True:
                    r = pc.pull(q, "*", offset, 32)
                    if not r.messages:
                        break
                    got += len(r.messages)
                    offset = r.next_offset
        if got != n:
            raise RuntimeError(f"C++ pull got {got} of {n} messages")
        return t.seconds


def latency(spark: Any, mq: MQClient, addr: str, topic: str, queues: list[MessageQueue],
            rate: float, seconds: float, trigger_ms: int, ck: str) -> dict[str, list[float]]:
    from pyspark.sql import functions as F

    lat_born: list[float] = []
    lat_store: list[float] = []

    def each(df: Any, batch_id: int) -> None:
        rows = df.select(F.unix_millis("born_timestamp").alias("b"),
                         F.unix_millis("store_timestamp").alias("s")).collect()
        now = time.time() * 1000.0
        lat_born.extend(now - r.b for r in rows)
        lat_store.extend(now - r.s for r in rows)

    q = (rocketmq_df(spark, addr, topic, startingOffsets="latest").writeStream.foreachBatch(each)
         .option("checkpointLocation", ck).trigger(processingTime=f"{trigger_ms} milliseconds").start())
    try:
        deadline = time.monotonic() + 60
        while q.status["message"] != "Waiting for data to arrive":
            if time.monotonic() > deadline or q.exception() is not None:
                raise RuntimeError(f"latency query did not start: {q.exception() or q.status}")
            time.sleep(0.05)
        total = int(rate * seconds)
        start = time.monotonic()
        for i in range(total):
            pause = start + i / rate - time.monotonic()   # pacing the producer, not waiting on Spark
            if pause > 0:
                time.sleep(pause)
            mq.send(Message(topic, b"l%d" % i), queue=queues[i % len(queues)])
        deadline = time.monotonic() + 60
        while len(lat_born) < total:
            if time.monotonic() > deadline or q.exception() is not None:
                raise RuntimeError(f"latency query saw {len(lat_born)} of {total}: {q.exception()}")
            time.sleep(0.05)
    finally:
        q.stop()
    busy = [p["durationMs"] for p in q.recentProgress if p["numInputRows"]]
    phases = {k: statistics.median(d.get(k, 0) for d in busy) for k in
              ("latestOffset", "queryPlanning", "walCommit", "addBatch", "commitOffsets", "triggerExecution")}
    return {"born": lat_born, "store": lat_store, "phases": phases,
            "batches": len(busy), "rows_per_batch": statistics.median(
                p["numInputRows"] for p in q.recentProgress if p["numInputRows"])}


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100.0 * (len(ordered) - 1))))]


def stop_sidecar(directory: str) -> None:
    from rocketmq_spark.errors import RocketMQError
    from rocketmq_spark.sidecar.client import SidecarClient

    sock = os.path.join(directory, "sidecar.sock")
    if os.path.exists(sock):
        try:
            os.kill(SidecarClient(f"unix:{sock}").health(timeout=2).pid, signal.SIGTERM)
        except (RocketMQError, ProcessLookupError):
            pass


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--messages", type=int, default=200_000)
    p.add_argument("--queues", type=int, default=4)
    p.add_argument("--size", type=int, default=32, help="body bytes")
    p.add_argument("--pull-batch-size", type=int, default=32, help="the source's pullBatchSize")
    p.add_argument("--broker-max-transfer", type=int, default=None, metavar="N",
                   help="the broker's cap on messages per pull (maxTransferCountOnMessageInMemory; "
                        "default Apache's 32): raise it with --pull-batch-size for fewer, bigger pulls")
    p.add_argument("--rate", type=float, default=200.0, help="latency run: messages per second")
    p.add_argument("--seconds", type=float, default=20.0, help="latency run: how long")
    p.add_argument("--trigger-ms", type=int, default=100, help="latency run: processing-time trigger")
    args = p.parse_args(argv)
    n = args.messages

    from tests.cppclient import isolate_home

    isolate_home()
    sidecar_dir = tempfile.mkdtemp(prefix="rmq-bench-sidecar-")
    os.chmod(sidecar_dir, 0o700)
    os.environ["ROCKETMQ_SPARK_SIDECAR_DIR"] = sidecar_dir
    work = tempfile.mkdtemp(prefix="rmq-bench-ck-")
    results: dict[str, tuple[float, int, float]] = {}
    try:
        with broker_process(max_transfer_count=args.broker_max_transfer) as addr:
            mq = MQClient(ClientConfig.parse(addr))
            topics = {k: f"bench_{k}_{uuid.uuid4().hex[:6]}" for k in ("warm", "main", "lat")}
            for t in topics.values():
                mq.create_topic(t, queues=args.queues)
            queues = {k: sorted(mq.publish_queues(t, refresh=True)) for k, t in topics.items()}
            produce_fast(mq, queues["warm"], 2_000, args.size)
            produce_seconds = produce_fast(mq, queues["main"], n, args.size)
            print(f"produced {n:,} messages of {args.size} B in {produce_seconds:.1f} s "
                  f"({n / produce_seconds:,.0f} msg/s, send_batch of 256)", flush=True)

            spark = spark_session()
            opts = {"pullBatchSize": args.pull_batch_size}
            run_noop(rocketmq_df(spark, addr, topics["warm"], **opts), f"{work}/warm-src")
            run_noop(rate_df(spark, 2_000), f"{work}/warm-rate")
            with cpu_spent(sidecar_dir) as cpu:
                results["rocketmq (orderly)"] = run_noop(rocketmq_df(spark, addr, topics["main"], **opts),
                                                         f"{work}/src")
            results["rocketmq (concurrent, minPartitions=2)"] = run_noop(
                rocketmq_df(spark, addr, topics["main"], consumeMode="concurrent", minPartitions=2,
                            **opts), f"{work}/src-concurrent")
            results["rate-micro-batch"] = run_noop(rate_df(spark, n), f"{work}/rate")
            shape = stored_properties(mq, queues["main"][0])
            run_noop(ceiling_df(spark, 2_000, body_size=args.size, properties=shape), f"{work}/warm-ceiling")
            with cpu_spent(sidecar_dir) as cpu_ceiling:
                results["Python source, prebuilt Arrow"] = run_noop(
                    ceiling_df(spark, n, body_size=args.size, properties=shape), f"{work}/ceiling")
            cpp_seconds = cpp_pull_all(addr, topics["main"], n)
            results["C++ pull consumer"] = (cpp_seconds, n, cpp_seconds)
            lat = latency(spark, mq, addr, topics["lat"], queues["lat"], args.rate, args.seconds,
                          args.trigger_ms, f"{work}/lat")
            mq.close()
            spark.stop()
    finally:
        stop_sidecar(sidecar_dir)

    rows = []
    for name, (wall, count, busy) in results.items():
        if count != n:
            raise RuntimeError(f"{name}: read {count} rows, expected {n}")
        rows.append({"reader": name, "rows": count, "wall s": wall, "rows/s (wall)": count / wall,
                     "in triggers s": busy, "rows/s (triggers)": count / busy})
    print()
    print(table(rows))
    ours = results["rocketmq (orderly)"]
    rate = results["rate-micro-batch"]
    cpp = results["C++ pull consumer"]
    ceiling = results["Python source, prebuilt Arrow"]
    print(f"\nrocketmq / rate-micro-batch (rows/s, wall): {rate[0] / ours[0]:.3f}")
    print(f"Python source with prebuilt Arrow batches / rate-micro-batch (rows/s, wall): "
          f"{rate[0] / ceiling[0]:.3f}  (the most a Python streaming source gets here)")
    print(f"rocketmq / Python source with prebuilt Arrow batches (rows/s, wall): {ceiling[0] / ours[0]:.3f}")
    print(f"rocketmq / C++ pull consumer (rows/s, wall): {cpp[0] / ours[0]:.3f}")
    print("CPU seconds by process during the orderly run (2 cores = 2 s per wall second): " +
          ", ".join(f"{role} {sec:.1f}" for role, sec in cpu.items()) +
          f"; per message {sum(cpu.values()) / n * 1e6:,.0f} us")
    print("CPU seconds by process during the prebuilt-Arrow Python source's run: " +
          ", ".join(f"{role} {sec:.1f}" for role, sec in cpu_ceiling.items() if sec >= 0.05))
    print()
    print(table([{"latency (ms)": k, "messages": len(v), "p50": pct(v, 50), "p99": pct(v, 99),
                  "max": max(v), "mean": statistics.fmean(v)} for k, v in
                 (("foreachBatch - born", lat["born"]), ("foreachBatch - store", lat["store"]))]))
    print(f"(latency run: {args.rate:g} msg/s for {args.seconds:g} s, processing-time trigger "
          f"{args.trigger_ms} ms, {args.queues} queues; {lat['batches']} batches with rows, "
          f"median {lat['rows_per_batch']:g} rows)")
    print("median ms per phase of those batches (Spark's durationMs): " +
          ", ".join(f"{k} {v:,.0f}" for k, v in lat["phases"].items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
