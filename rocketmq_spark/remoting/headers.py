"""Typed request/response headers ("custom headers" carried in extFields).

Each header is a frozen dataclass; a field's wire key is its camelCase name unless
``key(...)`` says otherwise. ``from_ext`` parses string values the way Java does
(missing required field or unparsable number -> ``HeaderError``); ``to_ext`` writes
every value as a string (the C++ client only reads string values).
"""

from __future__ import annotations

import dataclasses
import functools
import typing
from dataclasses import dataclass
from typing import Any, ClassVar, Mapping, TypeVar

from rocketmq_spark.errors import RemoteProtocolError

T = TypeVar("T", bound="Header")


class HeaderError(RemoteProtocolError):
    """A request header lacks a required field or has one of the wrong type."""


def key(name: str, default: Any = dataclasses.MISSING) -> Any:
    return dataclasses.field(default=default, metadata={"key": name})


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


def _parse_bool(text: str) -> bool:
    return text.strip().lower() in ("true", "1")


def _parse_int(text: str) -> int:
    try:
        return int(text.strip())
    except ValueError:
        raise HeaderError(f'For input string: "{text}"') from None


_PARSERS = {int: _parse_int, str: str, bool: _parse_bool}


def _format(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


@functools.lru_cache(maxsize=None)
def _schema(cls: type) -> tuple[tuple[str, str, Any, bool], ...]:
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        base = args[0] if args else tp
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        out.append((f.name, f.metadata.get("key", _camel(f.name)), _PARSERS[base], required))
    return tuple(out)


@dataclass(frozen=True)
class Header:
    def to_ext(self) -> dict[str, str]:
        return {k: _format(getattr(self, n)) for n, k, _p, _r in _schema(type(self))
                if getattr(self, n) is not None}

    @classmethod
    def from_ext(cls: type[T], ext: Mapping[str, str] | None) -> T:
        ext = ext or {}
        values: dict[str, Any] = {}
        for name, wire, parse, required in _schema(cls):
            raw = ext.get(wire)
            if raw is None or (raw == "" and parse is not str):
                if required:
                    raise HeaderError(f"the custom field <{wire}> is null")
                continue
            try:
                values[name] = parse(raw)
            except HeaderError as exc:
                raise HeaderError(f"the custom field <{wire}> is invalid: {exc}") from None
        return cls(**values)


# ---------------------------------------------------------------- NameServer

@dataclass(frozen=True)
class GetRouteInfoRequestHeader(Header):
    topic: str


# ---------------------------------------------------------------- send

@dataclass(frozen=True)
class SendMessageRequestHeader(Header):
    producer_group: str
    topic: str
    default_topic: str = "TBW102"
    default_topic_queue_nums: int = 4
    queue_id: int = -1
    sys_flag: int = 0
    born_timestamp: int = 0
    flag: int = 0
    properties: str | None = None
    reconsume_times: int | None = None
    unit_mode: bool | None = None
    max_reconsume_times: int | None = None
    batch: bool | None = None

    # SEND_MESSAGE_V2 abbreviates the same fields to one letter each.
    V2_KEYS: ClassVar[dict[str, str]] = {
        "a": "producerGroup", "b": "topic", "c": "defaultTopic", "d": "defaultTopicQueueNums",
        "e": "queueId", "f": "sysFlag", "g": "bornTimestamp", "h": "flag", "i": "properties",
        "j": "reconsumeTimes", "k": "unitMode", "l": "maxReconsumeTimes", "m": "batch"}

    @classmethod
    def from_v2(cls, ext: Mapping[str, str] | None) -> "SendMessageRequestHeader":
        ext = ext or {}
        return cls.from_ext({v1: ext[v2] for v2, v1 in cls.V2_KEYS.items() if v2 in ext})

    def to_v2_ext(self) -> dict[str, str]:
        inverse = {v1: v2 for v2, v1 in self.V2_KEYS.items()}
        return {inverse[k]: v for k, v in self.to_ext().items()}


@dataclass(frozen=True)
class SendMessageResponseHeader(Header):
    msg_id: str
    queue_id: int
    queue_offset: int
    transaction_id: str | None = None
    msg_region: str | None = key("MSG_REGION", None)
    trace_on: str | None = key("TRACE_ON", None)


@dataclass(frozen=True)
class EndTransactionRequestHeader(Header):
    """END_TRANSACTION (37). ``commit_or_rollback`` is a ``TransactionState``; the broker
    finds the half message by ``commit_log_offset`` and checks ``producer_group`` and
    ``tran_state_table_offset`` (its half-queue offset) against it."""

    producer_group: str
    tran_state_table_offset: int
    commit_log_offset: int
    commit_or_rollback: int
    msg_id: str
    from_transaction_check: bool = False
    transaction_id: str | None = None
    bname: str | None = None


@dataclass(frozen=True)
class CheckTransactionStateRequestHeader(Header):
    """CHECK_TRANSACTION_STATE (39), from a broker to a producer: the offsets are those of
    the half message's latest copy, which the answer must echo."""

    tran_state_table_offset: int
    commit_log_offset: int
    msg_id: str | None = None
    transaction_id: str | None = None
    offset_msg_id: str | None = None
    bname: str | None = None


# ---------------------------------------------------------------- pull

@dataclass(frozen=True)
class PullMessageRequestHeader(Header):
    consumer_group: str
    topic: str
    queue_id: int
    queue_offset: int
    max_msg_nums: int
    sys_flag: int
    commit_offset: int
    suspend_timeout_millis: int
    sub_version: int = 0
    subscription: str | None = None
    expression_type: str | None = None


@dataclass(frozen=True)
class PullMessageResponseHeader(Header):
    suggest_which_broker_id: int
    next_begin_offset: int
    min_offset: int
    max_offset: int


# ---------------------------------------------------------------- offsets

@dataclass(frozen=True)
class QueryConsumerOffsetRequestHeader(Header):
    consumer_group: str
    topic: str
    queue_id: int
    set_zero_if_not_found: bool | None = None


@dataclass(frozen=True)
class UpdateConsumerOffsetRequestHeader(Header):
    consumer_group: str
    topic: str
    queue_id: int
    commit_offset: int


@dataclass(frozen=True)
class QueueRequestHeader(Header):
    """GET_MAX_OFFSET, GET_MIN_OFFSET, GET_EARLIEST_MSG_STORETIME."""

    topic: str
    queue_id: int


@dataclass(frozen=True)
class SearchOffsetRequestHeader(Header):
    topic: str
    queue_id: int
    timestamp: int


@dataclass(frozen=True)
class OffsetResponseHeader(Header):
    offset: int


@dataclass(frozen=True)
class TimestampResponseHeader(Header):
    timestamp: int


@dataclass(frozen=True)
class ViewMessageRequestHeader(Header):
    offset: int


# QUERY_MESSAGE's ext field that makes ``key`` a UNIQ_KEY (MixAll.UNIQUE_MSG_QUERY_FLAG):
# the broker then answers at most its defaultQueryMaxNum (32) records, whatever maxNum says.
UNIQUE_KEY_QUERY = "_UNIQUE_KEY_QUERY"


@dataclass(frozen=True)
class QueryMessageRequestHeader(Header):
    """QUERY_MESSAGE (12): the stored records indexed under ``topic#key`` whose store time
    is in ``[begin_timestamp, end_timestamp]``, newest first, at most ``max_num``."""

    topic: str
    key: str
    max_num: int
    begin_timestamp: int
    end_timestamp: int


@dataclass(frozen=True)
class QueryMessageResponseHeader(Header):
    index_last_update_timestamp: int
    index_last_update_phyoffset: int


# ---------------------------------------------------------------- consumers

@dataclass(frozen=True)
class ConsumerSendMsgBackRequestHeader(Header):
    offset: int
    group: str
    delay_level: int
    origin_msg_id: str | None = None
    origin_topic: str | None = None
    unit_mode: bool | None = None
    max_reconsume_times: int | None = None


@dataclass(frozen=True)
class GetConsumerListRequestHeader(Header):
    consumer_group: str


@dataclass(frozen=True)
class GetProducerConnectionListRequestHeader(Header):
    producer_group: str


@dataclass(frozen=True)
class UnregisterClientRequestHeader(Header):
    client_id: str = key("clientID")
    producer_group: str | None = None
    consumer_group: str | None = None


@dataclass(frozen=True)
class NotifyConsumerIdsChangedHeader(Header):
    consumer_group: str


@dataclass(frozen=True)
class GetConsumeStatsRequestHeader(Header):
    consumer_group: str
    topic: str | None = None


@dataclass(frozen=True)
class TopicRequestHeader(Header):
    topic: str


# ---------------------------------------------------------------- admin

@dataclass(frozen=True)
class CreateTopicRequestHeader(Header):
    topic: str
    default_topic: str = "TBW102"
    read_queue_nums: int = 4
    write_queue_nums: int = 4
    perm: int = 6
    topic_filter_type: str = "SINGLE_TAG"
    topic_sys_flag: int | None = None
    order: bool = False
