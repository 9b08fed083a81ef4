"""``EmbeddedCluster``: a NameServer and N brokers in this process, persistent on disk.

    with EmbeddedCluster("data/rocketmq", brokers=2, topics={"orders": 4}) as c:
        c.namesrv_addr      # "127.0.0.1:PORT"
        c.broker_addrs      # {"broker-a": "127.0.0.1:PORT", "broker-b": ...}
        c.brokers           # {"broker-a": Broker, ...}

Brokers are named broker-a, broker-b, ... in cluster DefaultCluster, each on its own
port (free ports; a broker reuses its previous port when it is free) and storing under
``<data_dir>/<broker name>/``. ``topics`` are created on every broker at start (existing
ones keep their queue count unless it differs). With ``acl_file`` (Apache's
``plain_acl.yml``, see ``embedded.acl``) every broker checks the signature and the
permissions of each request; the NameServer answers everyone. ``transaction_timeout_ms``,
``transaction_check_interval_ms`` and ``transaction_check_max`` set every broker's
check-backs of transactional messages (Apache's transactionTimeOut 6000 ms,
transactionCheckInterval 60000 ms, transactionCheckMax 15 by default). ``timers``
(default True) gives every broker 5.x's timer messages (``Broker``); False makes them
brokers that ignore timers, as 4.x does.

With ``slaves=N`` each broker name also runs N slaves (brokerId 1..N, ``c.slaves["broker-a"]``,
storing under ``<data_dir>/broker-a-1/``...), each copying its master's commit log and
tables over TCP (``embedded.replication``) and listed in the routes with its own address.
``brokers=0`` runs the NameServer alone, for brokers of other processes to join.
"""

from __future__ import annotations

import logging
import string
from pathlib import Path
from types import TracebackType
from typing import Callable

from rocketmq_spark.embedded.broker import Broker
from rocketmq_spark.embedded.clock import Clock, SystemClock
from rocketmq_spark.embedded.namesrv import NameServer
from rocketmq_spark.embedded.replication import SYNC_INTERVAL
from rocketmq_spark.embedded.store.commitlog import DEFAULT_SEGMENT_SIZE
from rocketmq_spark.embedded.store.message_store import MAX_TRANSFER_COUNT
from rocketmq_spark.embedded.topics import TopicConfig, validate_topic
from rocketmq_spark.embedded.transactions import (TRANSACTION_CHECK_INTERVAL_MS, TRANSACTION_CHECK_MAX,
                                                  TRANSACTION_TIMEOUT_MS, TransactionConfig)
from rocketmq_spark.errors import ConfigError
from rocketmq_spark.remoting.codes import Perm
from rocketmq_spark.tls import ServerTls

log = logging.getLogger(__name__)

CLUSTER_NAME = "DefaultCluster"


def broker_name(index: int) -> str:
    letters = string.ascii_lowercase
    return f"broker-{letters[index]}" if index < len(letters) else f"broker-{index}"


