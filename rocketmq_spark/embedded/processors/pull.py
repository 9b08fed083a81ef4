"""PULL_MESSAGE (11) and LITE_PULL_MESSAGE (361): ``PullMessageProcessor`` of 4.9.8.

Checks (topic exists and is readable, queue id in range, the subscription from the
request or from the group's heartbeat), then the store's answer mapped to a response
code with the store status as remark and the four offsets as extFields. A
PULL_NOT_FOUND with the SUSPEND flag is parked for long polling on its first execution;
the re-execution (woken by a message or by the timeout) answers whatever it finds. The
COMMIT_OFFSET flag stores ``commitOffset`` on the first execution only. A SQL92
subscription (``enable_property_filter``, Apache's enablePropertyFilter) is evaluated on
each stored record's properties (embedded/sql92.py); entries it refuses are skipped as
tag-filtered ones are.

``answer_plain_pull`` is the same request answered from the frame as read: a JSON PULL
request with every field present, a subscription carried in the request (tags or
everything) and no long poll due is answered without building a command, a header object
or a response object, the answer's header formatted from one template. Anything else, and
every refusal, is left to ``handle_pull`` (it returns False before any effect): the two
answer byte for byte alike (tests/embedded/test_plain_pull.py compares them).
"""

from __future__ import annotations

import functools
import json
import json.scanner
import struct
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from rocketmq_spark.embedded.long_poll import MAX_HOLD_MS, HeldPull
from rocketmq_spark.embedded.processors.base import FAQ, BrokerContext, Call, Refuse
from rocketmq_spark.embedded.store import GetStatus
from rocketmq_spark.remoting.codes import SERIALIZE_JSON, SERVER_VERSION, PullSysFlag, ResponseCode
from rocketmq_spark.remoting.command import RemotingCommand
from rocketmq_spark.remoting.headers import PullMessageRequestHeader
from rocketmq_spark.embedded.sql92 import Selector, SelectorError, compile_selector
from rocketmq_spark.remoting.message import decode_message, java_string_hash, parse_subscription

if TYPE_CHECKING:
    from rocketmq_spark.embedded.server import Connection

EMPTY: dict[str, str] = {}


def _moved_if_not_zero(offset: int) -> int:
    return ResponseCode.PULL_OFFSET_MOVED if offset != 0 else ResponseCode.PULL_NOT_FOUND


# store status -> response code (a function of the requested offset where 4.9.8 decides so)
STATUS_CODES: dict[GetStatus, Callable[[int], int]] = {
    GetStatus.FOUND: lambda _o: ResponseCode.SUCCESS,
    GetStatus.NO_MATCHED_MESSAGE: lambda _o: ResponseCode.PULL_RETRY_IMMEDIATELY,
    GetStatus.MESSAGE_WAS_REMOVING: lambda _o: ResponseCode.PULL_RETRY_IMMEDIATELY,
    GetStatus.NO_MATCHED_LOGIC_QUEUE: _moved_if_not_zero,
    GetStatus.NO_MESSAGE_IN_QUEUE: _moved_if_not_zero,
    GetStatus.OFFSET_FOUND_NULL: lambda _o: ResponseCode.PULL_NOT_FOUND,
    GetStatus.OFFSET_OVERFLOW_ONE: lambda _o: ResponseCode.PULL_NOT_FOUND,
    GetStatus.OFFSET_OVERFLOW_BADLY: lambda _o: ResponseCode.PULL_OFFSET_MOVED,
    GetStatus.OFFSET_TOO_SMALL: lambda _o: ResponseCode.PULL_OFFSET_MOVED,
}


def handle_pull(broker: BrokerContext, call: Call) -> RemotingCommand | None:
    header = PullMessageRequestHeader.from_ext(call.ext)
    return execute_pull(broker, call, header, allow_suspend=True)


def _subscription(broker: BrokerContext, h: PullMessageRequestHeader) -> tuple[str, str | None]:
    """(expression type, expression) this pull filters by: its own, or its group's."""
    if h.sys_flag & PullSysFlag.SUBSCRIPTION:
        return h.expression_type or "TAG", h.subscription
    info = broker.clients.group(h.consumer_group)
    if info is None:
        raise Refuse(ResponseCode.SUBSCRIPTION_NOT_EXIST, "the consumer's group info not exist" + FAQ, EMPTY)
    sub = info.subscriptions.get(h.topic)
    if sub is None:
        raise Refuse(ResponseCode.SUBSCRIPTION_NOT_EXIST, "the consumer's subscription not exist" + FAQ, EMPTY)
    if sub.sub_version < h.sub_version:
        raise Refuse(ResponseCode.SUBSCRIPTION_NOT_LATEST, "the consumer's subscription not latest", EMPTY)
    return sub.expression_type, sub.sub_string


