"""The sidecar's read path by itself: CPU per message, without Spark.

    python bench/sidecar_bench.py [--messages N] [--queues Q] [--threads T] [--size BYTES]
                                  [--pull-batch-size N] [--broker-max-transfer N] [--rounds R]
                                  [--pin]

An embedded broker runs in a subprocess (async flush) and holds N messages of SIZE bytes
(default 32) over Q queues. In this process, a ``SidecarService`` (what the sidecar process
serves over gRPC) reads every queue's whole range on T threads at a time, four ways:

* ``pull + Arrow``: ``SidecarService.pull``, what a task on another host gets: pipelined
  pulls, the columnar decode into Arrow record batches, the Arrow IPC stream in chunks;
* ``pull + shared-memory files``: ``SidecarService.pull_files``, what a task on the
  sidecar's host gets: the same batches written as files in /dev/shm, each taken and handed
  back for reuse as a reader does (``shm.FileReader``: the mapping and the IPC stream's
  opening are counted too);
* ``pulls only`` (the reference): the same ranges' pulls alone, as the sidecar makes them
  (a connection of each range's own, answered in its thread: ``client/direct.py``), the
  pull bodies dropped undecoded: what the per-pull work (request, response, I/O) costs;
* ``pulls only, shared transport``: the same over the client's shared, multiplexed
  connections (a reader thread and a future per pull), what the sidecar used before.

This process sets glibc's allocator as the sidecar process does (``keep_freed_memory``).
``--pin`` puts the broker on CPU 1 and this process on CPU 0, as ``host_cost_bench.py``
places them: the sidecar's cost alone on the CPU it shares with Spark there, to set beside
what that benchmark charges the sidecar.
Prints messages/s and this process's CPU microseconds per message for each (the broker's
CPU is its own process's): the best and the median round, and the share of the CPU the pulls
take.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
import uuid
from dataclasses import replace
from typing import Callable

from common import BROKER_CPU, HOST_CPU, Timer, broker_process, produce_fast, table  # also puts the project root on sys.path

from rocketmq_spark.client import ClientConfig, MQClient
from rocketmq_spark.sidecar import shm
from rocketmq_spark.sidecar.cli import keep_freed_memory
from rocketmq_spark.sidecar.model import Cluster, PullSpec
from rocketmq_spark.sidecar.pull import read_range
from rocketmq_spark.sidecar.service import SidecarService


def run(ranges: list[PullSpec], threads: int, read: Callable[[PullSpec], int]) -> tuple[float, float, int]:
    """(wall seconds, CPU seconds of this process, messages) reading ``ranges``,
    ``threads`` at a time."""
    counts: list[int] = []
    cpu0 = time.process_time()
    with Timer() as t:
        for at in range(0, len(ranges), threads):
            workers = [threading.Thread(target=lambda s=s: counts.append(read(s))) for s in ranges[at:at + threads]]
            for w in workers:
                w.start()
            for w in workers:
                w.join()
    return t.seconds, time.process_time() - cpu0, sum(counts)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--messages", type=int, default=200_000)
    p.add_argument("--queues", type=int, default=4)
    p.add_argument("--threads", type=int, default=2, help="ranges read at once (tasks)")
    p.add_argument("--size", type=int, default=32, help="body bytes")
    p.add_argument("--pull-batch-size", type=int, default=32)
    p.add_argument("--broker-max-transfer", type=int, default=None, metavar="N",
                   help="the broker's cap on messages per pull (default Apache's 32)")
    p.add_argument("--rounds", type=int, default=3, help="each way is run this many times; best kept")
    p.add_argument("--pin", action="store_true",
                   help=f"the broker on CPU {BROKER_CPU}, this process on CPU {HOST_CPU} (as host_cost_bench.py)")
    args = p.parse_args(argv)
    keep_freed_memory()                  # as the sidecar process does (sidecar/cli.py)
    if args.pin:
        if len(os.sched_getaffinity(0)) < 2:
            raise SystemExit("--pin needs two CPUs: one for the broker, one for this process")
        os.sched_setaffinity(0, {BROKER_CPU})          # the broker subprocess inherits it

    with broker_process(max_transfer_count=args.broker_max_transfer) as addr:
        if args.pin:
            os.sched_setaffinity(0, {HOST_CPU})        # this thread; the service's threads inherit it
        mq = MQClient(ClientConfig.parse(addr))
        topic = f"bench_sidecar_{uuid.uuid4().hex[:6]}"
        mq.create_topic(topic, queues=args.queues)
        queues = sorted(mq.publish_queues(topic, refresh=True))
        produce_fast(mq, queues, args.messages, args.size)
        ranges = [PullSpec(q, 0, mq.max_offset(q), group="bench_sidecar", pull_batch_size=args.pull_batch_size)
                  for q in queues]
        mq.close()

        service = SidecarService()
        cluster = Cluster(addr)

        def arrow(spec: PullSpec) -> int:
            for _ in service.pull(cluster, spec):
                pass
            return spec.end - spec.start

        def files(spec: PullSpec) -> int:
            reader = shm.FileReader()
            try:
                for path in service.pull_files(cluster, replace(spec, shared_memory=True)):
                    reader.take(path)     # its batches dropped at once: handed back at the next
            finally:
                reader.close()
            return spec.end - spec.start

        def pulls(spec: PullSpec) -> int:          # the sidecar's own pull path (direct connections)
            for _ in service._range(service.client(cluster), spec):
                pass
            return spec.end - spec.start

        def shared(spec: PullSpec) -> int:         # the same pulls over the shared transport
            for _ in read_range(service.client(cluster), spec, service.pull_policy):
                pass
            return spec.end - spec.start

        ways = (("pull + Arrow", arrow), ("pull + shared-memory files", files), ("pulls only", pulls),
                ("pulls only, shared transport", shared))
        try:
            run([PullSpec(ranges[0].queue, 0, min(2_000, ranges[0].end))], 1, arrow)    # connect, warm up
            rounds = {name: [run(ranges, args.threads, fn) for _ in range(args.rounds)] for name, fn in ways}
        finally:
            service.close()

    best = {name: min(r, key=lambda x: x[1]) for name, r in rounds.items()}
    rows = [{"way": name, "messages": n, "wall s": wall, "messages/s": n / wall,
             "CPU us / message": f"{cpu / n * 1e6:.3f}",
             "median round": f"{statistics.median(r[1] for r in rounds[name]) / n * 1e6:.3f}"}
            for name, (wall, cpu, n) in best.items()]
    print(table(rows))
    full, only = best["pull + Arrow"], best["pulls only"]
    print(f"\npulls / (pull + Arrow), CPU: {only[1] / full[1]:.2f}  "
          f"({args.pull_batch_size} a pull asked, broker cap {args.broker_max_transfer or 32}, "
          f"{args.threads} threads)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