class EmbeddedCluster:
    def __init__(self, data_dir: str | Path, brokers: int = 1, namesrv_port: int = 0,
                 host: str = "127.0.0.1", default_queues: int = 4, topics: dict[str, int] | None = None,
                 flush: str = "sync", acl_file: str | None = None, *, clock: Clock | None = None,
                 segment_size: int = DEFAULT_SEGMENT_SIZE, advertised_host: str | None = None,
                 max_transfer_count: int = MAX_TRANSFER_COUNT, tls: ServerTls | None = None,
                 transaction_timeout_ms: int = TRANSACTION_TIMEOUT_MS,
                 transaction_check_interval_ms: int = TRANSACTION_CHECK_INTERVAL_MS,
                 transaction_check_max: int = TRANSACTION_CHECK_MAX, dispatch_lag_ms: int = 0,
                 enable_property_filter: bool = True,
                 timers: bool = True,
                 slaves: int = 0, sync_interval: float = SYNC_INTERVAL, acting_master: bool = False) -> None:
        if brokers < 0:
            raise ConfigError(f"brokers must be at least 0 (a NameServer alone), not {brokers}")
        if slaves < 0:
            raise ConfigError(f"slaves must be at least 0, not {slaves}")
        if slaves and (acl_file or tls):
            raise ConfigError("slaves do not replicate over ACL or TLS yet: use slaves=0 with acl_file or tls")
        if default_queues < 1:
            raise ConfigError(f"default_queues must be at least 1, not {default_queues}")
        if flush not in ("sync", "async"):
            raise ConfigError(f"flush must be 'sync' or 'async', not {flush!r}")
        for name, queues in (topics or {}).items():
            reason = validate_topic(name)
            if reason is not None:
                raise ConfigError(f"topic {name!r}: {reason}")
            if queues < 1:
                raise ConfigError(f"topic {name!r}: queue count must be at least 1, not {queues}")
        try:
            self.transaction_config = TransactionConfig(transaction_timeout_ms, transaction_check_interval_ms,
                                                        transaction_check_max)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        self.data_dir = Path(data_dir)
        self.host = host
        self.default_queues = default_queues
        self.initial_topics = dict(topics or {})
        self.flush = flush
        self.acl_file = acl_file
        self.tls = tls                 # NameServer and brokers serve TLS (Apache's tlsMode) when set
        self.clock: Clock = clock or SystemClock()
        self.brokers: dict[str, Broker] = {
            broker_name(i): Broker(broker_name(i), self.data_dir, host=host, advertised_host=advertised_host,
                                   cluster=CLUSTER_NAME, default_queues=default_queues, flush=flush,
                                   clock=self.clock, segment_size=segment_size, acl_file=acl_file,
                                   max_transfer_count=max_transfer_count, tls=tls,
                                   transaction_timeout_ms=transaction_timeout_ms,
                                   transaction_check_interval_ms=transaction_check_interval_ms,
                                   transaction_check_max=transaction_check_max,
                                   dispatch_lag_ms=dispatch_lag_ms,
                                   enable_property_filter=enable_property_filter, timers=timers,
                                   acting_master=acting_master)
            for i in range(brokers)}
        self.slaves: dict[str, list[Broker]] = {
            name: [Broker(name, self.data_dir, host=host, advertised_host=advertised_host, cluster=CLUSTER_NAME,
                          default_queues=default_queues, flush=flush, clock=self.clock,
                          segment_size=segment_size, max_transfer_count=max_transfer_count,
                          broker_id=k, master=self._master_of(master), sync_interval=sync_interval,
                          acting_master=acting_master)
                   for k in range(1, slaves + 1)]
            for name, master in self.brokers.items()} if slaves else {}
        self.namesrv = NameServer(self._all_brokers, host=host, port=namesrv_port,
                                  cluster=CLUSTER_NAME, advertised_host=advertised_host, tls=tls,
                                  acting_master=acting_master)
        self._started = False

    @staticmethod
    def _master_of(master: Broker) -> Callable[[], str | None]:
        return lambda: master.addr if master.started else None

    def _all_brokers(self) -> list[Broker]:
        return list(self.brokers.values()) + [s for group in self.slaves.values() for s in group]

    # ------------------------------------------------------------ life cycle

    def start(self) -> "EmbeddedCluster":
        if self._started:
            return self
        started: list[Broker] = []
        try:
            for broker in self.brokers.values():
                broker.start()
                started.append(broker)
                for topic, queues in self.initial_topics.items():
                    existing = broker.topics.get(topic)
                    if existing is None or existing.queue_count != queues:
                        broker.create_topic(topic, queues)
            for group in self.slaves.values():
                for slave in group:
                    slave.start()
                    started.append(slave)
            self.namesrv.start()
        except BaseException:
            for broker in started:
                broker.stop()
            raise
        self._started = True
        log.info("embedded cluster: nameServer=%s brokers=%s", self.namesrv_addr, self.broker_addrs)
        return self

    def stop(self) -> None:
        if not self._started:
            return
        self._started = False
        self.namesrv.stop()
        for broker in reversed(self._all_brokers()):
            broker.stop()

    def __enter__(self) -> "EmbeddedCluster":
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    # ------------------------------------------------------------ addresses

    @property
    def namesrv_addr(self) -> str:
        return self.namesrv.addr

    @property
    def broker_addrs(self) -> dict[str, str]:
        return {name: b.addr for name, b in self.brokers.items()}

    @property
    def slave_addrs(self) -> dict[str, list[str]]:
        return {name: [s.addr for s in group] for name, group in self.slaves.items()}

    # ------------------------------------------------------------ conveniences

    def create_topic(self, topic: str, queues: int | None = None, perm: int = Perm.READ | Perm.WRITE,
                     brokers: list[str] | None = None) -> dict[str, TopicConfig]:
        """Create (or update) ``topic`` on the given brokers (all by default)."""
        reason = validate_topic(topic)
        if reason is not None:
            raise ConfigError(f"topic {topic!r}: {reason}")
        made = {name: self.brokers[name].create_topic(topic, queues, perm)
                for name in (brokers or list(self.brokers))}
        for name in made:
            for slave in self.slaves.get(name, ()):
                if slave.replica is not None:
                    slave.replica.sync_soon()
        return made
