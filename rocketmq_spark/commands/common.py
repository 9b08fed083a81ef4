"""Arguments and helpers shared by the client-side subcommands."""

from __future__ import annotations

import argparse
import os
import sys
from contextlib import contextmanager
from datetime import datetime, timezone
from typing import Iterator

from rocketmq_spark.client import ClientConfig, MQClient
from rocketmq_spark.errors import ConfigError, RocketMQError
from rocketmq_spark.tls import TlsSettings, Verify


def add_cluster_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--name-server", "-n", default=os.environ.get("ROCKETMQ_NAMESRV", "127.0.0.1:9876"),
                   help="NameServer address(es), host:port[;host:port] (default $ROCKETMQ_NAMESRV "
                        "or 127.0.0.1:9876)")
    p.add_argument("--access-key", default=os.environ.get("ROCKETMQ_ACCESS_KEY"),
                   help="ACL access key (default $ROCKETMQ_ACCESS_KEY)")
    p.add_argument("--secret-key", default=os.environ.get("ROCKETMQ_SECRET_KEY"),
                   help="ACL secret key (default $ROCKETMQ_SECRET_KEY)")
    p.add_argument("--timeout", type=float, default=5.0, help="seconds per request (default 5)")
    t = p.add_argument_group("TLS (every connection, NameServers and brokers alike)")
    t.add_argument("--tls", action="store_true", default=os.environ.get("ROCKETMQ_TLS") == "true",
                   help="connect over TLS (default: $ROCKETMQ_TLS=true)")
    t.add_argument("--tls-ca", metavar="PEM", default=os.environ.get("ROCKETMQ_TLS_CA"),
                   help="trust the CAs in this file (default $ROCKETMQ_TLS_CA, else the system's)")
    t.add_argument("--tls-verify", choices=[v.value for v in Verify], default=Verify.FULL.value,
                   help="full: chain and host (default); ca: chain only; none: no check (tests only)")
    t.add_argument("--tls-cert", metavar="PEM", help="client certificate, for clusters that ask for one")
    t.add_argument("--tls-key", metavar="PEM",
                   help="its private key (password: $ROCKETMQ_TLS_KEY_PASSWORD)")


def tls_from(args: argparse.Namespace) -> TlsSettings | None:
    if not args.tls:
        if args.tls_ca or args.tls_cert or args.tls_key:
            raise SystemExit("--tls-ca, --tls-cert and --tls-key need --tls")
        return None
    try:
        return TlsSettings(ca_file=args.tls_ca, cert_file=args.tls_cert, key_file=args.tls_key,
                           key_password=os.environ.get("ROCKETMQ_TLS_KEY_PASSWORD"),
                           verify=Verify(args.tls_verify))
    except ConfigError as exc:
        raise SystemExit(f"rocketmq-spark: {exc}") from None


@contextmanager
def client_from(args: argparse.Namespace) -> Iterator[MQClient]:
    try:
        config = ClientConfig.parse(args.name_server, access_key=args.access_key,
                                    secret_key=args.secret_key, request_timeout=args.timeout,
                                    tls=tls_from(args))
    except ValueError as exc:
        raise SystemExit(f"rocketmq-spark: --name-server: {exc}") from None
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
    """Run a subcommand body; RocketMQ errors become one line on stderr and exit code 1; a
    reader of the output that goes away (``| head``) ends the command quietly, as a SIGPIPE
    would (exit code 141)."""
    try:
        return int(func(args) or 0)
    except RocketMQError as exc:
        print(f"rocketmq-spark: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        # what is still buffered for stdout must not fail again when Python exits
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except KeyboardInterrupt:
        return 130
