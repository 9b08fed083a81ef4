"""TopicRouteData: what GET_ROUTEINFO_BY_TOPIC answers, and the queues it implies.

A 5.x NameServer marks each BrokerData of a broker name registered with
``enableActingMaster`` (``"enableActingMaster":true``); while such a name has no master it
lists its QueueData without PERM_WRITE (RouteInfoManager.cleanTopicByUnRegisterRequests)
and, with ``supportActingMaster``, the name's lowest slave under brokerId 0, the acting
master (pickupTopicRouteData). ``publish_queues`` keeps those queues for sharding keys: the key
must keep its queue through the outage."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Mapping

from rocketmq_spark.errors import RemoteProtocolError
from rocketmq_spark.remoting import fastjson
from rocketmq_spark.remoting.codes import Perm

MASTER_ID = 0


@dataclass(frozen=True, order=True)
class MessageQueue:
    topic: str
    broker_name: str
    queue_id: int

    def to_json(self) -> dict[str, Any]:
        return {"brokerName": self.broker_name, "queueId": self.queue_id, "topic": self.topic}

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> "MessageQueue":
        try:
            return cls(str(obj["topic"]), str(obj["brokerName"]), int(obj["queueId"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise RemoteProtocolError(f"bad MessageQueue {obj!r}: {exc}") from None


@dataclass(frozen=True)
class QueueData:
    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int = Perm.READ | Perm.WRITE
    topic_sys_flag: int = 0


@dataclass(frozen=True)
class BrokerData:
    cluster: str
    broker_name: str
    broker_addrs: Mapping[int, str]
    enable_acting_master: bool = False

    @property
    def master_addr(self) -> str | None:
        return self.broker_addrs.get(MASTER_ID)


@dataclass(frozen=True)
class TopicRouteData:
    queue_datas: tuple[QueueData, ...]
    broker_datas: tuple[BrokerData, ...]
    order_topic_conf: str | None = None
    filter_server_table: Mapping[str, Any] = field(default_factory=dict)

    def master_addr(self, broker_name: str) -> str | None:
        for bd in self.broker_datas:
            if bd.broker_name == broker_name:
                return bd.master_addr
        return None

    def subscribe_queues(self, topic: str) -> list[MessageQueue]:
        return sorted(MessageQueue(topic, qd.broker_name, i)
                      for qd in self.queue_datas if qd.perm & Perm.READ
                      for i in range(qd.read_queue_nums))

    def acting(self, broker_name: str) -> bool:
        """``broker_name`` registered with enableActingMaster has no master now: its queues are
        read-only for the outage only (the NameServer took PERM_WRITE away), and a slave may
        act for the master."""
        return any(bd.broker_name == broker_name and bd.enable_acting_master for bd in self.broker_datas) and \
            any(qd.broker_name == broker_name and qd.perm & Perm.READ and not qd.perm & Perm.WRITE
                for qd in self.queue_datas)

    def publish_queues(self, topic: str, *, without_master: bool = False) -> list[MessageQueue]:
        """The writable queues of brokers whose master the route lists (as Java's producer
        takes them); ``without_master``: of every broker name (its master may be away for a
        while: a sharding key keeps its queue then), read-only ones of an acting master
        included (``acting``)."""
        if self.order_topic_conf:
            out = []
            for part in self.order_topic_conf.split(";"):
                name, _, count = part.partition(":")
                out += [MessageQueue(topic, name, i) for i in range(int(count or 0))]
            return out
        return sorted(MessageQueue(topic, qd.broker_name, i)
                      for qd in self.queue_datas
                      if (qd.perm & Perm.WRITE and (without_master or self.master_addr(qd.broker_name)))
                      or (without_master and self.acting(qd.broker_name))
                      for i in range(qd.write_queue_nums))


def _int(obj: Mapping[str, Any], *keys: str, default: int | None = None) -> int:
    for key in keys:
        if key in obj:
            try:
                return int(obj[key])
            except (TypeError, ValueError):
                raise RemoteProtocolError(f"route field {key!r} is {obj[key]!r}") from None
    if default is None:
        raise RemoteProtocolError(f"route lacks {keys[0]!r}")
    return default


def decode_route(body: bytes) -> TopicRouteData:
    obj = fastjson.loads(body)
    if not isinstance(obj, dict):
        raise RemoteProtocolError("route body is not an object")
    try:
        qds = tuple(QueueData(str(q["brokerName"]), _int(q, "readQueueNums"),
                              _int(q, "writeQueueNums"), _int(q, "perm"),
                              _int(q, "topicSysFlag", "topicSynFlag", default=0))
                    for q in obj.get("queueDatas") or ())
        bds = tuple(BrokerData(str(b.get("cluster", "")), str(b["brokerName"]),
                               {int(k): str(v) for k, v in (b.get("brokerAddrs") or {}).items()},
                               b.get("enableActingMaster") is True)
                    for b in obj.get("brokerDatas") or ())
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        raise RemoteProtocolError(f"bad route body: {exc!r}") from None
    return TopicRouteData(qds, bds, obj.get("orderTopicConf") or None,
                          obj.get("filterServerTable") or {})


def encode_route(route: TopicRouteData) -> bytes:
    """Standard JSON, quoted broker ids and numeric counts (what both clients read)."""
    obj: dict[str, Any] = {
        "brokerDatas": [{"brokerAddrs": {str(k): v for k, v in sorted(b.broker_addrs.items())},
                         "brokerName": b.broker_name, "cluster": b.cluster,
                         **({"enableActingMaster": True} if b.enable_acting_master else {})}
                        for b in route.broker_datas],
        "filterServerTable": dict(route.filter_server_table),
    }
    if route.order_topic_conf:
        obj["orderTopicConf"] = route.order_topic_conf
    obj["queueDatas"] = [{"brokerName": q.broker_name, "perm": q.perm,
                          "readQueueNums": q.read_queue_nums, "topicSysFlag": q.topic_sys_flag,
                          "writeQueueNums": q.write_queue_nums} for q in route.queue_datas]
    return json.dumps(obj, separators=(",", ":")).encode("utf-8")
