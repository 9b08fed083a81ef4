"""What reading RocketMQ costs the Spark host: CPU per message and throughput, against the
prebuilt-Arrow Python source of the same schema (the ceiling of any Python source).

    python bench/host_cost_bench.py [--messages N] [--size BYTES] [--queues Q] [--runs R]
                                    [--pull-batch-size N] [--warm N] [--warm-runs K]
                                    [--ceiling-twice]

The broker runs in a subprocess pinned to CPU 1 (as a remote broker would: its CPU is not
the Spark host's); this process pins itself to CPU 0 before Spark starts, so Spark's JVM,
its Python workers and the sidecar they start all run on CPU 0. N messages of SIZE bytes
(default 1,000,000 of 100 B, 4 queues, 32 messages a pull: Apache's default cap) are read
with Trigger.AvailableNow into ``noop`` by the rocketmq source, and the same number of rows
by ``ceiling_source.py`` (its rows shaped like ours: SIZE-byte bodies, the same topic);
each is run R times (best kept) after a warm-up of --warm rows each, by default as many as
a measured run: Spark's JVM compiles its per-batch code as it goes (after 200,000 rows, 16
pairs gave a median of 1.32 / 0.75; after a full warm-up, 16 pairs alternating with those
gave 1.21 / 0.82). The two run back to back in pairs, which one goes first alternating from
pair to pair, so neither side always meets the JVM less warm or the machine in other
minutes.
Host CPU is the sum over the host's processes (Spark's JVM, its Python workers and source
runner, the driver, the sidecar) of their own CPU time, each sampled every 0.1 s from a
thread on CPU 1 (so a process that ends mid-run is charged to the run it ran in); CPU 0's
busy time from /proc/stat, which counts in clock ticks, is printed beside it as a
cross-check. Spark's JVM is shown with what its JIT compiler threads spent of it: that part
moves most from run to run (0.20 - 0.95 us a message at stop 33), and the pairs' CPU ratios
are printed without it too. ``--warm-runs K`` repeats the warm-up K times.
Prints rows/s, microseconds of host CPU per message, and the two ratios of the goal:
CPU per message ours / ceiling (goal <= 1.3) and throughput ours / ceiling (goal >= 0.8),
for the best runs and for each pair of runs, with their median: the machine's speed
drifts between runs, and the pairs show by how much. ``--ceiling-twice`` runs the ceiling
on both sides: the ratios of two identical sources, i.e. how much of a pair's ratio is the
spread of Spark itself. Each pair also shows the share of its runs CPU 0 was busy (/proc/stat,
in clock ticks): the throughput ratio is about the ratio of those shares over the CPU ratio,
so the share shows what ours loses to CPU 0 waiting (on the broker, on the sidecar) beside
what it loses to CPU.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

from ceiling_source import ceiling_df
from common import (BROKER_CPU, HOST_CPU, JIT, ROLES, BrokerProcess, Timer, cpu_spent, local_spark, produce_fast,  # also puts the project root on sys.path
                    sidecar_pid, stored_properties, table)

from rocketmq_spark.client import ClientConfig, MQClient


def cpu_busy(cpu: int) -> float:
    """Seconds CPU ``cpu`` spent busy since boot (/proc/stat: all but idle and iowait)."""
    for line in Path("/proc/stat").read_text().splitlines():
        if line.startswith(f"cpu{cpu} "):
            ticks = [int(x) for x in line.split()[1:]]
            idle = ticks[3] + ticks[4]
            return (sum(ticks[:8]) - idle) / os.sysconf("SC_CLK_TCK")
    raise RuntimeError(f"no cpu{cpu} in /proc/stat")


def host_seconds(split: dict[str, float]) -> float:
    """A run's host CPU: every role's seconds but the broker's."""
    return sum(sec for role, sec in split.items() if role in ROLES and role != "broker")


def by_process(split: dict[str, float], n: int) -> str:
    """A run's host CPU by process, us a message (the broker's left out; Spark's JVM with
    what its JIT compiler threads spent of it)."""
    def us(sec: float) -> str:
        return f"{sec / n * 1e6:.2f}"

    def shown(role: str, sec: float) -> str:
        jit = f" (JIT {us(split[JIT])})" if role == "Spark JVM" and JIT in split else ""
        return f"{role} {us(sec)}{jit}"

    return ", ".join(shown(role, sec) for role, sec in split.items()
                     if role in ROLES and role != "broker" and sec > 0)