@dataclass(frozen=True)
class PullFilter:
    """What a pull passes: ``accept`` takes consume-queue tag codes (None: all), ``match``
    stored records (a SQL92 selector on the properties; None: all)."""

    accept: Callable[[int], bool] | None
    match: Callable[[bytes], bool] | None = None


def _selector_match(selector: Selector) -> Callable[[bytes], bool]:
    def match(record: bytes) -> bool:
        return selector.matches(decode_message(record)[0].properties)
    return match


@functools.lru_cache(maxsize=256)
def _filter(expression_type: str, expression: str | None, property_filter: bool) -> PullFilter:
    """The filter of a subscription; ``Refuse`` where Apache refuses it: a type other than
    TAG with the property filter off (SYSTEM_ERROR), an empty or bad SQL92 expression
    (SUBSCRIPTION_PARSE_FAILED)."""
    if expression_type == "TAG":
        codes = frozenset(java_string_hash(t) for t in parse_subscription(expression))
        return PullFilter(codes.__contains__ if codes else None)
    if not property_filter or expression_type != "SQL92":
        raise Refuse(ResponseCode.SYSTEM_ERROR,
                     f"The broker does not support consumer to filter message by {expression_type}", EMPTY)
    try:
        selector = compile_selector(expression or "")
    except SelectorError:
        raise Refuse(ResponseCode.SUBSCRIPTION_PARSE_FAILED, "parse the consumer's subscription failed",
                     EMPTY) from None
    return PullFilter(None, _selector_match(selector))


def _tag_filter(broker: BrokerContext, expression_type: str, expression: str | None) -> PullFilter:
    return _filter((expression_type or "TAG").upper(), expression, broker.enable_property_filter)


def execute_pull(broker: BrokerContext, call: Call, h: PullMessageRequestHeader, *,
                 allow_suspend: bool) -> RemotingCommand | None:
    broker.groups.find_or_create(h.consumer_group)
    config = broker.topics.get(h.topic)
    if config is None:
        raise Refuse(ResponseCode.TOPIC_NOT_EXIST, f"topic[{h.topic}] not exist, apply first please! {FAQ}", EMPTY)
    if not config.readable:
        raise Refuse(ResponseCode.NO_PERMISSION, f"the topic[{h.topic}] pulling message is forbidden", EMPTY)
    if not 0 <= h.queue_id < config.read_queue_nums:
        raise Refuse(ResponseCode.SYSTEM_ERROR,
                     f"queueId[{h.queue_id}] is illegal, topic:[{h.topic}] topicConfig.readQueueNums:"
                     f"[{config.read_queue_nums}] consumer:[/{call.conn.remote_addr}]", EMPTY)
    pull_filter = _tag_filter(broker, *_subscription(broker, h))
    accept = pull_filter.accept
    started = time.monotonic()
    result = broker.store.get(h.topic, h.queue_id, h.queue_offset, h.max_msg_nums, accept, pull_filter.match)
    broker.stats.on_pull(h.consumer_group, h.topic, result.count, (time.monotonic() - started) * 1000)
    code = STATUS_CODES[result.status](h.queue_offset)
    ext = {"suggestWhichBrokerId": "0", "nextBeginOffset": str(result.next_begin_offset),
           "maxOffset": str(result.max_offset), "minOffset": str(result.min_offset)}
    response: RemotingCommand | None = call.answer(code, result.status.value, ext, result.body)
    if code == ResponseCode.PULL_NOT_FOUND and allow_suspend and h.sys_flag & PullSysFlag.SUSPEND:
        def again() -> None:
            try:
                call.send(execute_pull(broker, call, h, allow_suspend=False))
            except Refuse as r:  # e.g. the topic was deleted meanwhile
                call.send(call.answer(r.code, r.remark, r.ext))

        broker.long_poll.hold(HeldPull(h.topic, h.queue_id, h.queue_offset,
                                       time.monotonic() + min(max(h.suspend_timeout_millis, 0), MAX_HOLD_MS) / 1000,
                                       accept, again, call.conn.id))
        response = None
    if allow_suspend and h.sys_flag & PullSysFlag.COMMIT_OFFSET and not broker.is_slave:  # as Apache's slaves
        broker.offsets.commit(h.consumer_group, h.topic, h.queue_id, h.commit_offset)
    return response


