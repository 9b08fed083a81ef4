"""What filter push-down saves a batch read: a time window, a queue, a tag, a key lookup,
against the same filter left to Spark (a scan of the whole topic).

    python bench/pushdown_bench.py [--messages N] [--body-bytes B] [--runs R]
                                   [--name-server HOST:PORT] [--only TEXT]

Writes N messages of B bytes into a fresh topic of 4 queues on every master, in three
spells (45 % / 10 % / 45 %, the middle one the time window), tags TagA..TagE in turn. Then,
for each filter, counts the rows with ``spark.read.format("rocketmq")...where(f).count()``
once with filter push-down off (the class found by name: Spark filters the whole topic)
and once on (``spark.sql.python.filterPushdown.enabled`` and
``rocketmq_spark.spark.register``), alternating, R runs each after a warm-up of both; checks
both counts agree. Prints, per filter, the median seconds of each, their ratio, and the
rows the scan handed Spark (the executed plan's ``numOutputRows``). Every message has keys
``<spell>-<i>``: ``keys = 'inside-7'`` is one message, answered from the brokers' message
indexes when pushed. ``--only`` runs the filters whose name contains TEXT. An embedded
broker (two brokers, async flush) runs in a subprocess unless ``--name-server`` names a
cluster.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import os
import signal
import statistics
import sys
import tempfile
import time
import uuid
from typing import Any

from common import Timer, broker_process, local_spark, sidecar_pid, table  # puts the project root on sys.path
from sink_bench import create

from rocketmq_spark.client import ClientConfig, MQClient
from rocketmq_spark.spark import features, register
from rocketmq_spark.spark.source import PUSHDOWN_CONF
from rocketmq_spark.structs import Message

TAGS = ("TagA", "TagB", "TagC", "TagD", "TagE")


def produce(mq: MQClient, topic: str, n: int, size: int, salt: str) -> None:
    queues = sorted(mq.publish_queues(topic, refresh=True))
    body = b"x" * size
    sent = i = 0
    while sent < n:
        k = min(200, n - sent)
        q = queues[i % len(queues)]
        batch = [Message(topic, body, tags=TAGS[(sent + j) % len(TAGS)], keys=f"{salt}-{sent + j}")
                 for j in range(k)]
        r = mq.send_batch(batch, queue=q)
        if r.status != "SEND_OK":
            raise RuntimeError(f"send_batch: {r.status}")
        sent, i = sent + k, i + 1


def last_store_ms(mq: MQClient, topic: str) -> int:
    """A time later than every message of ``topic`` stored so far, once the clock is past it."""
    stamps = []
    for q in mq.subscribe_queues(topic, refresh=True):
        top = mq.max_offset(q)
        if top:
            stamps.append(mq.pull(q, top - 1, group="bench-pushdown", max_nums=1).messages[0].store_timestamp)
    t = max(stamps) + 1
    while time.time() * 1000 <= t + 1:
        time.sleep(0.005)
    return t


def ts(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")


def scanned(df: Any) -> tuple[int, int]:
    """``df.count()`` and the rows its scan produced."""
    counted = df.groupBy().count()          # df.count(), as a DataFrame whose plan can be read
    n = counted.collect()[0][0]
    plan = counted._jdf.queryExecution().executedPlan()
    rows = 0
    leaves = plan.collectLeaves()
    for i in range(leaves.size()):
        if "Scan" in leaves.apply(i).nodeName():
            rows += leaves.apply(i).metrics().apply("numOutputRows").value()
    return n, rows


def pushing(spark: Any, on: bool) -> None:
    spark.conf.set(PUSHDOWN_CONF, "true" if on else "false")
    register(spark)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--messages", type=int, default=200_000)
    p.add_argument("--body-bytes", type=int, default=100)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--name-server", help="a running cluster's NameServer (default: an embedded broker)")
    p.add_argument("--only", default="", help="run only the filters whose name contains this")
    args = p.parse_args(argv)
    if not features.FILTER_PUSHDOWN:
        print(f"pyspark {features.PYSPARK_VERSION} hands data sources no filters (4.1+ does)")
        return 1
    sidecar_dir = tempfile.mkdtemp(prefix="rmq-pushdown-bench-sc-")
    os.chmod(sidecar_dir, 0o700)
    os.environ["ROCKETMQ_SPARK_SIDECAR_DIR"] = sidecar_dir
    cluster = contextlib.nullcontext(args.name_server) if args.name_server else broker_process()
    results = []
    with cluster as ns:
        mq = MQClient(ClientConfig.parse(ns, request_timeout=10.0))
        topic = f"pushdown_{uuid.uuid4().hex[:8]}"
        create(mq, topic)
        outer = int(args.messages * 0.45)
        produce(mq, topic, outer, args.body_bytes, "before")
        t1 = last_store_ms(mq, topic)
        produce(mq, topic, args.messages - 2 * outer, args.body_bytes, "inside")
        t2 = last_store_ms(mq, topic)
        produce(mq, topic, outer, args.body_bytes, "after")
        # no adaptive execution: the executed plan keeps the scan as a leaf, with its metrics
        spark = local_spark("rocketmq-pushdown-bench", **{"spark.sql.adaptive.enabled": "false"})
        df = lambda: (spark.read.format("rocketmq").option("nameServer", ns)  # noqa: E731
                      .option("topic", topic).load())
        filters = {
            "time window (10 %)": f"store_timestamp >= TIMESTAMP '{ts(t1)}' AND store_timestamp < TIMESTAMP '{ts(t2)}'",
            "queue_id = 1": "queue_id = 1",
            "tags = 'TagC'": "tags = 'TagC'",
            "window and tag": (f"store_timestamp >= TIMESTAMP '{ts(t1)}' AND store_timestamp < "
                               f"TIMESTAMP '{ts(t2)}' AND tags = 'TagC'"),
            "keys = 'inside-7' (lookup)": "keys = 'inside-7'",
        }
        filters = {k: v for k, v in filters.items() if args.only in k}
        try:
            for name, where in filters.items():
                secs: dict[bool, list[float]] = {False: [], True: []}
                seen: dict[bool, tuple[int, int]] = {}
                for run in range(args.runs + 1):          # run 0 warms up
                    for on in (False, True):
                        pushing(spark, on)
                        with Timer() as t:
                            seen[on] = scanned(df().where(where))
                        if run:
                            secs[on].append(t.seconds)
                assert seen[True][0] == seen[False][0] and seen[True][1] < seen[False][1], (name, seen)
                off, on = statistics.median(secs[False]), statistics.median(secs[True])
                results.append({"filter": name, "rows": seen[True][0],
                                "scanned, Spark filters": seen[False][1], "scanned, pushed": seen[True][1],
                                "s, Spark filters": off, "s, pushed": on, "speed-up": off / on})
        finally:
            spark.stop()
            mq.close()
            pid = sidecar_pid(sidecar_dir)
            if pid:
                os.kill(pid, signal.SIGTERM)
    print(f"cluster: {args.name_server or 'embedded (bench/common.broker_process)'}; {args.messages} messages of "
          f"{args.body_bytes} B over 4 queues per master; "
          f"pyspark {features.PYSPARK_VERSION}; median of {args.runs} runs")
    print(table([{k: (f"{v:.2f}" if isinstance(v, float) else v) for k, v in r.items()} for r in results]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
