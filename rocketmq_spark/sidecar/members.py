"""The member keeper: keeps the queries' consumers registered with the brokers, as RocketMQ's
consumers keep themselves registered with HEART_BEAT.

A RocketMQ consumer heartbeats every broker of its cluster with its group, client id and
subscriptions; brokers drop a client 120 s after its last heartbeat, and tell the group's
other members (NOTIFY_CONSUMER_IDS_CHANGED) whenever one joins or leaves. That
registration is what makes a query a member of its group for everyone else:
GET_CONSUMER_LIST_BY_GROUP (the rebalance of Java consumers in the same group),
``mqadmin consumerConnection`` and consume stats. RocketMQ 5.x brokers also refuse
UPDATE_CONSUMER_OFFSET for a group they have no subscription group of
(SUBSCRIPTION_GROUP_NOT_EXIST); the first heartbeat creates it.

``join`` registers (cluster, group, client id) with its ConsumerData and heartbeats at once;
one daemon thread heartbeats every registration each ``interval`` seconds (to masters and
slaves: consumers may pull from either), and ``leave`` unregisters (UNREGISTER_CLIENT). A
registration is a lease like a lock's (``locks``): its owner joins again within ``lease``
seconds, or it is dropped and unregistered; one naming its holder process is dropped as
soon as the sidecar sees that process gone.

Members registered through one sidecar share its connection to each broker, and a broker
keeps one client per connection and group (Apache's ConsumerGroupInfo is keyed by channel):
two queries of the same group through one sidecar show as one member, the last to beat.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Callable

from rocketmq_spark.client import MQClient
from rocketmq_spark.errors import RocketMQError
from rocketmq_spark.remoting.bodies import ConsumerData
from rocketmq_spark.sidecar import liveness
from rocketmq_spark.sidecar.liveness import ProcessRef
from rocketmq_spark.sidecar.model import Cluster

log = logging.getLogger(__name__)

HEARTBEAT_INTERVAL = 20.0   # Java consumers: 30 s; brokers drop a client after 120 s
MEMBER_LEASE = 90.0
WATCH_INTERVAL = 2.0


@dataclass(frozen=True)
class MemberKey:
    cluster: Cluster
    group: str
    client_id: str


@dataclass
class _Member:
    data: ConsumerData
    seen: float
    holder: ProcessRef | None


class MemberKeeper:
    def __init__(self, client_for: Callable[[Cluster], MQClient], *, interval: float = HEARTBEAT_INTERVAL,
                 lease: float = MEMBER_LEASE, clock: Callable[[], float] = time.monotonic,
                 alive: Callable[[ProcessRef], bool | None] = liveness.alive) -> None:
        if lease <= interval:
            raise ValueError(f"member lease ({lease}s) must exceed the heartbeat interval ({interval}s)")
        self._client_for = client_for
        self.interval = interval
        self.lease = lease
        self._clock = clock
        self._alive = alive
        self._members: dict[MemberKey, _Member] = {}
        self._mutex = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.rounds = 0

    def join(self, key: MemberKey, data: ConsumerData, holder: ProcessRef | None = None) -> None:
        """Register (or renew) ``key``; a new or changed registration heartbeats at once, and
        its failure is raised (the broker must know the group before offsets are written)."""
        with self._mutex:
            old = self._members.get(key)
            self._members[key] = _Member(data, self._clock(), holder)
            if self._thread is None and not self._stop.is_set():
                self._thread = threading.Thread(target=self._run, name="rocketmq-member-heartbeats",
                                                daemon=True)
                self._thread.start()
        if old is None or old.data != data:
            self._beat(key.cluster, key.client_id)

    def members(self) -> dict[MemberKey, ConsumerData]:
        with self._mutex:
            return {k: m.data for k, m in self._members.items()}

    def leave(self, key: MemberKey) -> bool:
        """Unregister ``key``; False when it was not registered."""
        with self._mutex:
            gone = self._members.pop(key, None)
        if gone is None:
            return False
        self._unregister(key)
        return True

    def _addresses(self, client: MQClient) -> list[str]:
        return sorted({a for ids in client.cluster_addresses().values() for a in ids.values()})

    def _beat(self, cluster: Cluster, client_id: str) -> None:
        with self._mutex:
            consumers = [m.data for k, m in sorted(self._members.items(), key=lambda kv: kv[0].group)
                         if k.cluster == cluster and k.client_id == client_id]
        if consumers:
            client = self._client_for(cluster)
            client.heartbeat(client_id=client_id, consumers=consumers, addresses=self._addresses(client))

    def _unregister(self, key: MemberKey) -> None:
        try:
            client = self._client_for(key.cluster)
            client.unregister(client_id=key.client_id, consumer_group=key.group,
                              addresses=self._addresses(client))
        except RocketMQError as exc:   # the brokers drop it 120 s after its last heartbeat
            log.warning("unregistering consumer %s of group %s failed: %s", key.client_id, key.group, exc)

    def expire(self) -> list[MemberKey]:
        """Drop (and unregister) the registrations whose lease lapsed or whose holder is gone."""
        now = self._clock()
        with self._mutex:
            gone = [k for k, m in self._members.items()
                    if now - m.seen > self.lease or (m.holder is not None and self._alive(m.holder) is False)]
            for k in gone:
                log.info("consumer %s of group %s: its query is gone (no renewal for %.0f s, or its "
                         "process ended); unregistering it", k.client_id, k.group, now - self._members[k].seen)
                del self._members[k]
        for k in gone:
            self._unregister(k)
        return gone

    def beat_all(self) -> None:
        with self._mutex:
            clients = sorted({(k.cluster, k.client_id) for k in self._members}, key=repr)
        for cluster, client_id in clients:
            try:
                self._beat(cluster, client_id)
            except RocketMQError as exc:   # the next round retries
                log.warning("heartbeat of consumer %s failed: %s", client_id, exc)
        with self._mutex:
            self.rounds += 1

    def _run(self) -> None:
        due = self._clock() + self.interval
        while not self._stop.wait(min(WATCH_INTERVAL, self.interval)):
            self.expire()
            if self._clock() >= due:
                self.beat_all()
                due = self._clock() + self.interval

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
