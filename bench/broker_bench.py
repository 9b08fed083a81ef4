"""Send and pull throughput of the embedded broker: our client against the C++ client.

    python bench/broker_bench.py [--messages N] [--size BYTES]

Both clients run in this process against one embedded broker subprocess (async flush, so
the figures measure the protocol path rather than the disk): sync single sends, then
pulls of everything back (32 messages per pull). Both clients also send in batches of 32;
ours through the send pipeline (batches of 256, 16 in flight) and the ``produce`` command
reading a file. Prints msg/s, MB/s and the ratios ours / C++ (to the C++ client's best send
path for the pipeline and the CLI)."""

from __future__ import annotations

import argparse
import sys
import uuid

from common import Timer, broker_process, table

from rocketmq_spark.client import ClientConfig, MQClient
from rocketmq_spark.remoting.route import MessageQueue
from rocketmq_spark.structs import Message, PullStatus


def ours_send(addr: str, topic: str, n: int, body: bytes) -> float:
    c = MQClient(ClientConfig.parse(addr))
    try:
        q = c.publish_queues(topic)[0]
        with Timer() as t:
            for _ in range(n):
                c.send(Message(topic, body), queue=q)
        return t.seconds
    finally:
        c.close()


def ours_send_batch(addr: str, topic: str, n: int, body: bytes) -> float:
    c = MQClient(ClientConfig.parse(addr))
    try:
        q = c.publish_queues(topic)[0]
        with Timer() as t:
            for i in range(0, n, 32):
                c.send_batch([Message(topic, body)] * min(32, n - i), queue=q)
        return t.seconds
    finally:
        c.close()


def ours_pipeline(addr: str, topic: str, n: int, body: bytes) -> float:
    """The CLI's and the jobs' path: batches of 256 per queue, 16 requests in flight."""
    from rocketmq_spark.client.pipeline import SendPipeline

    c = MQClient(ClientConfig.parse(addr))
    try:
        c.send_queues(topic)
        with Timer() as t:
            pipe = SendPipeline(c, producer_group="bench_pipeline", batch_size=256, depth=16)
            for i in range(n):
                pipe.add(Message(topic, body), None, i)
            assert pipe.close() == n
        return t.seconds
    finally:
        c.close()


def cli_produce(addr: str, topic: str, n: int, body: bytes, tmp: str) -> float:
    """``rocketmq-spark produce -f FILE``: n lines, the process's start included."""
    import os
    import subprocess

    path = os.path.join(tmp, "lines.txt")
    with open(path, "wb") as f:
        f.write((body + b"\n") * n)
    with Timer() as t:
        r = subprocess.run([sys.executable, "-m", "rocketmq_spark.cli", "produce", "-t", topic, "-f", path,
                            "-n", addr, "--progress", "off"], capture_output=True, text=True)
    if r.returncode != 0 or f"sent {n} messages" not in r.stdout:
        raise RuntimeError(f"produce failed: {r.stderr}")
    return t.seconds


def ours_pull(addr: str, topic: str, n: int) -> float:
    c = MQClient(ClientConfig.parse(addr))
    try:
        q = MessageQueue(topic, c.publish_queues(topic)[0].broker_name, 0)
        got, offset = 0, 0
        with Timer() as t:
            while got < n:
                r = c.pull(q, offset, group="bench_pull", max_nums=32)
                if r.status is not PullStatus.FOUND:
                    raise RuntimeError(f"pull stopped at {offset}: {r.status}")
                got += len(r.messages)
                offset = r.next_begin_offset
        return t.seconds
    finally:
        c.close()


def cpp_send(addr: str, topic: str, n: int, body: bytes) -> float:
    from tests.cppclient import CppProducer

    with CppProducer(addr, f"bench_{uuid.uuid4().hex[:8]}") as p:
        p.send(topic, body)  # route lookup outside the timing
        with Timer() as t:
            for _ in range(n - 1):
                p.send(topic, body)
        return t.seconds * n / max(1, n - 1)


def cpp_send_batch(addr: str, topic: str, n: int, body: bytes) -> float:
    from tests.cppclient import CppProducer

    with CppProducer(addr, f"bench_{uuid.uuid4().hex[:8]}") as p:
        p.send(topic, body)
        with Timer() as t:
            for i in range(0, n, 32):
                p.send_batch(topic, [body] * min(32, n - i))
        return t.seconds


def cpp_pull(addr: str, topic: str, n: int) -> float:
    from tests.cppclient import CppPullConsumer

    with CppPullConsumer(addr, f"bench_{uuid.uuid4().hex[:8]}") as pc:
        q = [x for x in pc.queues(topic) if x.queue_id == 0][0]
        got, offset = 0, 0
        with Timer() as t:
            while got < n:
                r = pc.pull(q, "*", offset, 32)
                if not r.messages:
                    raise RuntimeError(f"C++ pull stopped at {offset}: {r.status}")
                got += len(r.messages)
                offset = r.next_offset
        return t.seconds


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--messages", type=int, default=5000)
    p.add_argument("--size", type=int, default=128, help="body bytes (below 4096: no compression)")
    args = p.parse_args(argv)
    from tests.cppclient import isolate_home

    isolate_home()
    body = b"x" * args.size
    n = args.messages
    rows = []
    import tempfile

    tmp = tempfile.mkdtemp(prefix="broker-bench-")
    with broker_process() as addr:
        admin = MQClient(ClientConfig.parse(addr))
        topics = {k: f"bench_{k}_{uuid.uuid4().hex[:6]}"
                  for k in ("ours", "batch", "cpp", "cppbatch", "pipeline", "cli")}
        for t in topics.values():
            admin.create_topic(t, queues=1)
        admin.close()
        results = {
            "send: ours (sync)": ours_send(addr, topics["ours"], n, body),
            "send: C++ (sync)": cpp_send(addr, topics["cpp"], n, body),
            "send: ours (batch 32)": ours_send_batch(addr, topics["batch"], n, body),
            "send: C++ (batch 32)": cpp_send_batch(addr, topics["cppbatch"], n, body),
            "send: ours (pipeline 256 x 16)": ours_pipeline(addr, topics["pipeline"], n, body),
            "send: rocketmq-spark produce -f": cli_produce(addr, topics["cli"], n, body, tmp),
            "pull: ours": ours_pull(addr, topics["ours"], n),
            "pull: C++": cpp_pull(addr, topics["cpp"], n),
        }
    for name, secs in results.items():
        rows.append({"what": name, "messages": n, "seconds": secs, "msg/s": n / secs,
                     "MB/s": n * args.size / secs / 1e6})
    print(table(rows))
    ratio_send = results["send: C++ (sync)"] / results["send: ours (sync)"]
    ratio_pull = results["pull: C++"] / results["pull: ours"]
    cpp_best = min(results["send: C++ (sync)"], results["send: C++ (batch 32)"])
    print(f"\nratio ours/C++ (msg/s): send {ratio_send:.2f}, pull {ratio_pull:.2f}")
    print(f"ratio to the C++ client's best send path (msg/s): pipeline "
          f"{cpp_best / results['send: ours (pipeline 256 x 16)']:.2f}, produce CLI "
          f"{cpp_best / results['send: rocketmq-spark produce -f']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
