"""``rocketmq-spark topics``: list topics, create one on every broker."""

from __future__ import annotations

import argparse

from rocketmq_spark.commands.common import add_cluster_args, client_from, run


SYSTEM_TOPICS = ("TBW102", "SCHEDULE_TOPIC_XXXX", "SELF_TEST_TOPIC", "OFFSET_MOVED_EVENT",
                 "BenchmarkTest", "DefaultCluster", "TRANS_CHECK_MAX_TIME_TOPIC")


def _is_system(topic: str) -> bool:
    """Retry/DLQ topics, RMQ_SYS_* topics, cluster reply topics."""
    return topic.startswith(("%", "RMQ_SYS_", "rmq_sys_")) or topic.endswith("_REPLY_TOPIC")


def _list(args: argparse.Namespace) -> int:
    with client_from(args) as client:
        names = sorted(client.topic_list())
        if not args.all:
            system = set(SYSTEM_TOPICS) | set(client.cluster_brokers())
            names = [t for t in names if t not in system and not _is_system(t)]
        for name in names:
            if args.queues:
                queues = client.subscribe_queues(name)
                print(f"{name}\t{len(queues)}")
            else:
                print(name)
    return 0


def _create(args: argparse.Namespace) -> int:
    if args.queues < 1:
        raise SystemExit("--queues: must be at least 1")
    with client_from(args) as client:
        try:
            client.create_topic(args.topic, queues=args.queues, brokers=args.broker or None)
        except ValueError as exc:               # a broker name the cluster does not have
            raise SystemExit(f"rocketmq-spark topics create: --broker: {exc}") from None
        print(f"created {args.topic} with {args.queues} queues on "
              f"{', '.join(args.broker) if args.broker else 'every broker'}")
    return 0


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="rocketmq-spark topics", description="List or create topics.")
    sub = p.add_subparsers(dest="action", required=True)
    ls = sub.add_parser("list", help="list topics known to the NameServer")
    add_cluster_args(ls)
    ls.add_argument("--all", action="store_true", help="include system, retry and DLQ topics")
    ls.add_argument("--queues", action="store_true", help="also print each topic's queue count")
    ls.set_defaults(func=_list)
    cr = sub.add_parser("create", help="create (or update) a topic")
    add_cluster_args(cr)
    cr.add_argument("topic")
    cr.add_argument("--queues", type=int, default=4, help="read and write queues per broker (default 4)")
    cr.add_argument("--broker", action="append", help="broker name (repeatable; default: every broker)")
    cr.set_defaults(func=_create)
    args = p.parse_args(argv)
    return run(args.func, args)
