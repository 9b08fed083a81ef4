"""``rocketmq-spark produce``: send lines of a file or stdin, or a generated order workload."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Iterator

from rocketmq_spark.commands.common import add_cluster_args, client_from, run
from rocketmq_spark.sharding import select_queue
from rocketmq_spark.structs import Message
from rocketmq_spark.workload import orders

PROGRESS_THRESHOLD = 1000  # show a progress bar from this many messages on (on a terminal)


def _lines(path: str) -> Iterator[bytes]:
    stream = sys.stdin.buffer if path == "-" else open(path, "rb")
    try:
        for line in stream:
            line = line.rstrip(b"\r\n")
            if line:
                yield line
    finally:
        if stream is not sys.stdin.buffer:
            stream.close()


class Pacer:
    """Spreads sends evenly at ``rate`` per second (no limit when rate is 0)."""

    def __init__(self, rate: float, clock=time.monotonic, sleep=time.sleep) -> None:  # type: ignore[no-untyped-def]
        self.interval = 1.0 / rate if rate > 0 else 0.0
        self.clock, self.sleep = clock, sleep
        self.next = clock()

    def wait(self) -> None:
        if not self.interval:
            return
        delay = self.next - self.clock()
        if delay > 0:
            self.sleep(delay)
        self.next = max(self.next, self.clock() - 1.0) + self.interval


def _produce(args: argparse.Namespace) -> int:
    if args.rate < 0:
        raise SystemExit("--rate: must be >= 0")
    if args.generate is not None:
        items = ((m, key) for m, key in (o.to_message(args.topic) for o in orders(args.generate, seed=args.seed)))
        total: int | None = args.generate
    else:
        source = args.file or "-"
        items = ((Message(args.topic, body, tags=args.tags, keys=args.keys), args.sharding_key)
                 for body in _lines(source))
        total = None
    bar = None
    if args.progress == "on" or (args.progress == "auto" and sys.stderr.isatty()
                                 and (total or 0) >= PROGRESS_THRESHOLD):
        from tqdm import tqdm

        bar = tqdm(total=total, unit="msg", file=sys.stderr)
    pacer = Pacer(args.rate)
    sent = 0
    with client_from(args) as client:
        queues = None
        for message, key in items:
            pacer.wait()
            queue = None
            if key:
                if queues is None:
                    queues = client.send_queues(message.topic)
                queue = select_queue(key, queues)
            result = client.send(message, queue=queue)
            sent += 1
            if bar:
                bar.update(1)
            elif args.verbose:
                print(f"{result.status} {result.queue.broker_name}/{result.queue.queue_id}"
                      f"@{result.queue_offset} {result.msg_id}")
    if bar:
        bar.close()
    print(f"sent {sent} messages to {args.topic}")
    return 0


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(
        prog="rocketmq-spark produce",
        description="Send messages: one per line of a file or stdin, or a generated workload "
                    "of orders (keys, tags created/paid/shipped, sent orderly by customer).")
    add_cluster_args(p)
    p.add_argument("--topic", "-t", required=True)
    src = p.add_mutually_exclusive_group()
    src.add_argument("--file", "-f", help="read bodies from this file, one per line ('-' = stdin, the default)")
    src.add_argument("--generate", type=int, metavar="N", help="send N generated order events")
    p.add_argument("--seed", type=int, default=7, help="seed of the generated workload")
    p.add_argument("--tags", help="tag of every message read from a file")
    p.add_argument("--keys", help="keys of every message read from a file")
    p.add_argument("--sharding-key", help="send every message read from a file to this key's queue")
    p.add_argument("--rate", type=float, default=0.0, help="messages per second (0 = as fast as possible)")
    p.add_argument("--progress", choices=("auto", "on", "off"), default="auto",
                   help="progress bar (auto: on a terminal, from 1000 messages)")
    p.add_argument("--verbose", "-v", action="store_true", help="print every send result")
    args = p.parse_args(argv)
    return run(_produce, args)
