"""Consumer-side requests: offsets (14, 15), HEART_BEAT (34), UNREGISTER_CLIENT (35),
CONSUMER_SEND_MSG_BACK (36), GET_CONSUMER_LIST_BY_GROUP (38), LOCK/UNLOCK_BATCH_MQ (41, 42),
CHECK_CLIENT_CONFIG (46).
"""

from __future__ import annotations

import random

from rocketmq_spark.embedded.processors.base import BrokerContext, Call, Refuse
from rocketmq_spark.errors import RemoteProtocolError
from rocketmq_spark.embedded.sql92 import SelectorError, compile_selector
from rocketmq_spark.remoting.bodies import (CheckClientRequestBody, HeartbeatData, LockBatchBody,
                                            encode_consumer_list, encode_lock_ok)
from rocketmq_spark.remoting.codes import ResponseCode, dlq_topic, retry_topic
from rocketmq_spark.remoting.command import RemotingCommand
from rocketmq_spark.remoting.headers import (ConsumerSendMsgBackRequestHeader, GetConsumerListRequestHeader,
                                             QueryConsumerOffsetRequestHeader, UnregisterClientRequestHeader,
                                             UpdateConsumerOffsetRequestHeader)
from rocketmq_spark.remoting.message import (PROP_DELAY, PROP_ORIGIN_MESSAGE_ID, PROP_RETRY_TOPIC, PROP_WAIT,
                                             MessageExt, decode_message)

VERSION_V3_4_9 = 121
NOT_FOUND_REMARK = "Not found, V3_0_6_SNAPSHOT maybe this group consumer boot first"


def handle_query_offset(broker: BrokerContext, call: Call) -> RemotingCommand:
    h = QueryConsumerOffsetRequestHeader.from_ext(call.ext)
    offset = broker.offsets.query(h.consumer_group, h.topic, h.queue_id)
    if offset >= 0:
        return call.answer(ResponseCode.SUCCESS, ext={"offset": str(offset)})
    # A group that never committed reads 0 while the queue still starts at 0 (4.9.8).
    if h.set_zero_if_not_found is not False and broker.store.min_offset(h.topic, h.queue_id) <= 0:
        return call.answer(ResponseCode.SUCCESS, ext={"offset": "0"})
    raise Refuse(ResponseCode.QUERY_NOT_FOUND, NOT_FOUND_REMARK, {})


def handle_update_offset(broker: BrokerContext, call: Call) -> RemotingCommand | None:
    h = UpdateConsumerOffsetRequestHeader.from_ext(call.ext)
    answer = call.answer(ResponseCode.SUCCESS, ext={})
    if broker.flush_sync and not call.oneway:  # answer once the offset is on disk
        broker.offsets.commit(h.consumer_group, h.topic, h.queue_id, h.commit_offset,
                              on_durable=lambda: call.send(answer))
        return None
    broker.offsets.commit(h.consumer_group, h.topic, h.queue_id, h.commit_offset)
    return answer


def _body_of(call: Call, what: str) -> bytes:
    if not call.cmd.body:
        raise Refuse(ResponseCode.SYSTEM_ERROR, f"{what} needs a body ({what} JSON), got none")
    return call.cmd.body


def handle_heartbeat(broker: BrokerContext, call: Call) -> RemotingCommand:
    try:
        data = HeartbeatData.decode(_body_of(call, "HeartbeatData"))
    except RemoteProtocolError as exc:
        raise Refuse(ResponseCode.SYSTEM_ERROR, f"bad HeartbeatData body: {exc}") from None
    for consumer in data.consumers:
        group = broker.groups.find_or_create(consumer.group_name)
        broker.topics.ensure(retry_topic(consumer.group_name), group.retry_queue_nums)
        notice = broker.clients.register_consumer(call.conn, data.client_id, call.cmd.language,
                                                  call.cmd.version, consumer)
        if notice and group.notify_consumer_ids_changed_enable:
            broker.notify_consumer_ids_changed(notice)
    for producer_group in data.producer_groups:
        broker.clients.register_producer(call.conn, data.client_id, call.cmd.language, call.cmd.version,
                                         producer_group)
    return call.answer(ResponseCode.SUCCESS)


def handle_check_client_config(broker: BrokerContext, call: Call) -> RemotingCommand:
    """Apache's ``checkClientConfig``: a TAG subscription passes; another type needs the
    property filter (SYSTEM_ERROR) and an expression that compiles (SUBSCRIPTION_PARSE_FAILED
    with the parser's message, where Apache puts its exception's)."""
    try:
        sub = CheckClientRequestBody.decode(call.cmd.body or b"{}").subscription
    except RemoteProtocolError as exc:
        raise Refuse(ResponseCode.SYSTEM_ERROR, f"bad CheckClientRequestBody body: {exc}") from None
    if sub.expression_type.upper() == "TAG":
        return call.answer(ResponseCode.SUCCESS)
    if not broker.enable_property_filter:
        raise Refuse(ResponseCode.SYSTEM_ERROR,
                     f"The broker does not support consumer to filter message by {sub.expression_type}")
    if sub.expression_type.upper() != "SQL92":
        raise Refuse(ResponseCode.SUBSCRIPTION_PARSE_FAILED, f"no filter for expression type {sub.expression_type}")
    try:
        compile_selector(sub.sub_string)
    except SelectorError as exc:
        raise Refuse(ResponseCode.SUBSCRIPTION_PARSE_FAILED, str(exc)) from None
    return call.answer(ResponseCode.SUCCESS)


