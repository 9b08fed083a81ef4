"""``rocketmq-spark broker``: run the embedded NameServer + broker(s) in the foreground.

Once everything listens it prints one line holding ``nameServer=HOST:PORT`` (and the
brokers' addresses) on stdout, then serves until SIGTERM or SIGINT, and exits 0.
``--slaves N`` adds N slaves per broker name; ``--brokers 0`` runs the NameServer alone;
``--acting-master``: 5.x slaveActingMaster (see ``embedded.namesrv``).

``--join HOST:PORT`` runs one broker instead, in a process of its own, registered with
that running NameServer (``embedded.registration``): ``--broker-name``, ``--broker-id``
(0 a master, 1.. a slave of ``--master`` or of the master the NameServer names) and
``--data-dir`` (the broker's own directory: restarted on it, the broker keeps its data
and port, a slave copies on from where its log ends; ``--acting-master``: it registers with
enableActingMaster, as 5.x brokers with enableSlaveActingMaster do). It prints one line
``rocketmq-spark broker: broker-a=HOST:PORT brokerId=0 ...`` once registered.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from pathlib import Path

from rocketmq_spark.arguments import at_least
from rocketmq_spark.embedded.cluster import EmbeddedCluster
from rocketmq_spark.embedded.replication import SYNC_INTERVAL
from rocketmq_spark.embedded.store.message_store import MAX_TRANSFER_COUNT
from rocketmq_spark.embedded.topics import validate_topic
from rocketmq_spark.embedded.transactions import (TRANSACTION_CHECK_INTERVAL_MS, TRANSACTION_CHECK_MAX,
                                                  TRANSACTION_TIMEOUT_MS)
from rocketmq_spark.errors import ConfigError
from rocketmq_spark.tls import ClientAuth, Mode, ServerTls


def _topic(text: str) -> tuple[str, int | None]:
    name, sep, queues = text.partition(":")
    reason = validate_topic(name)
    if reason is not None:
        raise argparse.ArgumentTypeError(f"bad topic {name!r}: {reason}")
    if not sep:
        return name, None
    if not queues.isdigit() or int(queues) < 1:
        raise argparse.ArgumentTypeError(f"bad queue count {queues!r} in {text!r}: expected NAME:QUEUES, QUEUES >= 1")
    return name, int(queues)


def _port(text: str) -> int:
    if not text.isdigit() or int(text) > 65535:
        raise argparse.ArgumentTypeError(f"bad port {text!r}: expected 0..65535")
    return int(text)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="rocketmq-spark broker",
        description="Run a RocketMQ-compatible NameServer and broker(s) in one process, storing "
                    "data on disk. Prints 'nameServer=HOST:PORT' once listening; stop with "
                    "SIGTERM or Ctrl-C.")
    p.add_argument("--brokers", type=at_least(0), default=1,
                   help="number of brokers (broker-a, broker-b, ...); 0: the NameServer alone, for --join brokers")
    p.add_argument("--slaves", type=at_least(0), default=0,
                   help="slaves per broker name (brokerId 1..N), each copying its master (default 0)")
    p.add_argument("--slave-sync-interval-ms", type=at_least(1), default=int(SYNC_INTERVAL * 1000), metavar="MS",
                   help="how often a slave takes its master's topics, offsets and groups (Apache's "
                        f"SlaveSynchronize: {int(SYNC_INTERVAL * 1000)})")
    p.add_argument("--acting-master", action="store_true",
                   help="RocketMQ 5.x slaveActingMaster: the NameServer routes a broker name whose master "
                        "is away to its lowest slave as brokerId 0, its queues read-only (Apache's "
                        "supportActingMaster), and the brokers register for it (enableSlaveActingMaster); "
                        "with --join, the broker registers for it")
    join = p.add_argument_group("one broker of its own process (--join)")
    join.add_argument("--join", metavar="HOST:PORT", default=None,
                      help="run one broker registered with this running NameServer (';' separates several)")
    join.add_argument("--broker-name", default="broker-a", help="its broker name (default broker-a)")
    join.add_argument("--broker-id", type=at_least(0), default=0, help="0: a master (default); 1..: a slave")
    join.add_argument("--master", metavar="HOST:PORT", default=None,
                      help="a slave's master (default: the master the NameServer lists for --broker-name)")
    join.add_argument("--port", type=_port, default=0,
                      help="the broker's port (default 0: the port it had on --data-dir if free, else a free one)")
    p.add_argument("--data-dir", default="./data/rocketmq", help="where the brokers store their data "
                   "(default ./data/rocketmq)")
    p.add_argument("--namesrv-port", type=_port, default=9876,
                   help="NameServer port (default 9876; 0 picks a free port; brokers always use free ports)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on and advertise (default 127.0.0.1)")
    p.add_argument("--topic", action="append", type=_topic, default=[], metavar="NAME[:QUEUES]",
                   help="create this topic at start, QUEUES on every broker (repeatable; default --default-queues)")
    p.add_argument("--default-queues", type=at_least(1), default=4,
                   help="queues per broker of topics created without a count (default 4)")
    p.add_argument("--flush", choices=("sync", "async"), default="sync",
                   help="sync: answer a send once it is fsynced (default); async: answer at once")
    p.add_argument("--max-transfer-count", type=at_least(1), default=MAX_TRANSFER_COUNT, metavar="N",
                   help="the most messages one pull returns (Apache's maxTransferCountOnMessageInMemory; "
                        f"default {MAX_TRANSFER_COUNT})")
    txn = p.add_argument_group("transactional messages: when half messages are checked back "
                               "(Apache's transactionTimeOut, transactionCheckInterval, transactionCheckMax)")
    txn.add_argument("--transaction-timeout-ms", type=at_least(0), default=TRANSACTION_TIMEOUT_MS, metavar="MS",
                     help="a half message not committed or rolled back this long is checked back with its "
                          f"producer group (default {TRANSACTION_TIMEOUT_MS})")
    txn.add_argument("--transaction-check-interval-ms", type=at_least(1), default=TRANSACTION_CHECK_INTERVAL_MS,
                     metavar="MS", help=f"how often the brokers look for such messages (default "
                                        f"{TRANSACTION_CHECK_INTERVAL_MS})")
    txn.add_argument("--transaction-check-max", type=at_least(0), default=TRANSACTION_CHECK_MAX, metavar="N",
                     help="check-backs before a half message is given up on and moved to "
                          f"TRANS_CHECK_MAX_TIME_TOPIC (default {TRANSACTION_CHECK_MAX})")
    p.add_argument("--no-property-filter", dest="enable_property_filter", action="store_false",
                   help="refuse SQL92 subscriptions, as an Apache broker without enablePropertyFilter=true does")
    p.add_argument("--no-timers", dest="timers", action="store_false",
                   help="ignore 5.x timer properties (TIMER_DELIVER_MS, ...) and store such messages at "
                        "once, as a 4.x broker does (default: deliver them at their time)")
    p.add_argument("--acl", metavar="FILE", default=None,
                   help="enforce this ACL file (Apache's plain_acl.yml format) on the brokers: requests "
                        "must be signed by a configured account with the needed permissions")
    tls = p.add_argument_group("TLS (Apache's tlsMode; the NameServer and the brokers alike)")
    tls.add_argument("--tls-mode", choices=[m.value for m in Mode], default=Mode.DISABLED.value,
                     help="enforcing: TLS only; permissive: TLS and plain on the same port; "
                          "disabled (default)")
    tls.add_argument("--tls-cert", metavar="PEM", help="server certificate (chain), PEM")
    tls.add_argument("--tls-key", metavar="PEM", help="its private key, PEM (password: $ROCKETMQ_TLS_KEY_PASSWORD)")
    tls.add_argument("--tls-client-auth", choices=[a.value for a in ClientAuth], default="none",
                     help="ask clients for a certificate: none (default), optional, require")
    tls.add_argument("--tls-client-ca", metavar="PEM", help="CAs client certificates must chain to")
    p.add_argument("--log-level", default="WARNING", choices=("DEBUG", "INFO", "WARNING", "ERROR"),
                   help="log level on stderr (default WARNING)")
    return p


def _server_tls(p: argparse.ArgumentParser, args: argparse.Namespace) -> ServerTls | None:
    if args.tls_mode == Mode.DISABLED.value:
        return None
    if not args.tls_cert or not args.tls_key:
        p.error(f"--tls-mode {args.tls_mode} needs --tls-cert and --tls-key")
    return ServerTls(args.tls_cert, args.tls_key, os.environ.get("ROCKETMQ_TLS_KEY_PASSWORD"),
                     mode=Mode(args.tls_mode), client_auth=ClientAuth(args.tls_client_auth),
                     client_ca_file=args.tls_client_ca)


def _join(args: argparse.Namespace, tls: ServerTls | None,
          stop_signals: set[signal.Signals]) -> int:
    """One broker registered with a running NameServer (see the module doc)."""
    from rocketmq_spark.client.transport import Transport
    from rocketmq_spark.embedded.broker import Broker
    from rocketmq_spark.embedded.cluster import CLUSTER_NAME
    from rocketmq_spark.embedded.registration import BrokerRegistrar

    namesrvs = [a.strip() for a in args.join.split(";") if a.strip()]
    registrar: BrokerRegistrar | None = None

    def master() -> str | None:
        return args.master or (registrar.master_addr if registrar is not None else None)

    transport = Transport()
    try:
        broker = Broker(args.broker_name, Path(args.data_dir), root=Path(args.data_dir), host=args.host,
                        port=args.port, cluster=CLUSTER_NAME, default_queues=args.default_queues,
                        flush=args.flush, acl_file=args.acl, max_transfer_count=args.max_transfer_count, tls=tls,
                        transaction_timeout_ms=args.transaction_timeout_ms,
                        transaction_check_interval_ms=args.transaction_check_interval_ms,
                        transaction_check_max=args.transaction_check_max, broker_id=args.broker_id,
                        master=master if args.broker_id else None,
                        sync_interval=args.slave_sync_interval_ms / 1000, acting_master=args.acting_master)
        broker.start()
    except (ValueError, OSError, RuntimeError) as exc:
        transport.close()
        print(f"rocketmq-spark broker: cannot start: {exc}", file=sys.stderr)
        return 1
    try:
        if not broker.is_slave:
            for name, queues in args.topic:
                broker.create_topic(name, queues or args.default_queues)
        registrar = BrokerRegistrar(broker, namesrvs, transport)
        registrar.start()
        if not registrar.registered.wait(JOIN_TIMEOUT):
            print(f"rocketmq-spark broker: cannot register with the NameServer {args.join} within "
                  f"{JOIN_TIMEOUT:g} s: {registrar.last_error}", file=sys.stderr)
            return 1
        print(f"rocketmq-spark broker: {broker.name}={broker.addr} brokerId={broker.broker_id} "
              f"nameServer={args.join} dataDir={broker.root.resolve()}", flush=True)
        signal.sigwait(stop_signals)
        return 0
    finally:
        if registrar is not None:
            registrar.stop()
        broker.stop()
        transport.close()


JOIN_TIMEOUT = 60.0


def main(argv: list[str] | None = None) -> int:
    p = parser()
    args = p.parse_args(argv)
    if args.join is None and any(getattr(args, k) != p.get_default(k)
                                 for k in ("master", "port", "broker_id", "broker_name")):
        p.error("--broker-name, --broker-id, --master and --port go with --join")
    if args.join is not None and (args.slaves or args.brokers != 1):
        p.error("--join runs one broker: --brokers and --slaves do not go with it")
    logging.basicConfig(level=args.log_level, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    topics = {name: queues or args.default_queues for name, queues in args.topic}
    # Block the stop signals before any thread starts, then wait for one synchronously.
    # The old mask comes back on every way out: main() also runs inside other processes
    # (tests), whose later children would otherwise inherit blocked SIGTERM/SIGINT.
    stop_signals = {signal.SIGTERM, signal.SIGINT}
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, stop_signals)
    try:
        if args.join is not None:
            return _join(args, _server_tls(p, args), stop_signals)
        try:
            tls = _server_tls(p, args)
            cluster = EmbeddedCluster(Path(args.data_dir), brokers=args.brokers,
                                      namesrv_port=args.namesrv_port, host=args.host,
                                      default_queues=args.default_queues, topics=topics,
                                      flush=args.flush, acl_file=args.acl,
                                      max_transfer_count=args.max_transfer_count, tls=tls,
                                      transaction_timeout_ms=args.transaction_timeout_ms,
                                      transaction_check_interval_ms=args.transaction_check_interval_ms,
                                      transaction_check_max=args.transaction_check_max,
                                      enable_property_filter=args.enable_property_filter,
                                      timers=args.timers, slaves=args.slaves,
                                      sync_interval=args.slave_sync_interval_ms / 1000,
                                      acting_master=args.acting_master)
            cluster.start()
        except (ConfigError, OSError, RuntimeError) as exc:
            print(f"rocketmq-spark broker: cannot start: {exc}", file=sys.stderr)
            return 1
        brokers = " ".join([f"{name}={addr}" for name, addr in cluster.broker_addrs.items()] +
                           [f"{name}-{i + 1}={addr}" for name, addrs in cluster.slave_addrs.items()
                            for i, addr in enumerate(addrs)])
        print(f"rocketmq-spark broker: nameServer={cluster.namesrv_addr} {brokers} "
              f"dataDir={Path(args.data_dir).resolve()} tls={args.tls_mode}", flush=True)
        try:
            signal.sigwait(stop_signals)
        finally:
            cluster.stop()
        return 0
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


if __name__ == "__main__":
    sys.exit(main())
