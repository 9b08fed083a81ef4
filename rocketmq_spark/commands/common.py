"""Arguments and helpers shared by the client-side subcommands."""

from __future__ import annotations

import argparse
import os
import sys
from contextlib import contextmanager
from datetime import datetime, timezone
from typing import Iterator

from rocketmq_spark.client import ClientConfig, MQClient
from rocketmq_spark.errors import RocketMQError


def add_cluster_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--name-server", "-n", default=os.environ.get("ROCKETMQ_NAMESRV", "127.0.0.1:9876"),
                   help="NameServer address(es), host:port[;host:port] (default $ROCKETMQ_NAMESRV "
                        "or 127.0.0.1:9876)")
    p.add_argument("--access-key", default=os.environ.get("ROCKETMQ_ACCESS_KEY"),
                   help="ACL access key (default $ROCKETMQ_ACCESS_KEY)")
    p.add_argument("--secret-key", default=os.environ.get("ROCKETMQ_SECRET_KEY"),
                   help="ACL secret key (default $ROCKETMQ_SECRET_KEY)")
    p.add_argument("--timeout", type=float, default=5.0, help="seconds per request (default 5)")


@contextmanager
def client_from(args: argparse.Namespace) -> Iterator[MQClient]:
    try:
        config = ClientConfig.parse(args.name_server, access_key=args.access_key,
                                    secret_key=args.secret_key, request_timeout=args.timeout)
    except ValueError as exc:
        raise SystemExit(f"--name-server: {exc}") from None
    client = MQClient(config)
    try:
        yield client
    finally:
        client.close()


def parse_time(text: str) -> int:
    """Milliseconds since the epoch from ms digits or an ISO-8601 time (UTC if no zone)."""
    if text.isdigit():
        return int(text)
    try:
        dt = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is neither milliseconds since the epoch nor an ISO-8601 time") from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return int(dt.timestamp() * 1000)


def run(func, args: argparse.Namespace) -> int:  # type: ignore[no-untyped-def]
    """Run a subcommand body; RocketMQ errors become one line on stderr and exit code 1."""
    try:
        return int(func(args) or 0)
    except RocketMQError as exc:
        print(f"rocketmq-spark: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
