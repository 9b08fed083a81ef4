"""``rocketmq-spark offsets``: show or reset a group's offsets on the broker."""

from __future__ import annotations

import argparse

from rocketmq_spark.commands.common import add_cluster_args, client_from, parse_time, run


def _reset(args: argparse.Namespace) -> int:
    with client_from(args) as client:
        queues = client.subscribe_queues(args.topic, refresh=True)
        for mq in queues:
            if args.to == "earliest":
                target = client.min_offset(mq)
            elif args.to == "latest":
                target = client.max_offset(mq)
            else:
                target = client.search_offset(mq, parse_time(args.to))
            if not args.dry_run:
                client.update_consumer_offset(args.group, mq, target)
            print(f"{mq.topic}\t{mq.broker_name}\t{mq.queue_id}\t{target}")
    if args.dry_run:
        print("(dry run: nothing changed)")
    return 0


def _to(text: str) -> str:
    if text in ("earliest", "latest"):
        return text
    parse_time(text)  # validates
    return text


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(
        prog="rocketmq-spark offsets",
        description="Reset a consumer group's offsets of a topic on the broker. A Spark query "
                    "resumes from its checkpoint, not from these: they matter to "
                    "startingOffsets=group and to other RocketMQ consumers.")
    add_cluster_args(p)
    p.add_argument("--group", "-g", required=True, help="consumer group")
    p.add_argument("--topic", "-t", required=True, help="topic")
    p.add_argument("--to", required=True, type=_to,
                   help="earliest, latest, or a time (ms since epoch or ISO-8601)")
    p.add_argument("--dry-run", action="store_true", help="print the offsets, change nothing")
    args = p.parse_args(argv)
    return run(_reset, args)
