"""The source's offsets and the user's requested positions.

One streaming offset is a JSON dict ``topic -> broker name -> queue id (string) -> next
offset to read`` (RocketMQ's logical ConsumeQueue offset). A micro-batch reads, for every
queue, the half-open range ``[start, end)``. In memory the same thing is a
``dict[MessageQueue, int]`` (:data:`QueueOffsetMap`).

Spark compares offsets by their JSON text, so :func:`to_json` always produces the same
text for the same offsets: topics, brokers and queue ids sorted (queue ids numerically).

What the user *asks for* (``startingOffsets`` / ``startingTimestamp`` / ``endingOffsets`` /
``endingTimestamp``)
is a separate type, :data:`StartSpec` / :data:`EndSpec`; the offset reader turns it into
concrete offsets, and the sentinels a user may write in JSON (``-2`` earliest, ``-1``
latest, as in Spark's Kafka source) never leave the offset reader.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Mapping, Union

from rocketmq_spark.errors import ConfigError
from rocketmq_spark.remoting.route import MessageQueue

__all__ = [
    "QueueOffsetMap", "to_json", "from_json", "dumps", "parse_user_json",
    "EARLIEST", "LATEST",
    "GroupStart", "EarliestStart", "LatestStart", "SpecificOffsets", "TimestampStart",
    "LatestEnd", "TimestampEnd", "StartSpec", "EndSpec",
]

QueueOffsetMap = dict[MessageQueue, int]

# Sentinels allowed in a user's JSON offsets (Spark's Kafka source uses the same numbers).
EARLIEST = -2
LATEST = -1


def _queue_sort_key(mq: MessageQueue) -> tuple[str, str, int]:
    return (mq.topic, mq.broker_name, mq.queue_id)


def to_json(offsets: Mapping[MessageQueue, int]) -> dict[str, dict[str, dict[str, int]]]:
    """``{MessageQueue: offset}`` -> the nested offsets dict, in canonical order."""
    out: dict[str, dict[str, dict[str, int]]] = {}
    for mq in sorted(offsets, key=_queue_sort_key):
        out.setdefault(mq.topic, {}).setdefault(mq.broker_name, {})[str(mq.queue_id)] = int(offsets[mq])
    return out


def dumps(offsets: Mapping[MessageQueue, int]) -> str:
    return json.dumps(to_json(offsets), separators=(",", ":"))


def from_json(obj: Any, *, what: str = "offset", allow_sentinels: bool = False) -> QueueOffsetMap:
    """The nested offsets dict (or its JSON text) -> ``{MessageQueue: offset}``.

    ``what`` names where the value came from (an option name for user input) so that a
    bad value gives an error the user can act on.
    """
    if isinstance(obj, (str, bytes)):
        try:
            obj = json.loads(obj)
        except ValueError as exc:
            raise ConfigError(f"{what}: not valid JSON ({exc}): {_clip(obj)}") from None
    if not isinstance(obj, Mapping):
        raise ConfigError(f"{what}: expected a JSON object topic -> broker -> queue id -> offset, "
                          f"got {_clip(obj)}")
    out: QueueOffsetMap = {}
    for topic, brokers in obj.items():
        if not isinstance(topic, str) or not topic:
            raise ConfigError(f"{what}: bad topic name {topic!r}")
        if not isinstance(brokers, Mapping):
            raise ConfigError(f"{what}: topic {topic!r} must map broker names to queues, got {_clip(brokers)}")
        for broker, queues in brokers.items():
            if not isinstance(broker, str) or not broker:
                raise ConfigError(f"{what}: bad broker name {broker!r} under topic {topic!r}")
            if not isinstance(queues, Mapping):
                raise ConfigError(f"{what}: {topic}/{broker} must map queue ids to offsets, got {_clip(queues)}")
            for qid, offset in queues.items():
                try:
                    queue_id = int(qid)
                except (TypeError, ValueError):
                    raise ConfigError(f"{what}: queue id {qid!r} of {topic}/{broker} is not an integer") from None
                if queue_id < 0:
                    raise ConfigError(f"{what}: queue id {qid!r} of {topic}/{broker} is negative")
                if isinstance(offset, bool) or not isinstance(offset, int):
                    raise ConfigError(f"{what}: offset of {topic}/{broker}/{qid} must be an integer, got {offset!r}")
                lowest = EARLIEST if allow_sentinels else 0
                if offset < lowest:
                    allowed = " (or -2 for earliest, -1 for latest)" if allow_sentinels else ""
                    raise ConfigError(f"{what}: offset of {topic}/{broker}/{qid} must be >= 0{allowed}, "
                                      f"got {offset}")
                out[MessageQueue(topic, broker, queue_id)] = offset
    return out


def parse_user_json(option: str, text: str, *, allow_latest: bool = True) -> QueueOffsetMap:
    """A user's JSON offsets for option ``option``; sentinels -2/-1 allowed."""
    offsets = from_json(text, what=option, allow_sentinels=True)
    if not allow_latest:
        bad = sorted((q for q, o in offsets.items() if o == LATEST), key=_queue_sort_key)
        if bad:
            raise ConfigError(f"{option}: -1 (latest) is not allowed here; found for "
                              f"{bad[0].topic}/{bad[0].broker_name}/{bad[0].queue_id}")
    return offsets


def _clip(value: Any, limit: int = 120) -> str:
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


# --------------------------------------------------------------- requested positions

@dataclass(frozen=True)
class GroupStart:
    """The consumer group's committed offsets; queues never committed start at latest."""


@dataclass(frozen=True)
class EarliestStart:
    """Each queue's min offset."""


@dataclass(frozen=True)
class LatestStart:
    """Each queue's max offset: only messages produced from now on."""


@dataclass(frozen=True)
class TimestampStart:
    """The first message stored at or after ``timestamp_ms`` in each queue."""

    timestamp_ms: int


@dataclass(frozen=True)
class SpecificOffsets:
    """Offsets per queue as the user wrote them (may hold the EARLIEST/LATEST sentinels).

    Queues of the subscribed topics that are not listed start at earliest (like queues
    that appear while a query runs)."""

    offsets: Mapping[MessageQueue, int]

    def __hash__(self) -> int:  # Mapping is not hashable; frozen dataclasses want hashes
        return hash(tuple(sorted(self.offsets.items())))


@dataclass(frozen=True)
class LatestEnd:
    """Each queue's max offset at planning time (batch reads)."""


@dataclass(frozen=True)
class TimestampEnd:
    """Each queue up to (not including) its first message stored at or after
    ``timestamp_ms`` (batch reads): the messages stored before it."""

    timestamp_ms: int


StartSpec = Union[GroupStart, EarliestStart, LatestStart, TimestampStart, SpecificOffsets]
EndSpec = Union[LatestEnd, TimestampEnd, SpecificOffsets]