# ---------------------------------------------------------------- the plain pull, from the frame

# How the JSON header of a pull starts (Java, C++ and our clients write "code" first): a
# cheap test before parsing; a header written otherwise takes the general path.
_PULL_PREFIXES = (b'{"code":11,', b'{"code":361,')
_HEADER_WORD = struct.Struct(">I")
_FRAME_HEAD = struct.Struct(">iI")
_SCAN = json.scanner.make_scanner(json.JSONDecoder())     # one JSON value from a position
# The answer's header as _encode_json_header writes call.answer(code, status, ext) of
# execute_pull (keys in that order; the remark is a GetStatus name, never escaped).
_ANSWER = (b'{"code":%d,"extFields":{"suggestWhichBrokerId":"0","nextBeginOffset":"%d",'
           b'"maxOffset":"%d","minOffset":"%d"},"flag":1,"language":"JAVA","opaque":%d,'
           b'"remark":"%s","serializeTypeCurrentRPC":"JSON","version":' + str(SERVER_VERSION).encode() + b'}')
_STATUSES = {status: (code_of, status.value.encode()) for status, code_of in STATUS_CODES.items()}


def answer_plain_pull(broker: BrokerContext, conn: "Connection", frame: bytes) -> bool:
    """Answer ``frame`` (one whole frame, its length prefix excluded) if it is a plain pull;
    False, having done nothing, for everything else."""
    if not frame.startswith(_PULL_PREFIXES, 4):
        return False
    (word,) = _HEADER_WORD.unpack_from(frame, 0)
    if word >> 24 != SERIALIZE_JSON or 4 + (word & 0xFFFFFF) != len(frame):
        return False                       # another serialization, or a body
    try:
        text = frame[4:].decode()
        obj, end = _SCAN(text, 0)
        ext = obj["extFields"]
        fields = (ext["queueId"], ext["queueOffset"], ext["maxMsgNums"], ext["sysFlag"], ext["commitOffset"],
                  ext["suspendTimeoutMillis"], ext.get("subVersion", "0"), ext["consumerGroup"], ext["topic"],
                  ext["subscription"], ext.get("expressionType", ""))
        # every value a string, as the general path reads them (it writes numbers out first)
        if end != len(text) or obj["flag"] != 0 or type(obj["opaque"]) is not int \
                or list(map(type, fields)).count(str) != len(fields):
            return False
        queue_id, offset, max_nums, sys_flag, commit_offset, _suspend, _sub_version = map(int, fields[:7])
    except (ValueError, TypeError, KeyError, StopIteration):
        return False
    group, topic, subscription, expression_type = fields[7:]
    config = broker.topics.get(topic)
    if not (sys_flag & PullSysFlag.SUBSCRIPTION and config is not None and config.readable
            and 0 <= queue_id < config.read_queue_nums):
        return False                       # refused or from the group's subscription: the general path
    try:
        pull_filter = _tag_filter(broker, expression_type, subscription)
    except Refuse:                         # refused: the general path answers it
        return False
    if pull_filter.match is not None:      # a SQL92 selector: the general path reads records
        return False
    accept = pull_filter.accept
    started = time.monotonic()
    try:
        result = broker.store.get(topic, queue_id, offset, max_nums, accept)
    except Exception:                      # the general path reads again and answers the error
        return False
    code_of, remark = _STATUSES[result.status]
    code = code_of(offset)
    if code == ResponseCode.PULL_NOT_FOUND and sys_flag & PullSysFlag.SUSPEND:
        return False                       # to be held: the general path parks it
    broker.groups.find_or_create(group)
    broker.stats.on_pull(group, topic, result.count, (time.monotonic() - started) * 1000)
    if sys_flag & PullSysFlag.COMMIT_OFFSET and not broker.is_slave:
        broker.offsets.commit(group, topic, queue_id, commit_offset)
    header = _ANSWER % (code, result.next_begin_offset, result.max_offset, result.min_offset, obj["opaque"], remark)
    conn.send_frame(b"".join((_FRAME_HEAD.pack(4 + len(header) + len(result.body), len(header)),
                              header, result.body)))
    return True