def spark_session() -> Any:
    return local_spark("rocketmq-host-cost")


cpu_busy_broker: dict[str, float] = {}


def run(df: Any, ck: str, name: str = "") -> tuple[float, float, int]:
    """AvailableNow into noop: (wall seconds, CPU-0 seconds, rows); CPU 1's busy seconds
    (the broker's) go to ``cpu_busy_broker[name]``."""
    before, broker_before = cpu_busy(HOST_CPU), cpu_busy(BROKER_CPU)
    with Timer() as t:
        q = df.writeStream.format("noop").option("checkpointLocation", ck).trigger(availableNow=True).start()
        q.awaitTermination()
    if q.exception() is not None:
        raise RuntimeError(f"query failed: {q.exception()}")
    if name:
        cpu_busy_broker[name] = min(cpu_busy_broker.get(name, 1e9), cpu_busy(BROKER_CPU) - broker_before)
    return t.seconds, cpu_busy(HOST_CPU) - before, sum(p["numInputRows"] for p in q.recentProgress)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--messages", type=int, default=1_000_000)
    p.add_argument("--size", type=int, default=100)
    p.add_argument("--queues", type=int, default=4)
    p.add_argument("--runs", type=int, default=2)
    p.add_argument("--pull-batch-size", type=int, default=32)
    p.add_argument("--warm", type=int, default=None,
                   help="rows each side reads before the measured runs (default: --messages)")
    p.add_argument("--warm-runs", type=int, default=1,
                   help="how many times each side reads those rows before the measured runs")
    p.add_argument("--ceiling-twice", action="store_true",
                   help="the 'rocketmq' side is the ceiling source too: how far apart the pairs of "
                        "two identical sources are, the spread any one pair carries")
    args = p.parse_args(argv)
    if len(os.sched_getaffinity(0)) < 2:
        raise SystemExit("needs two CPUs: one for the broker, one for the Spark host")
    n = args.messages
    if args.warm is None:
        args.warm = n
    root = Path(tempfile.mkdtemp(prefix="rmq-host-cost-"))
    sidecar_dir = root / "sidecar"
    sidecar_dir.mkdir(mode=0o700)
    os.environ["ROCKETMQ_SPARK_SIDECAR_DIR"] = str(sidecar_dir)
    os.sched_setaffinity(0, {BROKER_CPU})          # the broker subprocess inherits CPU 1
    broker = BrokerProcess(root / "data", log=root / "broker.log").start()
    try:
        mq = MQClient(ClientConfig.parse(broker.namesrv_addr))
        topics = {k: f"hc_{k}_{uuid.uuid4().hex[:6]}" for k in ("warm", "main")}
        for t in topics.values():
            mq.create_topic(t, queues=args.queues)
        produce_fast(mq, sorted(mq.publish_queues(topics["warm"], refresh=True)), args.warm, args.size)
        main_queues = sorted(mq.publish_queues(topics["main"], refresh=True))
        produce_fast(mq, main_queues, n, args.size)
        shape = stored_properties(mq, main_queues[0])
        mq.close()
        os.sched_setaffinity(0, {HOST_CPU})         # Spark, its workers and the sidecar: CPU 0
        spark = spark_session()

        def ours(topic: str) -> Any:
            return (spark.readStream.format("rocketmq").option("nameServer", broker.namesrv_addr)
                    .option("topic", topic).option("consumerGroup", f"hc_{uuid.uuid4().hex[:8]}")
                    .option("startingOffsets", "earliest").option("pullBatchSize", args.pull_batch_size)
                    .load())

        for w in range(args.warm_runs):
            run(ours(topics["warm"]), str(root / f"ck-warm-ours-{w}"))
            run(ceiling_df(spark, args.warm, body_size=args.size, topic=topics["warm"], properties=shape),
                str(root / f"ck-warm-ceiling-{w}"))
        results: dict[str, list[tuple[float, float, int]]] = {"rocketmq": [], "ceiling": []}
        splits: dict[str, list[dict[str, float]]] = {"rocketmq": [], "ceiling": []}

        def ceiling() -> Any:
            return ceiling_df(spark, n, body_size=args.size, topic=topics["main"], properties=shape)

        measured = {
            "rocketmq": lambda i: run(ceiling() if args.ceiling_twice else ours(topics["main"]),
                                      str(root / f"ck-ours-{i}"), "rocketmq"),
            "ceiling": lambda i: run(ceiling(), str(root / f"ck-ceiling-{i}")),
        }
        for i in range(args.runs):
            for k in (("rocketmq", "ceiling") if i % 2 == 0 else ("ceiling", "rocketmq")):
                with cpu_spent(str(sidecar_dir), sampler_cpu=BROKER_CPU, jit=True) as spent:
                    results[k].append(measured[k](i))
                splits[k].append(dict(spent))
        spark.stop()
    finally:
        broker.stop()
        sidecar = sidecar_pid(sidecar_dir)
        if sidecar is not None:        # not left idling on CPU 0 into the next invocation's runs
            os.kill(sidecar, signal.SIGTERM)
    best = {k: min(v, key=lambda r: r[0]) for k, v in results.items()}
    rows, host = [], {}
    for k, (wall, cpu, got) in best.items():
        if got != n:
            raise RuntimeError(f"{k} read {got} rows, not {n}")
        split = splits[k][results[k].index(best[k])]
        host[k] = host_seconds(split)
        rows.append({"source": k, "rows": got, "wall s": wall, "rows/s": got / wall,
                     "host CPU s": host[k], "us CPU/msg": host[k] / got * 1e6,
                     "CPU 0 busy us/msg": cpu / got * 1e6})
    if args.ceiling_twice:
        print("--ceiling-twice: the rows named rocketmq are a second run of the ceiling source")
    print(table(rows))
    for k, runs in splits.items():     # of the best run: where the host CPU went, per message
        print(f"{k}: us CPU per message by process: {by_process(runs[results[k].index(best[k])], n)}")
    wall = best["rocketmq"][0]
    print(f"broker (CPU 1, not the host's): {cpu_busy_broker['rocketmq']:.1f} s busy in the "
          f"{wall:.1f} s of the best rocketmq run")
    for i in range(args.runs):       # every run by process: which of them moves from run to run
        print(f"pair {i + 1}: " + "; ".join(f"{k} {by_process(splits[k][i], n)}" for k in ("rocketmq", "ceiling")))
    pairs = []        # each pair's rocketmq run against its ceiling run: the spread
    for i in range(args.runs):
        ours_cpu, ceiling_cpu = host_seconds(splits["rocketmq"][i]), host_seconds(splits["ceiling"][i])
        pairs.append((ours_cpu / ceiling_cpu, results["ceiling"][i][0] / results["rocketmq"][i][0],
                      ours_cpu / n * 1e6, ceiling_cpu / n * 1e6))
    print("each pair, CPU ratio / throughput ratio (us CPU a message, ours / ceiling): "
          + ", ".join(f"{c:.2f} / {t:.2f} ({o:.1f} / {e:.1f})" for c, t, o, e in pairs)
          + f"; median {statistics.median(p[0] for p in pairs):.2f} / {statistics.median(p[1] for p in pairs):.2f}")
    # CPU 0 idle during a run is wall time that no CPU saving wins back: throughput ratio =
    # (how busy ours kept CPU 0 / how busy the ceiling kept it) / CPU ratio
    busy = [(results["rocketmq"][i][1] / results["rocketmq"][i][0], results["ceiling"][i][1] / results["ceiling"][i][0])
            for i in range(args.runs)]
    print("each pair, the share of the run CPU 0 was busy, ours / ceiling: "
          + ", ".join(f"{o:.3f} / {c:.3f}" for o, c in busy)
          + f"; median {statistics.median(o for o, _ in busy):.3f} / {statistics.median(c for _, c in busy):.3f}")
    # Spark's JVM compiles as it goes, more in some runs than in others (a warm-up cost that
    # fades in a long-running query): the CPU ratios without its JIT compiler threads
    bare = [(host_seconds(splits["rocketmq"][i]) - splits["rocketmq"][i][JIT])
            / (host_seconds(splits["ceiling"][i]) - splits["ceiling"][i][JIT]) for i in range(args.runs)]
    print("each pair's CPU ratio without Spark's JIT compiler threads: "
          + ", ".join(f"{r:.2f}" for r in bare) + f"; median {statistics.median(bare):.2f}")
    (ow, oc, _), (cw, cc, _) = best["rocketmq"], best["ceiling"]
    print(f"\nCPU per message ours / ceiling: {host['rocketmq'] / host['ceiling']:.2f} (goal <= 1.3; "
          f"by CPU 0's busy time in /proc/stat: {oc / cc:.2f})")
    print(f"throughput ours / ceiling: {cw / ow:.2f} (goal >= 0.8)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
