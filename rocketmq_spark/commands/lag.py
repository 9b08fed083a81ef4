"""``rocketmq-spark lag``: per queue, broker max offset, group offset and lag
(what ``mqadmin consumerProgress`` shows)."""

from __future__ import annotations

import argparse
import json

from rocketmq_spark.commands.common import add_cluster_args, client_from, run


def _lag(args: argparse.Namespace) -> int:
    with client_from(args) as client:
        stats = client.consume_stats(args.group, args.topic)
    rows = sorted(stats.offset_table.items())
    if args.json:
        print(json.dumps({"group": args.group, "queues": [
            {"topic": mq.topic, "broker": mq.broker_name, "queue_id": mq.queue_id,
             "broker_offset": w.broker_offset, "consumer_offset": w.consumer_offset,
             "lag": w.broker_offset - w.consumer_offset} for mq, w in rows],
            "total_lag": sum(w.broker_offset - w.consumer_offset for _, w in rows)}))
        return 0
    print(f"{'#Topic':<32} {'#Broker Name':<16} {'#QID':>4} {'#Broker Offset':>14} "
          f"{'#Consumer Offset':>16} {'#Diff':>8}")
    for mq, w in rows:
        print(f"{mq.topic:<32} {mq.broker_name:<16} {mq.queue_id:>4} {w.broker_offset:>14} "
              f"{w.consumer_offset:>16} {w.broker_offset - w.consumer_offset:>8}")
    total = sum(w.broker_offset - w.consumer_offset for _, w in rows)
    print(f"\nConsume TPS: {stats.consume_tps:.2f}\nDiff Total: {total}")
    if not rows:
        print(f"(group {args.group!r} has committed no offset"
              f"{' for topic ' + repr(args.topic) if args.topic else ''})")
    return 0


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="rocketmq-spark lag",
                                description="Show a consumer group's progress and lag per queue.")
    add_cluster_args(p)
    p.add_argument("--group", "-g", required=True, help="consumer group")
    p.add_argument("--topic", "-t", help="only this topic")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = p.parse_args(argv)
    return run(_lag, args)
