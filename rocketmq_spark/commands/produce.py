"""``rocketmq-spark produce``: send lines of a file or stdin, or a generated order workload.

Sends go through a ``SendPipeline``: batches of ``--batch-size`` per queue, ``--in-flight``
requests at once (one at a time per sharding key's queue, which keeps its order); every line
is acknowledged before the command reports success, and a refused request is reported with
its line numbers (nothing after it is sent)."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Iterator

from rocketmq_spark.arguments import at_least
from rocketmq_spark.commands.common import add_cluster_args, client_from, run
from rocketmq_spark.client.mqclient import DEFAULT_PRODUCER_GROUP
from rocketmq_spark.client.pipeline import PipelineFailed, SendPipeline
from rocketmq_spark.structs import Message
from rocketmq_spark.workload import orders

PROGRESS_THRESHOLD = 1000  # show a progress bar from this many messages on (on a terminal)


class Lines:
    """The non-empty lines of a file or stdin with their line numbers (a failed send names
    the lines of the file, empty ones counted); ``empty`` counts the lines skipped."""

    def __init__(self, path: str) -> None:
        self.path, self.empty = path, 0
        if path != "-":
            try:
                open(path, "rb").close()          # refused now, not after a connection
            except OSError as exc:
                raise SystemExit(f"rocketmq-spark produce: --file {path}: {exc.strerror}") from None

    def __iter__(self) -> Iterator[tuple[int, bytes]]:
        stream = sys.stdin.buffer if self.path == "-" else open(self.path, "rb")
        try:
            for number, line in enumerate(stream, 1):
                line = line.rstrip(b"\r\n")
                if line:
                    yield number, line
                else:
                    self.empty += 1
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
    lines: Lines | None = None
    if args.generate is not None:
        items: Iterator[tuple[int, Message, str | None]] = (
            (n, *o.to_message(args.topic)) for n, o in enumerate(orders(args.generate, seed=args.seed), 1))
        total: int | None = args.generate
        what = "message"
    else:
        lines = Lines(args.file or "-")
        items = ((number, Message(args.topic, body, tags=args.tags, keys=args.keys), args.sharding_key)
                 for number, body in lines)
        total = None
        what = "line"
    bar = None
    if args.progress == "on" or (args.progress == "auto" and sys.stderr.isatty()
                                 and (total or 0) >= PROGRESS_THRESHOLD):
        from tqdm import tqdm

        bar = tqdm(total=total, unit="msg", file=sys.stderr)

    def acknowledged(refs, result) -> None:  # type: ignore[no-untyped-def]
        if bar:
            bar.update(len(refs))
        elif args.verbose:
            first, last = refs[0], refs[-1]
            span = f"{what} {first}" if first == last else f"{what}s {first}..{last}"
            print(f"{result.status} {result.queue.broker_name}/{result.queue.queue_id}"
                  f"@{result.queue_offset} {span}")

    pacer = Pacer(args.rate)
    with client_from(args) as client:
        # Paced sends go out one by one as they come; unpaced ones in batches.
        pipe = SendPipeline(client, producer_group=args.producer_group,
                            batch_size=1 if args.rate > 0 else args.batch_size,
                            depth=args.in_flight, on_result=acknowledged)
        try:
            for n, message, key in items:
                pacer.wait()
                pipe.add(message, key, n)
            sent = pipe.close()
        except PipelineFailed as exc:
            if bar:
                bar.close()
            for f in exc.failures:
                first, last = f.refs[0], f.refs[-1]
                span = f"{what} {first}" if first == last else f"{what}s {first}..{last}"
                print(f"rocketmq-spark produce: {span} not sent to {f.queue.topic}/"
                      f"{f.queue.broker_name}/{f.queue.queue_id}: {f.error}", file=sys.stderr)
            print(f"rocketmq-spark produce: {exc.acknowledged} {what}s were acknowledged; "
                  f"nothing after the first failure was sent", file=sys.stderr)
            return 1
    if bar:
        bar.close()
    skipped = f" ({lines.empty} empty line{'s' if lines.empty != 1 else ''} skipped)" if lines and lines.empty else ""
    print(f"sent {sent} messages to {args.topic}{skipped}")
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
    p.add_argument("--producer-group", default=DEFAULT_PRODUCER_GROUP,
                   help=f"producer group of the sends (default {DEFAULT_PRODUCER_GROUP})")
    p.add_argument("--batch-size", type=at_least(1, most=1024), default=256, metavar="N",
                   help="messages per request (default 256; 1 with --rate)")
    p.add_argument("--in-flight", type=at_least(1, most=256), default=16, metavar="N",
                   help="requests sent before the first answer is awaited (default 16); a "
                        "sharding key's queue has one at a time, to keep its order")
    p.add_argument("--verbose", "-v", action="store_true", help="print every request's result")
    args = p.parse_args(argv)
    return run(_produce, args)
