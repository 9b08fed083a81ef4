"""Master/slave replication of the embedded broker: a slave copies its master's commit log
and syncs its tables, as Apache's HA service and SlaveSynchronize do.

How this works. A slave (brokerId > 0) runs ``ReplicaService``: a thread that asks its
master, over a connection of its own, for the commit log from the offset where its own log
ends (REPLICATE_COMMIT_LOG, a request code of this project's: Apache's HA speaks a raw
protocol on a port of its own). The master answers with whole records and holds a request
while it has nothing new (``processors.replicate``), so a slave is behind by a round trip
and not by a poll interval. The slave appends the bytes at
the same offsets and dispatches its own consume queues from them (``MessageStore.
put_replicated``), so every queue has the master's offsets. Restarted on its data, a slave
goes on from where its log ends; a master that is away is asked again every
``RETRY_SECONDS``.

A second thread, every ``sync_interval`` seconds (and at once when a copied record names a topic the slave
does not know) the slave takes its master's topic configs (GET_ALL_TOPIC_CONFIG), consumer
offsets (GET_ALL_CONSUMER_OFFSET) and subscription groups (GET_ALL_SUBSCRIPTIONGROUP_CONFIG),
as Apache's SlaveSynchronize does every 10 s; the master's tables replace the slave's.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Any, Callable

from rocketmq_spark.client.calls import check, request
from rocketmq_spark.embedded.groups import SubscriptionGroupConfig
from rocketmq_spark.embedded.processors.replicate import REPLICATE_COMMIT_LOG
from rocketmq_spark.embedded.store.commitlog import BadRecord
from rocketmq_spark.embedded.topics import TopicConfig
from rocketmq_spark.errors import RocketMQError
from rocketmq_spark.remoting import fastjson
from rocketmq_spark.remoting.codes import RequestCode, ResponseCode

if TYPE_CHECKING:
    from rocketmq_spark.client.transport import Transport
    from rocketmq_spark.embedded.broker import Broker

log = logging.getLogger(__name__)

MAX_BYTES = 4 * 1024 * 1024        # commit log asked for per request at most
RETRY_SECONDS = 0.5                # a master that is away is asked again this often
SYNC_INTERVAL = 10.0               # Apache's SlaveSynchronize period
REQUEST_TIMEOUT = 30.0


class ReplicaService:
    """The slave's side: copies the commit log and syncs the tables (see the module doc)."""

    def __init__(self, broker: "Broker", master: Callable[[], str | None], transport: "Transport", *,
                 sync_interval: float = SYNC_INTERVAL) -> None:
        self.broker = broker
        self.master = master
        self.transport = transport
        self.sync_interval = sync_interval
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._sync_now = threading.Event()
        self.copied_to = broker.store.commitlog.max_offset
        self.master_max = -1          # the master's commit-log end at its last answer

    def start(self) -> None:
        for target, what in ((self._copy_loop, "replica"), (self._sync_loop, "slave-sync")):
            t = threading.Thread(target=target, name=f"{self.broker.name}-{self.broker.broker_id}-{what}",
                                 daemon=True)
            t.start()
            self._threads.append(t)

    def stop(self) -> None:
        """Stop copying; closes the transport (it is the service's own), which also ends a
        request the master is holding."""
        self._stop.set()
        self._sync_now.set()
        self.transport.close()
        for t in self._threads:
            t.join(REQUEST_TIMEOUT)
        self._threads.clear()

    def sync_soon(self) -> None:
        """Take the master's tables now rather than at the next interval."""
        self._sync_now.set()

    # ------------------------------------------------------------ commit log

    def _copy_loop(self) -> None:
        store = self.broker.store
        while not self._stop.is_set():
            address = self.master()
            if address is None:
                self._stop.wait(RETRY_SECONDS)
                continue
            offset = store.commitlog.max_offset
            try:
                answer = self.transport.invoke(address, request(
                    REPLICATE_COMMIT_LOG, {"offset": offset, "maxBytes": MAX_BYTES}), REQUEST_TIMEOUT)
            except RocketMQError as exc:
                log.debug("%s slave: master %s not reachable: %s", self.broker.name, address, exc)
                self._stop.wait(RETRY_SECONDS)
                continue
            if answer.code != ResponseCode.SUCCESS:
                log.error("%s slave: master %s refused replication (code %d): %s", self.broker.name, address,
                          answer.code, answer.remark)
                self._stop.wait(RETRY_SECONDS * 10)
                continue
            self.master_max = int(answer.ext.get("maxOffset", "-1"))
            if not answer.body:
                continue
            try:
                before = set(store.queue_keys())
                self.copied_to = store.put_replicated(answer.body, int(answer.ext.get("offset", offset)))
            except (BadRecord, ValueError) as exc:
                log.error("%s slave: cannot append the copy from %s: %s", self.broker.name, address, exc)
                self._stop.wait(RETRY_SECONDS * 10)
                continue
            if any(self.broker.topics.get(t) is None for t, _ in set(store.queue_keys()) - before):
                self._sync_now.set()

    # ------------------------------------------------------------ tables

    def _sync_loop(self) -> None:
        while not self._stop.is_set():
            address = self.master()
            if address is not None:
                try:
                    self.sync_once(address)
                except (RocketMQError, ValueError, KeyError, TypeError) as exc:
                    log.debug("%s slave: table sync from %s failed: %s", self.broker.name, address, exc)
            self._sync_now.wait(self.sync_interval)
            self._sync_now.clear()

    def sync_once(self, address: str) -> None:
        topics = self._get(address, RequestCode.GET_ALL_TOPIC_CONFIG)
        table = topics.get("topicConfigTable") or {}
        self.broker.topics.replace_all([TopicConfig.from_json(v) for v in table.values()],
                                       topics.get("dataVersion"))
        offsets = self._get(address, RequestCode.GET_ALL_CONSUMER_OFFSET)
        self.broker.offsets.replace_all(offsets.get("offsetTable") or {})
        groups = self._get(address, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
        for obj in (groups.get("subscriptionGroupTable") or {}).values():
            self.broker.groups.put(SubscriptionGroupConfig.from_json(obj))

    def _get(self, address: str, code: int) -> dict[str, Any]:
        answer = check(self.transport.invoke(address, request(code), REQUEST_TIMEOUT), code, address)
        return fastjson.loads(answer.body) if answer.body else {}
