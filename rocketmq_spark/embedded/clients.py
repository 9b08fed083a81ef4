"""Client registry (``ConsumerManager`` / ``ProducerManager``): who is connected, in which
group, subscribed to what.

How this works. A HEART_BEAT registers the connection as a channel of each consumer group
and producer group it names, with its client id, and replaces the group's subscription
table the way 4.9.8 does (``ConsumerGroupInfo.updateSubscription``: a new topic or a
dropped topic is a change, a newer subVersion is not). A consumer group whose channel
set or topic set changed must be told (NOTIFY_CONSUMER_IDS_CHANGED); the methods return
the channels to notify and the broker sends the frames. A closed connection, an
UNREGISTER_CLIENT or 120 s without a heartbeat removes the client; an empty group
disappears. Times come from the injected clock.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field, replace
from typing import Protocol

from rocketmq_spark.embedded.clock import Clock
from rocketmq_spark.remoting.bodies import ConsumerData, SubscriptionData
from rocketmq_spark.remoting.command import RemotingCommand

CHANNEL_EXPIRED_MS = 120_000


class Channel(Protocol):
    id: int
    remote_addr: str

    def send(self, cmd: RemotingCommand) -> bool:
        """Queue a frame for the client; False when the connection is closed."""


@dataclass
class ClientChannel:
    conn: Channel
    client_id: str
    language: str
    version: int
    last_update: int


@dataclass
class ConsumerGroupInfo:
    group: str
    consume_type: str
    message_model: str
    consume_from_where: str
    channels: dict[int, ClientChannel] = field(default_factory=dict)
    subscriptions: dict[str, SubscriptionData] = field(default_factory=dict)

    @property
    def clustering(self) -> bool:
        return self.message_model == "CLUSTERING"

    def client_ids(self) -> list[str]:
        return [c.client_id for c in self.channels.values()]


Notice = tuple[str, list[ClientChannel]]  # (group, channels to tell)


class ClientManager:
    def __init__(self, clock: Clock, expire_ms: int = CHANNEL_EXPIRED_MS) -> None:
        self.clock = clock
        self.expire_ms = expire_ms
        self._lock = threading.RLock()
        self._consumers: dict[str, ConsumerGroupInfo] = {}
        self._producers: dict[str, dict[int, ClientChannel]] = {}
        self._producer_turn = 0

    # ------------------------------------------------------------ consumers

    def register_consumer(self, conn: Channel, client_id: str, language: str, version: int,
                          data: ConsumerData) -> Notice | None:
        """Heartbeat of one consumer group; a notice when the group changed."""
        with self._lock:
            now = self.clock.now_ms()
            info = self._consumers.get(data.group_name)
            if info is None:
                info = self._consumers[data.group_name] = ConsumerGroupInfo(
                    data.group_name, data.consume_type, data.message_model, data.consume_from_where)
            info.consume_type, info.message_model = data.consume_type, data.message_model
            info.consume_from_where = data.consume_from_where
            channel = info.channels.get(conn.id)
            changed = channel is None
            if channel is None:
                info.channels[conn.id] = ClientChannel(conn, client_id, language, version, now)
            else:
                channel.client_id, channel.last_update = client_id, now
            changed |= self._update_subscriptions(info, data.subscriptions)
            if changed and info.clustering:
                return info.group, list(info.channels.values())
            return None

    @staticmethod
    def _update_subscriptions(info: ConsumerGroupInfo, subs: tuple[SubscriptionData, ...]) -> bool:
        updated = False
        for sub in subs:
            old = info.subscriptions.get(sub.topic)
            if old is None:
                info.subscriptions[sub.topic] = sub
                updated = True
            elif sub.sub_version > old.sub_version:
                info.subscriptions[sub.topic] = sub
        wanted = {s.topic for s in subs}
        for topic in [t for t in info.subscriptions if t not in wanted]:
            del info.subscriptions[topic]
            updated = True
        return updated

    def unregister_consumer(self, conn: Channel, client_id: str, group: str) -> Notice | None:
        with self._lock:
            info = self._consumers.get(group)
            if info is None:
                return None
            gone = [cid for cid, ch in info.channels.items() if cid == conn.id or ch.client_id == client_id]
            return self._remove_channels(info, gone)

    def _remove_channels(self, info: ConsumerGroupInfo, conn_ids: list[int]) -> Notice | None:
        for cid in conn_ids:
            info.channels.pop(cid, None)
        if not conn_ids:
            return None
        if not info.channels:
            del self._consumers[info.group]
            return None
        return (info.group, list(info.channels.values())) if info.clustering else None

    # ------------------------------------------------------------ producers

    def register_producer(self, conn: Channel, client_id: str, language: str, version: int, group: str) -> None:
        with self._lock:
            members = self._producers.setdefault(group, {})
            members[conn.id] = ClientChannel(conn, client_id, language, version, self.clock.now_ms())

    def unregister_producer(self, conn: Channel, client_id: str, group: str) -> None:
        with self._lock:
            members = self._producers.get(group, {})
            for cid in [cid for cid, ch in members.items() if cid == conn.id or ch.client_id == client_id]:
                del members[cid]
            if not members:
                self._producers.pop(group, None)

    def producer_groups(self) -> dict[str, list[str]]:
        with self._lock:
            return {g: [c.client_id for c in m.values()] for g, m in self._producers.items()}

    def producer_channels(self, group: str) -> list[ClientChannel] | None:
        """The group's connections in registration order (GET_PRODUCER_CONNECTION_LIST);
        None for a group never registered, or unregistered by its last client (a group
        whose connections closed or expired stays, empty, as in ``ProducerManager``)."""
        with self._lock:
            members = self._producers.get(group)
            return None if members is None else list(members.values())

    def producers_in_turn(self, group: str) -> list[ClientChannel]:
        """The group's connections, starting one further on each call (as
        ``ProducerManager.getAvailableChannel`` spreads check-backs over a group)."""
        with self._lock:
            members = list(self._producers.get(group, {}).values())
            self._producer_turn += 1
            if not members:
                return []
            start = self._producer_turn % len(members)
            return members[start:] + members[:start]

    # ------------------------------------------------------------ connections

    def connection_closed(self, conn_id: int) -> list[Notice]:
        with self._lock:
            for members in self._producers.values():  # an emptied producer group stays known (4.9.8)
                members.pop(conn_id, None)
            notices = []
            for info in list(self._consumers.values()):
                if conn_id in info.channels:
                    notice = self._remove_channels(info, [conn_id])
                    if notice:
                        notices.append(notice)
            return notices

    def expire(self) -> tuple[list[Channel], list[Notice]]:
        """Drop clients whose last heartbeat is older than 120 s: their connections (to
        close) and the groups to notify."""
        with self._lock:
            now = self.clock.now_ms()
            stale: dict[int, Channel] = {}
            for info in self._consumers.values():
                for ch in info.channels.values():
                    if now - ch.last_update > self.expire_ms:
                        stale[ch.conn.id] = ch.conn
            for members in self._producers.values():
                for ch in members.values():
                    if now - ch.last_update > self.expire_ms:
                        stale[ch.conn.id] = ch.conn
            notices = [n for cid in stale for n in self.connection_closed(cid)]
            return list(stale.values()), notices

    # ------------------------------------------------------------ queries

    def group(self, group: str) -> ConsumerGroupInfo | None:
        """A copy of the group's state (safe to iterate while clients come and go)."""
        with self._lock:
            info = self._consumers.get(group)
            if info is None:
                return None
            return replace(info, channels=dict(info.channels), subscriptions=dict(info.subscriptions))

    def subscription(self, group: str, topic: str) -> SubscriptionData | None:
        info = self._consumers.get(group)
        return info.subscriptions.get(topic) if info else None

    def consumer_ids(self, group: str) -> list[str]:
        with self._lock:
            info = self._consumers.get(group)
            return info.client_ids() if info else []

    def groups(self) -> list[str]:
        return list(self._consumers)
