"""``rocketmq-spark tail``: follow a topic and print its messages."""

from __future__ import annotations

import argparse
import json
import queue as queue_mod
import sys
import threading
import time

from rocketmq_spark.arguments import at_least
from rocketmq_spark.commands.common import add_cluster_args, client_from, run
from rocketmq_spark.remoting.route import MessageQueue
from rocketmq_spark.structs import PullStatus

TAIL_GROUP = "rocketmq_spark_tail"


def _format(m, as_json: bool, max_body: int) -> str:  # type: ignore[no-untyped-def]
    body = m.payload()
    text = body.decode("utf-8", errors="replace")
    if as_json:
        return json.dumps({"topic": m.topic, "queue_id": m.queue_id, "queue_offset": m.queue_offset,
                           "msg_id": m.msg_id, "tags": m.tags, "keys": m.keys, "body": text,
                           "store_timestamp": m.store_timestamp})
    if len(text) > max_body:
        text = text[:max_body] + "..."
    return f"{m.topic} q{m.queue_id}@{m.queue_offset} tags={m.tags or ''} keys={m.keys or ''} {text}"


def _tail(args: argparse.Namespace) -> int:
    out: queue_mod.Queue = queue_mod.Queue(maxsize=1000)
    stop = threading.Event()
    with client_from(args) as client:
        queues = client.subscribe_queues(args.topic)

        def follow(mq: MessageQueue) -> None:
            offset = client.min_offset(mq) if args.from_beginning else client.max_offset(mq)
            while not stop.is_set():
                try:
                    res = client.pull(mq, offset, group=TAIL_GROUP, expression=args.expression,
                                      suspend_ms=1000)
                except Exception as exc:  # noqa: BLE001 - reported, then retried after a pause
                    out.put(("error", f"{mq.broker_name}/{mq.queue_id}: {exc}"))
                    stop.wait(1.0)
                    continue
                for m in res.messages:
                    out.put(("msg", m))
                if res.status is PullStatus.OFFSET_ILLEGAL or res.next_begin_offset > offset:
                    offset = res.next_begin_offset

        threads = [threading.Thread(target=follow, args=(mq,), daemon=True) for mq in queues]
        for t in threads:
            t.start()
        printed = 0
        deadline = time.monotonic() + args.duration if args.duration else None
        try:
            while args.count is None or printed < args.count:
                wait = None if deadline is None else deadline - time.monotonic()
                if wait is not None and wait <= 0:
                    break
                try:
                    kind, item = out.get(timeout=wait)
                except queue_mod.Empty:
                    break
                if kind == "error":
                    print(f"rocketmq-spark tail: {item}", file=sys.stderr)
                    continue
                print(_format(item, args.json, args.max_body), flush=True)
                printed += 1
        finally:
            stop.set()
            for t in threads:
                t.join(timeout=3)
    return 0


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="rocketmq-spark tail",
                                description="Follow a topic and print its messages (no group offset is kept).")
    add_cluster_args(p)
    p.add_argument("--topic", "-t", required=True)
    p.add_argument("--from-beginning", action="store_true", help="start at each queue's earliest offset")
    p.add_argument("--expression", "-e", default="*", help="tag filter, e.g. 'TagA || TagB'")
    p.add_argument("--count", "-c", type=at_least(1), help="stop after this many messages (default: never)")
    p.add_argument("--duration", type=at_least(0.001, kind=float),
                   help="stop after this many seconds (default: never)")
    p.add_argument("--json", action="store_true", help="one JSON object per message")
    p.add_argument("--max-body", type=at_least(0), default=200, help="characters of body to print")
    args = p.parse_args(argv)
    return run(_tail, args)
