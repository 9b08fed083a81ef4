"""Bodies of the admin answers the client reads (fastjson, possibly with bare keys)."""

from __future__ import annotations

import re

from dataclasses import dataclass
from typing import Any, Mapping

from rocketmq_spark.errors import RemoteProtocolError
from rocketmq_spark.remoting import fastjson
from rocketmq_spark.remoting.bodies import loads_object
from rocketmq_spark.remoting.route import MASTER_ID, MessageQueue


@dataclass(frozen=True)
class TopicOffset:
    """One queue of GET_TOPIC_STATS_INFO: ``[min_offset, max_offset)`` is stored."""

    min_offset: int
    max_offset: int
    last_update_timestamp: int = 0


def _int(obj: Mapping[str, Any], key: str) -> int:
    try:
        return int(obj.get(key) or 0)
    except (TypeError, ValueError):
        raise RemoteProtocolError(f"field {key!r} is {obj.get(key)!r}, not an integer") from None


def decode_cluster_addresses(body: bytes) -> dict[str, dict[int, str]]:
    """GET_BROKER_CLUSTER_INFO -> broker name -> broker id -> address (0 the master, the
    others its slaves), as the NameServer routes them now."""
    obj = loads_object(body, "cluster info")
    out: dict[str, dict[int, str]] = {}
    for name, data in (obj.get("brokerAddrTable") or {}).items():
        if not isinstance(data, dict):
            raise RemoteProtocolError(f"cluster info entry of {name!r} is not an object")
        try:
            addrs = {int(k): str(v) for k, v in (data.get("brokerAddrs") or {}).items() if v}
        except ValueError:
            raise RemoteProtocolError(f"cluster info entry of {name!r} has a broker id that is not a number") from None
        out[str(data.get("brokerName") or name)] = addrs
    return out


def decode_cluster_masters(body: bytes) -> dict[str, str]:
    """GET_BROKER_CLUSTER_INFO -> broker name -> master address (brokers without one left out)."""
    return {name: addrs[MASTER_ID] for name, addrs in decode_cluster_addresses(body).items()
            if MASTER_ID in addrs}


def decode_topic_list(body: bytes) -> list[str]:
    obj = loads_object(body, "topic list")
    topics = obj.get("topicList") or []
    if not isinstance(topics, list):
        raise RemoteProtocolError("topicList is not an array")
    return sorted(str(t) for t in topics)


def decode_topic_stats(body: bytes) -> dict[MessageQueue, TopicOffset]:
    obj = loads_object(body, "topic stats")
    out: dict[MessageQueue, TopicOffset] = {}
    for key, value in (obj.get("offsetTable") or {}).items():
        mq = MessageQueue.from_json(fastjson.loads(key))
        out[mq] = TopicOffset(_int(value, "minOffset"), _int(value, "maxOffset"),
                              _int(value, "lastUpdateTimestamp"))
    return out


def decode_runtime_info(body: bytes) -> dict[str, str]:
    obj = loads_object(body, "broker runtime info")
    table = obj.get("table") or {}
    if not isinstance(table, dict):
        raise RemoteProtocolError("runtime info table is not an object")
    return {str(k): str(v) for k, v in table.items()}


_RELEASE = re.compile(r"V(\d+)_(\d+)_(\d+)")
# MQVersion ordinals of the releases a broker may name by ordinal only (4.x leaves
# brokerVersionDesc in; this is the fallback): V4_9_7 407, V4_9_8 409, V5_0_0 413.
_ORDINALS = ((413, (5, 0, 0)), (409, (4, 9, 8)), (407, (4, 9, 7)), (0, (4,)))


def broker_release(info: Mapping[str, str]) -> tuple[int, ...] | None:
    """A broker's release from its runtime info: ``brokerVersionDesc`` (``V4_9_7``,
    ``V5_5_0``; a ``-SNAPSHOT`` suffix ignored), else the ``brokerVersion`` ordinal, as the
    release at or below it that this table knows; None when neither says."""
    m = _RELEASE.match(info.get("brokerVersionDesc") or "")
    if m:
        return tuple(int(g) for g in m.groups())
    try:
        ordinal = int(info.get("brokerVersion") or "")
    except ValueError:
        return None
    return next((release for at, release in _ORDINALS if ordinal >= at), None)


def dispatch_progress(info: Mapping[str, str]) -> tuple[int, int]:
    """(commitLogMaxOffset, dispatchBehindBytes) of a GET_BROKER_RUNTIME_INFO table."""
    return _int(info, "commitLogMaxOffset"), _int(info, "dispatchBehindBytes")
