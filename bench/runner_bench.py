"""What a streaming query's source runner costs with our reader, against the ceiling's.

    python bench/runner_bench.py [--rounds R] [--baseline PATH]

Spark starts a Python process for each streaming query's reader (``pyspark.sql.streaming.
python_streaming_source_runner``): it imports Spark's modules, unpickles the data source,
asks it for a stream reader, then calls ``initialOffset``, ``latestOffset``,
``partitions`` and ``commit`` for each micro-batch. Its CPU is a fixed cost of every
query, the same for any number of messages, which ``host_cost_bench.py`` counts under
"other" beside Spark's other short-lived Python processes.

This runs that process's work without Spark, R times each way, alternating, every child
pinned to CPU 0 (an embedded broker in a subprocess holds a few messages in 4 queues;
ours talks to a sidecar it starts, as in Spark, started once before the rounds):

* ``ours``: the runner's imports, then our source's stream reader for one AvailableNow
  micro-batch (``prepareForTriggerAvailableNow``, ``latestOffset``, ``partitions``,
  ``commit``, and the ``latestOffset`` after it that commits the last batch);
* ``ceiling``: the same calls on ``ceiling_source.py``'s reader (the prebuilt-Arrow source);
* ``bare``: the runner's imports alone;
* with ``--baseline PATH``, also ``baseline``: ``ours`` from the checkout at PATH (an A/B
  of two commits' readers).

Prints each way's CPU seconds (user + system of the child, from ``wait4``), the median
of the pairs' differences, and what the difference of ours and the ceiling adds to a
query of 1,000,000 messages, in microseconds a message.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent
HOST_CPU = 0


def child(way: str, namesrv: str, topic: str) -> int:
    """One simulated runner (in a process of its own)."""
    import importlib

    for module in ("pyspark.sql.streaming.python_streaming_source_runner", "pyarrow"):
        importlib.import_module(module)         # what the runner has imported before ours

    if way == "bare":
        return 0
    if way == "ceiling":
        sys.path.insert(0, str(HERE))
        from ceiling_source import CeilingSource

        source = CeilingSource({"rows": "1000000", "bodySize": "100", "topic": topic})
    else:
        from rocketmq_spark.spark.source import RocketMQDataSource

        source = RocketMQDataSource({"nameServer": namesrv, "topic": topic,
                                     "consumerGroup": f"rb_{uuid.uuid4().hex[:8]}",
                                     "startingOffsets": "earliest"})
    reader = source.streamReader(source.schema())
    start = reader.initialOffset()
    admission = way != "ceiling"  # the ceiling has none: Spark asks for the latest offset
    if admission:
        reader.prepareForTriggerAvailableNow()
        end = reader.latestOffset(start, reader.getDefaultReadLimit())
    else:
        end = reader.latestOffset()
    reader.partitions(start, end)
    reader.commit(end)
    if admission:                 # the call that commits the last batch of an AvailableNow run
        reader.latestOffset(end, reader.getDefaultReadLimit())
    reader.stop()
    return 0


def run_child(way: str, namesrv: str, topic: str, baseline: str | None) -> float:
    env = dict(os.environ)
    if way == "baseline":
        env["PYTHONPATH"] = os.pathsep.join(p for p in (baseline, env.get("PYTHONPATH")) if p)
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child",
           "ours" if way == "baseline" else way, namesrv, topic]
    p = subprocess.Popen(cmd, env=env, cwd="/",
                         preexec_fn=lambda: os.sched_setaffinity(0, {HOST_CPU}))
    _, status, usage = os.wait4(p.pid, 0)
    if status != 0:
        raise RuntimeError(f"{way}: the child exited with status {status}")
    return usage.ru_utime + usage.ru_stime


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=12)
    p.add_argument("--baseline", metavar="PATH", default=None,
                   help="a checkout whose reader is run too, as 'baseline'")
    p.add_argument("--child", nargs=3, metavar=("WAY", "NAMESRV", "TOPIC"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        return child(*args.child)

    from common import broker_process, produce_fast, table  # also puts the project root on sys.path

    from rocketmq_spark.client import ClientConfig, MQClient

    ways = ["ours", "ceiling", "bare"] + (["baseline"] if args.baseline else [])
    seconds: dict[str, list[float]] = {w: [] for w in ways}
    with broker_process() as addr:
        mq = MQClient(ClientConfig.parse(addr))
        topic = f"bench_runner_{uuid.uuid4().hex[:6]}"
        mq.create_topic(topic, queues=4)
        produce_fast(mq, sorted(mq.publish_queues(topic, refresh=True)), 4_000, 100)
        mq.close()
        run_child("ours", addr, topic, args.baseline)          # starts the sidecar
        for i in range(args.rounds):
            for way in (ways if i % 2 == 0 else ways[::-1]):
                seconds[way].append(run_child(way, addr, topic, args.baseline))
    print(table([{"way": w, "CPU s, median": f"{statistics.median(v):.3f}", "best": f"{min(v):.3f}",
                  "worst": f"{max(v):.3f}"} for w, v in seconds.items()]))

    def diff(a: str, b: str) -> float:
        return statistics.median(x - y for x, y in zip(seconds[a], seconds[b]))

    extra = diff("ours", "ceiling")
    print(f"\nours - ceiling, median of the pairs: {extra:.3f} s a query "
          f"({extra:.3f} us a message of a 1,000,000-message query)")
    if args.baseline:
        print(f"ours - baseline ({args.baseline}), median of the pairs: {diff('ours', 'baseline'):+.3f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
