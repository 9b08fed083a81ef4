"""SEND_MESSAGE (10), SEND_MESSAGE_V2 (310), SEND_BATCH_MESSAGE (320).

The three codes share one path (``SendMessageProcessor`` of 4.9.8): V1 or V2 header keys,
"batch" decided by the batch flag (``true`` or the C++ client's ``1``), never by the
code. Checks in Apache's order: topic name, forbidden topics, auto-creation from the
template topic, queue id; then retry/DLQ routing for ``%RETRY%`` topics, UNIQ_KEY and
CLUSTER added, WAIT left out of the stored properties (delayed and half messages keep
it), sizes. The answer is sent once the commit log is fsynced (group commit) unless the
broker flushes asynchronously or the message says ``WAIT=false``.

A single send with ``TRAN_MSG=true`` is a half message (``half_messages.to_half``): the
answer's queueOffset is its offset in RMQ_SYS_TRANS_HALF_TOPIC queue 0. The sysFlag does
not decide: with PREPARED (4) and no TRAN_MSG the message is stored unindexed (queue
offset 0, never visible), as 4.9.8 does. A batch with transaction bits in its sysFlag is
MESSAGE_ILLEGAL; TRAN_MSG in a batch's properties changes nothing.
"""

from __future__ import annotations

import itertools
import os
import random
import struct
import time
import zlib
from datetime import datetime

from rocketmq_spark.embedded.half_messages import is_transactional, to_half
from rocketmq_spark.embedded.processors.base import FAQ, BrokerContext, Call, Refuse
from rocketmq_spark.embedded.store import PutResult, StoreError
from rocketmq_spark.embedded.store.message_store import MESSAGE_ILLEGAL_REMARK
from rocketmq_spark.embedded.topics import NOT_ALLOWED_SEND, validate_topic
from rocketmq_spark.errors import RemoteProtocolError
from rocketmq_spark.remoting.codes import (DLQ_PREFIX, RETRY_PREFIX, MessageSysFlag, RequestCode,
                                           ResponseCode)
from rocketmq_spark.remoting.command import RemotingCommand
from rocketmq_spark.remoting import timer
from rocketmq_spark.remoting.headers import SendMessageRequestHeader
from rocketmq_spark.remoting.message import (PROP_CLUSTER, PROP_DELAY, PROP_UNIQ_KEY,
                                             PROP_WAIT, MessageExt, decode_batch, decode_properties)

TRACE_EXT = {"TRACE_ON": "true", "MSG_REGION": "DefaultRegion"}
VERSION_V3_4_9 = 121  # the broker honours the header's maxReconsumeTimes from here on
MAX_BATCH_TOPIC_LENGTH = 127
MAX_INFLATED_BATCH = 16 * 1024 * 1024  # no zip bombs: a frame's worth
_counter = itertools.count()
_UNIQ_PREFIX = struct.pack(">iHI", 0x7F000001, os.getpid() & 0xFFFF, random.getrandbits(32))


def new_uniq_key() -> str:
    """A client-style message id (what a producer puts in UNIQ_KEY): ip, pid, random,
    ms since the start of the month, counter."""
    now = datetime.now()
    month_start = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    since = int((time.time() - month_start.timestamp()) * 1000) & 0xFFFFFFFF
    return (_UNIQ_PREFIX + struct.pack(">IH", since, next(_counter) & 0xFFFF)).hex().upper()


def refuse(code: int, remark: str) -> Refuse:
    """Send errors carry TRACE_ON/MSG_REGION like every 4.9.8 send answer."""
    return Refuse(code, remark, TRACE_EXT)


INT32 = (-(1 << 31), (1 << 31) - 1)
INT64 = (-(1 << 63), (1 << 63) - 1)
# Header fields that go into the stored record, with their Java types' ranges.
RECORD_FIELDS = (("queueId", "queue_id", INT32), ("sysFlag", "sys_flag", INT32), ("flag", "flag", INT32),
                 ("bornTimestamp", "born_timestamp", INT64), ("reconsumeTimes", "reconsume_times", INT32),
                 ("maxReconsumeTimes", "max_reconsume_times", INT32))


