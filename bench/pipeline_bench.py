"""How many pulls of a range to keep in flight, on a host that is busy with other work.

    python bench/pipeline_bench.py [--messages N] [--depths 16,32] [--rounds R] [--size BYTES]
                                   [--no-competitor]

The setting of ``host_cost_bench.py`` without Spark: the embedded broker runs on CPU 1,
this process on CPU 0 reads every queue's whole range (4 queues, 2 at a time, as two tasks
of ``local[2]`` do) the way the sidecar serves a task on its own host
(``SidecarService.pull_files``: pipelined pulls, the columnar decode, shared-memory files,
each unlinked here as the reader takes it). A second process spins on CPU 0 the whole time,
as Spark's JVM and workers keep that CPU busy: the read's threads then wait for the CPU
after each wake-up, and whether the broker still has work meanwhile depends on how many
pulls are in flight. The depths alternate round by round (the machine drifts); the median
round of each is printed: the read's wall time, the broker's CPU (its process) and how busy
it was over the read, and this process's CPU. No depth wins by a timed assertion here: the
figures are for bench/README.md.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

from common import BROKER_CPU, HOST_CPU, BrokerProcess, produce_fast, table  # also puts the project root on sys.path
from sidecar_bench import run

from rocketmq_spark.client import ClientConfig, MQClient
from rocketmq_spark.sidecar.model import Cluster, PullSpec
from rocketmq_spark.sidecar.pull import PullPolicy
from rocketmq_spark.sidecar.service import SidecarService


def process_cpu(pid: int) -> float:
    """CPU seconds of process ``pid`` (user + system), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--messages", type=int, default=400_000)
    p.add_argument("--depths", default="16,32", help="pipeline depths to compare, comma-separated")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--size", type=int, default=100, help="body bytes")
    p.add_argument("--no-competitor", action="store_true", help="leave CPU 0 to the read alone")
    args = p.parse_args()
    depths = [int(d) for d in args.depths.split(",")]
    if len(os.sched_getaffinity(0)) < 2:
        print("needs 2 CPUs (the broker on one, the reader on the other)", file=sys.stderr)
        return 2

    os.sched_setaffinity(0, {BROKER_CPU})       # the broker subprocess inherits CPU 1
    root = Path(tempfile.mkdtemp(prefix="rmq-pipeline-"))
    broker = BrokerProcess(root / "data", log=root / "broker.log").start()
    competitor = None
    try:
        mq = MQClient(ClientConfig.parse(broker.namesrv_addr))
        topic = f"pipeline_{uuid.uuid4().hex[:6]}"
        mq.create_topic(topic, queues=4)
        queues = sorted(mq.publish_queues(topic, refresh=True))
        produce_fast(mq, queues, args.messages, args.size)
        ranges = [PullSpec(q, 0, mq.max_offset(q), group="bench_pipeline", shared_memory=True) for q in queues]
        mq.close()
        os.sched_setaffinity(0, {HOST_CPU})
        if not args.no_competitor:
            competitor = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        cluster = Cluster(broker.namesrv_addr)
        rounds: dict[int, list[tuple[float, float, float]]] = {d: [] for d in depths}
        assert broker.pid is not None
        for _ in range(args.rounds):
            for depth in depths:
                service = SidecarService(pull_policy=PullPolicy(pipeline_depth=depth))

                def files(spec: PullSpec, service: SidecarService = service) -> int:
                    for path in service.pull_files(cluster, spec):
                        os.unlink(path)           # as the reader takes it
                    return spec.end - spec.start

                b0 = process_cpu(broker.pid)
                wall, reader_s, _ = run(ranges, 2, files)
                rounds[depth].append((wall, process_cpu(broker.pid) - b0, reader_s))
                service.close()
    finally:
        if competitor is not None:
            competitor.kill()
            competitor.wait()
        broker.stop()
        shutil.rmtree(root, ignore_errors=True)
    rows = []
    for depth, got in rounds.items():
        wall, broker_s, reader_s = sorted(got)[len(got) // 2]
        rows.append({"depth": depth, "median wall s": f"{wall:.2f}", "broker CPU s": f"{broker_s:.2f}",
                     "broker busy": f"{broker_s / wall:.0%}", "reader CPU s": f"{reader_s:.2f}",
                     "rounds' wall s": " ".join(f"{w:.2f}" for w, _, _ in got)})
    print(table(rows))
    print(f"\n{args.messages} messages of {args.size} B, 4 queues read 2 at a time, "
          f"{'a spinning process beside the reader on CPU 0' if competitor else 'CPU 0 to the reader alone'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
