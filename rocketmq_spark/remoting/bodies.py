"""JSON bodies: heartbeat, lock/unlock batch, consumer list, consume stats.

Accept what Java and C++ send (enum names or ordinals, numbers or strings for
``subVersion``, absent keys); write what Java writes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from rocketmq_spark.errors import RemoteProtocolError
from rocketmq_spark.remoting import fastjson
from rocketmq_spark.remoting.message import parse_subscription, tags_code
from rocketmq_spark.remoting.route import MessageQueue

CONSUME_TYPES = ("CONSUME_ACTIVELY", "CONSUME_PASSIVELY", "CONSUME_POP")
MESSAGE_MODELS = ("BROADCASTING", "CLUSTERING")
EXPRESSION_TYPES = ("TAG", "SQL92")     # RocketMQ's ExpressionType
CONSUME_FROM = ("CONSUME_FROM_LAST_OFFSET", "CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST",
                "CONSUME_FROM_MIN_OFFSET", "CONSUME_FROM_MAX_OFFSET", "CONSUME_FROM_FIRST_OFFSET",
                "CONSUME_FROM_TIMESTAMP")


def _enum(value: Any, names: tuple[str, ...], default: str) -> str:
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < len(names):
        return names[value]
    if isinstance(value, str) and value in names:
        return value
    if isinstance(value, str) and value.isdigit() and int(value) < len(names):
        return names[int(value)]
    return default


def dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def loads_object(body: bytes, what: str) -> dict[str, Any]:
    if not body:
        raise RemoteProtocolError(f"{what} body is empty")
    obj = fastjson.loads(body)
    if not isinstance(obj, dict):
        raise RemoteProtocolError(f"{what} body is not a JSON object")
    return obj


@dataclass(frozen=True)
class SubscriptionData:
    topic: str
    sub_string: str = "*"
    sub_version: int = 0
    expression_type: str = "TAG"

    @property
    def tags(self) -> frozenset[str]:
        """The tags of a TAG subscription (a SQL92 one has none: its tagsSet is empty)."""
        return parse_subscription(self.sub_string) if self.expression_type == "TAG" else frozenset()

    def to_json(self) -> dict[str, Any]:
        tags = sorted(self.tags)
        return {"classFilterMode": False, "codeSet": [tags_code(t) for t in tags],
                "expressionType": self.expression_type, "subString": self.sub_string,
                "subVersion": self.sub_version, "tagsSet": tags, "topic": self.topic}

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> "SubscriptionData":
        try:
            version = int(obj.get("subVersion") or 0)
        except (TypeError, ValueError):
            version = 0
        return cls(str(obj["topic"]), str(obj.get("subString") or "*"), version,
                   str(obj.get("expressionType") or "TAG"))


@dataclass(frozen=True)
class ConsumerData:
    group_name: str
    consume_type: str = "CONSUME_ACTIVELY"
    message_model: str = "CLUSTERING"
    consume_from_where: str = "CONSUME_FROM_LAST_OFFSET"
    subscriptions: tuple[SubscriptionData, ...] = ()
    unit_mode: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"consumeFromWhere": self.consume_from_where, "consumeType": self.consume_type,
                "groupName": self.group_name, "messageModel": self.message_model,
                "subscriptionDataSet": [s.to_json() for s in self.subscriptions],
                "unitMode": self.unit_mode}

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> "ConsumerData":
        return cls(str(obj["groupName"]),
                   _enum(obj.get("consumeType"), CONSUME_TYPES, "CONSUME_ACTIVELY"),
                   _enum(obj.get("messageModel"), MESSAGE_MODELS, "CLUSTERING"),
                   _enum(obj.get("consumeFromWhere"), CONSUME_FROM, "CONSUME_FROM_LAST_OFFSET"),
                   tuple(SubscriptionData.from_json(s) for s in obj.get("subscriptionDataSet") or ()),
                   bool(obj.get("unitMode", False)))


@dataclass(frozen=True)
class CheckClientRequestBody:
    """CHECK_CLIENT_CONFIG (46): whether the broker takes a subscription (the Java consumer
    asks it for every subscription that is not TAG before it starts)."""

    client_id: str
    group: str
    subscription: SubscriptionData

    def encode(self) -> bytes:
        return dumps({"clientId": self.client_id, "group": self.group,
                      "subscriptionData": self.subscription.to_json()})

    @classmethod
    def decode(cls, body: bytes) -> "CheckClientRequestBody":
        obj = loads_object(body, "check client config")
        try:
            sub = obj.get("subscriptionData")
            return cls(str(obj.get("clientId") or ""), str(obj.get("group") or ""),
                       SubscriptionData.from_json(sub) if isinstance(sub, Mapping) else SubscriptionData(""))
        except (KeyError, TypeError, AttributeError) as exc:
            raise RemoteProtocolError(f"bad check client config body: {exc!r}") from None


@dataclass(frozen=True)
class HeartbeatData:
    client_id: str
    producer_groups: tuple[str, ...] = ()
    consumers: tuple[ConsumerData, ...] = ()

    def encode(self) -> bytes:
        return dumps({"clientID": self.client_id,
                      "consumerDataSet": [c.to_json() for c in self.consumers],
                      "producerDataSet": [{"groupName": g} for g in self.producer_groups]})

    @classmethod
    def decode(cls, body: bytes) -> "HeartbeatData":
        obj = loads_object(body, "heartbeat")
        try:
            return cls(str(obj["clientID"]),
                       tuple(str(p["groupName"]) for p in obj.get("producerDataSet") or ()),
                       tuple(ConsumerData.from_json(c) for c in obj.get("consumerDataSet") or ()))
        except (KeyError, TypeError, AttributeError) as exc:
            raise RemoteProtocolError(f"bad heartbeat body: {exc!r}") from None


@dataclass(frozen=True)
class LockBatchBody:
    consumer_group: str
    client_id: str
    mqs: tuple[MessageQueue, ...] = ()
    only_this_broker: bool | None = None

    def encode(self) -> bytes:
        obj: dict[str, Any] = {"clientId": self.client_id, "consumerGroup": self.consumer_group,
                               "mqSet": [mq.to_json() for mq in self.mqs]}
        if self.only_this_broker is not None:
            obj["onlyThisBroker"] = self.only_this_broker
        return dumps(obj)

    @classmethod
    def decode(cls, body: bytes) -> "LockBatchBody":
        obj = loads_object(body, "lock batch")
        try:
            return cls(str(obj["consumerGroup"]), str(obj["clientId"]),
                       tuple(MessageQueue.from_json(m) for m in obj.get("mqSet") or ()),
                       obj.get("onlyThisBroker"))
        except (KeyError, TypeError) as exc:
            raise RemoteProtocolError(f"bad lock batch body: {exc!r}") from None


def encode_lock_ok(mqs: Iterable[MessageQueue]) -> bytes:
    return dumps({"lockOKMQSet": [mq.to_json() for mq in mqs]})


def decode_lock_ok(body: bytes) -> frozenset[MessageQueue]:
    obj = loads_object(body, "lock answer") if body else {}
    return frozenset(MessageQueue.from_json(m) for m in obj.get("lockOKMQSet") or ())


def encode_consumer_list(ids: Iterable[str]) -> bytes:
    return dumps({"consumerIdList": list(ids)})


def decode_consumer_list(body: bytes) -> tuple[str, ...]:
    obj = loads_object(body, "consumer list")
    return tuple(str(x) for x in obj.get("consumerIdList") or ())


@dataclass(frozen=True)
class OffsetWrapper:
    broker_offset: int
    consumer_offset: int
    last_timestamp: int = 0


@dataclass(frozen=True)
class ConsumeStats:
    offset_table: Mapping[MessageQueue, OffsetWrapper] = field(default_factory=dict)
    consume_tps: float = 0.0

    def encode(self) -> bytes:
        """fastjson's form: MessageQueue objects as bare keys (not strict JSON)."""
        parts = []
        for mq, w in self.offset_table.items():
            k = dumps(mq.to_json()).decode()
            v = dumps({"brokerOffset": w.broker_offset, "consumerOffset": w.consumer_offset,
                       "lastTimestamp": w.last_timestamp}).decode()
            parts.append(f"{k}:{v}")
        return ('{"consumeTps":%r,"offsetTable":{%s}}' % (float(self.consume_tps), ",".join(parts))).encode()

    @classmethod
    def decode(cls, body: bytes) -> "ConsumeStats":
        obj = loads_object(body, "consume stats")
        table = {}
        for k, v in (obj.get("offsetTable") or {}).items():
            mq = MessageQueue.from_json(fastjson.loads(k))
            table[mq] = OffsetWrapper(int(v.get("brokerOffset", 0)), int(v.get("consumerOffset", 0)),
                                      int(v.get("lastTimestamp", 0)))
        return cls(table, float(obj.get("consumeTps") or 0.0))


def subscription_group_body(group: str) -> bytes:
    """UPDATE_AND_CREATE_SUBSCRIPTIONGROUP's body: a SubscriptionGroupConfig with the
    broker's defaults (what ``mqadmin updateSubGroup -g GROUP`` sends)."""
    return dumps({"brokerId": 0, "consumeBroadcastEnable": True, "consumeEnable": True,
                  "consumeFromMinEnable": True, "groupName": group, "notifyConsumerIdsChangedEnable": True,
                  "retryMaxTimes": 16, "retryQueueNums": 1, "whichBrokerWhenConsumeSlowly": 1})