def _header(call: Call) -> SendMessageRequestHeader:
    ext = call.ext
    v2 = call.cmd.code == RequestCode.SEND_MESSAGE_V2 or (
        call.cmd.code != RequestCode.SEND_MESSAGE and "b" in ext)
    topic = ext.get("b" if v2 else "topic")
    reason = validate_topic(topic)
    if reason is not None:
        raise refuse(ResponseCode.SYSTEM_ERROR, reason)
    h = SendMessageRequestHeader.from_v2(ext) if v2 else SendMessageRequestHeader.from_ext(ext)
    for key, attr, (lo, hi) in RECORD_FIELDS:  # what Java's Integer/Long.parseLong would refuse
        value = getattr(h, attr)
        if value is not None and not lo <= value <= hi:
            raise refuse(ResponseCode.SYSTEM_ERROR, f"the custom field <{key}> is invalid: {value} is out of range")
    return h


def handle_send(broker: BrokerContext, call: Call) -> RemotingCommand | None:
    h = _header(call)
    if h.topic in NOT_ALLOWED_SEND:
        raise refuse(ResponseCode.NO_PERMISSION, f"Sending message to topic[{h.topic}] is forbidden.")
    config = broker.topics.get(h.topic) or broker.topics.create_from_template(
        h.topic, h.default_topic, h.default_topic_queue_nums)
    if config is None and h.topic.startswith(RETRY_PREFIX):
        config = broker.topics.ensure(h.topic, 1)
    if config is None:
        raise refuse(ResponseCode.TOPIC_NOT_EXIST, f"topic[{h.topic}] not exist, apply first please!{FAQ}")
    if not config.writable:
        raise refuse(ResponseCode.NO_PERMISSION, f"the topic[{h.topic}] sending message is forbidden")
    queue_id = h.queue_id
    if queue_id >= config.queue_count:
        raise refuse(ResponseCode.SYSTEM_ERROR, f"request queueId[{queue_id}] is illegal, "
                     f"{config.describe()} Producer: {call.conn.remote_addr}")
    if queue_id < 0:
        queue_id = random.randrange(max(config.write_queue_nums, 1))
    if h.batch:
        messages, wait = _batch(broker, call, h, queue_id)
    else:
        messages, wait = _single(broker, call, h, queue_id)
    try:
        result = broker.put(messages, apply_delay=not h.batch)
    except StoreError as exc:
        raise refuse(exc.code, exc.remark) from None
    answer = call.answer(ResponseCode.SUCCESS, ext=_success_ext(result, queue_id))
    return broker.answer_when_durable(call, result, answer, wait=wait)


def _success_ext(result: PutResult, queue_id: int) -> dict[str, str]:
    first = result.stored[0]
    return {"queueId": str(queue_id), **TRACE_EXT, "msgId": ",".join(s.msg_id for s in result.stored),
            "queueOffset": str(first.queue_offset)}


def _single(broker: BrokerContext, call: Call, h: SendMessageRequestHeader,
            queue_id: int) -> tuple[list[MessageExt], bool]:
    props = decode_properties(h.properties or "")
    props.setdefault(PROP_UNIQ_KEY, new_uniq_key())
    props[PROP_CLUSTER] = broker.cluster
    wait = props.get(PROP_WAIT, "true").lower() != "false"
    topic, reconsume = h.topic, h.reconsume_times or 0
    if topic.startswith(RETRY_PREFIX):
        topic, queue_id = _retry_or_dlq(broker, call, h, props, queue_id)
    half = is_transactional(props)
    if not (half or _delay_level(props) > 0 or (broker.timer is not None and timer.is_timed(props))):
        props.pop(PROP_WAIT, None)  # 4.9.8 stores a normal send without WAIT (5.5.0 keeps a timer's)
    msg = MessageExt(topic=topic, body=call.cmd.body, queue_id=queue_id, flag=h.flag,
                     sys_flag=h.sys_flag, born_timestamp=h.born_timestamp, born_host=call.conn.remote,
                     reconsume_times=reconsume, properties=props)
    return [to_half(msg) if half else msg], wait