def handle_unregister(broker: BrokerContext, call: Call) -> RemotingCommand:
    h = UnregisterClientRequestHeader.from_ext(call.ext)
    if h.producer_group:
        broker.clients.unregister_producer(call.conn, h.client_id, h.producer_group)
    if h.consumer_group:
        notice = broker.clients.unregister_consumer(call.conn, h.client_id, h.consumer_group)
        group = broker.groups.get(h.consumer_group)
        if notice and (group is None or group.notify_consumer_ids_changed_enable):
            broker.notify_consumer_ids_changed(notice)
    return call.answer(ResponseCode.SUCCESS, ext={})


def handle_consumer_list(broker: BrokerContext, call: Call) -> RemotingCommand:
    h = GetConsumerListRequestHeader.from_ext(call.ext)
    ids = broker.clients.consumer_ids(h.consumer_group)
    if not ids:
        raise Refuse(ResponseCode.SYSTEM_ERROR, f"no consumer for this group, {h.consumer_group}", {})
    return call.answer(ResponseCode.SUCCESS, ext={}, body=encode_consumer_list(ids))


def _lock_body(call: Call) -> LockBatchBody:
    try:
        return LockBatchBody.decode(_body_of(call, "LockBatchRequestBody"))
    except RemoteProtocolError as exc:
        raise Refuse(ResponseCode.SYSTEM_ERROR, f"bad lock batch body: {exc}") from None


def handle_lock(broker: BrokerContext, call: Call) -> RemotingCommand:
    body = _lock_body(call)
    granted = broker.locks.try_lock_batch(body.consumer_group, body.mqs, body.client_id)
    return call.answer(ResponseCode.SUCCESS, body=encode_lock_ok(granted))


def handle_unlock(broker: BrokerContext, call: Call) -> RemotingCommand:
    body = _lock_body(call)
    broker.locks.unlock_batch(body.consumer_group, body.mqs, body.client_id)
    return call.answer(ResponseCode.SUCCESS)


def handle_send_back(broker: BrokerContext, call: Call) -> RemotingCommand | None:
    """CONSUMER_SEND_MSG_BACK, as 4.9.8's ``consumerSendMsgBack`` (section 8.2)."""
    h = ConsumerSendMsgBackRequestHeader.from_ext(call.ext)
    group = broker.groups.find_or_create(h.group)
    if group.retry_queue_nums <= 0:
        return call.answer(ResponseCode.SUCCESS)
    topic = retry_topic(h.group)
    queue_id = random.randrange(group.retry_queue_nums)
    config = broker.topics.ensure(topic, group.retry_queue_nums)
    if not config.writable:
        raise Refuse(ResponseCode.NO_PERMISSION, f"the topic[{topic}] sending message is forbidden")
    raw = broker.store.message_at(h.offset)
    if raw is None:
        raise Refuse(ResponseCode.SYSTEM_ERROR, f"look message by offset failed, {h.offset}")
    try:
        original, _ = decode_message(raw)
    except RemoteProtocolError:
        raise Refuse(ResponseCode.SYSTEM_ERROR, f"look message by offset failed, {h.offset}") from None
    props = dict(original.properties)
    props.setdefault(PROP_RETRY_TOPIC, original.topic)
    props[PROP_WAIT] = "false"
    max_times = group.retry_max_times
    if call.cmd.version >= VERSION_V3_4_9 and h.max_reconsume_times is not None:
        max_times = h.max_reconsume_times
    delay = h.delay_level
    if original.reconsume_times >= max_times or delay < 0:
        topic, queue_id = dlq_topic(h.group), 0
        config = broker.topics.ensure(topic, 1)
        props[PROP_DELAY] = "0"
    else:
        props[PROP_DELAY] = str(delay if delay > 0 else 3 + original.reconsume_times)
    props[PROP_ORIGIN_MESSAGE_ID] = props.get(PROP_ORIGIN_MESSAGE_ID) or original.offset_msg_id
    copy = MessageExt(topic=topic, body=original.body, queue_id=queue_id, flag=original.flag,
                      sys_flag=original.sys_flag, born_timestamp=original.born_timestamp,
                      born_host=original.born_host, reconsume_times=original.reconsume_times + 1,
                      properties=props)
    result = broker.put([copy])
    return broker.answer_when_durable(call, result, call.answer(ResponseCode.SUCCESS), wait=True)