def _delay_level(props: dict[str, str]) -> int:
    try:
        return int(props.get(PROP_DELAY, "0"))
    except ValueError:
        return 0


def _retry_or_dlq(broker: BrokerContext, call: Call, h: SendMessageRequestHeader, props: dict[str, str],
                  queue_id: int) -> tuple[str, int]:
    """A send to %RETRY%<group> (8.4): to the DLQ once reconsumeTimes reaches the limit."""
    group = h.topic[len(RETRY_PREFIX):]
    config = broker.groups.find_or_create(group)
    max_times = config.retry_max_times
    if call.cmd.version >= VERSION_V3_4_9 and h.max_reconsume_times is not None:
        max_times = h.max_reconsume_times
    if (h.reconsume_times or 0) < max_times:
        return h.topic, queue_id
    dlq = DLQ_PREFIX + group
    broker.topics.ensure(dlq, 1)
    props[PROP_DELAY] = "0"
    return dlq, 0


CPP_BATCH_FLAG = "1"


def _batch(broker: BrokerContext, call: Call, h: SendMessageRequestHeader,
           queue_id: int) -> tuple[list[MessageExt], bool]:
    if len(h.topic) > MAX_BATCH_TOPIC_LENGTH:
        raise refuse(ResponseCode.MESSAGE_ILLEGAL, f"message topic length too long {len(h.topic)}")
    if h.topic.startswith(RETRY_PREFIX):
        raise refuse(ResponseCode.MESSAGE_ILLEGAL, f"batch request does not support retry group {h.topic}")
    if h.sys_flag & MessageSysFlag.TRANSACTION_MASK:  # CommitLog.putMessages: no transactional batches
        raise refuse(ResponseCode.MESSAGE_ILLEGAL, MESSAGE_ILLEGAL_REMARK)
    body = call.cmd.body
    sys_flag = h.sys_flag
    if sys_flag & MessageSysFlag.COMPRESSED and CPP_BATCH_FLAG in (call.ext.get("batch"), call.ext.get("m")):
        # the C++ client's batch (flag "1") is compressed whole; any other batch's items are
        # stored as sent, each with the batch's sysFlag (as Apache stores them)
        inflater = zlib.decompressobj()
        try:
            body = inflater.decompress(body, MAX_INFLATED_BATCH + 1)
        except zlib.error as exc:
            raise refuse(ResponseCode.MESSAGE_ILLEGAL, f"the compressed batch body cannot be inflated: {exc}") from None
        if len(body) > MAX_INFLATED_BATCH:
            raise refuse(ResponseCode.MESSAGE_ILLEGAL, f"the batch body inflates to more than {MAX_INFLATED_BATCH} bytes")
        sys_flag &= ~(MessageSysFlag.COMPRESSED | MessageSysFlag.COMPRESSION_TYPE_MASK)
    try:
        items = decode_batch(body)
    except RemoteProtocolError as exc:
        raise refuse(ResponseCode.MESSAGE_ILLEGAL, f"the batch body is malformed: {exc}") from None
    if not items:
        raise refuse(ResponseCode.MESSAGE_ILLEGAL, "the batch body holds no message")
    batch_props = decode_properties(h.properties or "")
    wait = batch_props.get(PROP_WAIT, "true").lower() != "false"
    out = []
    for item in items:
        props = dict(item.properties)
        props.setdefault(PROP_UNIQ_KEY, new_uniq_key())
        props[PROP_CLUSTER] = broker.cluster
        out.append(MessageExt(topic=h.topic, body=item.body, queue_id=queue_id, flag=item.flag,
                              sys_flag=sys_flag, born_timestamp=h.born_timestamp,
                              born_host=call.conn.remote, reconsume_times=h.reconsume_times or 0,
                              properties=props))
    return out, wait
