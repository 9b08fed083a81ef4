"""Send requests (SEND_MESSAGE_V2, SEND_BATCH_MESSAGE) and their results, with no I/O.

A single message goes out as SEND_MESSAGE_V2 with the one-letter header, its properties
carrying UNIQ_KEY (the client id we generate), WAIT=true, TAGS, KEYS and DELAY; bodies
at or over the threshold of a ``Compression`` (default: 4096 bytes, zlib level 5, sysFlag 1)
are compressed as the Java producer does; a transactional send adds TRAN_MSG / PGROUP and the prepared sysFlag
(a half message), which END_TRANSACTION commits or rolls back. A batch goes out as
SEND_BATCH_MESSAGE with ``m=true`` and a body of batch entries, each with its own
properties; its bodies are compressed when every one of them is at or over the threshold
(the broker stores each item with the batch's sysFlag, so a batch is compressed whole or
not at all; the Java producer never compresses a batch), and a batch is never
transactional (brokers refuse it). Sends to a
``%RETRY%`` topic move RECONSUME_TIME / MAX_RECONSUME_TIMES into header fields j and l.
"""

from __future__ import annotations

from typing import Sequence

from rocketmq_spark.client.calls import check, request
from rocketmq_spark.remoting.codes import (
    DEFAULT_TOPIC, RETRY_PREFIX, SEND_STATUS, SEND_STORED_CODES, MessageSysFlag, RequestCode,
    TransactionState)
from rocketmq_spark.remoting.command import RemotingCommand
from rocketmq_spark.remoting.compression import DEFAULT_COMPRESSION, Compression
from rocketmq_spark.remoting.headers import (EndTransactionRequestHeader, SendMessageRequestHeader,
                                            SendMessageResponseHeader)
from rocketmq_spark.remoting.message import (
    NAME_VALUE_SEP, PROP_DELAY, PROP_KEYS, PROP_PRODUCER_GROUP, PROP_TRANSACTION_PREPARED, PROP_MAX_RECONSUME_TIMES, PROP_RECONSUME_TIME,
    PROP_TAGS, PROP_UNIQ_KEY, PROP_WAIT, PROPERTY_SEP, BatchItem, encode_batch,
    encode_properties)
from rocketmq_spark.remoting import timer
from rocketmq_spark.remoting.route import MessageQueue
from rocketmq_spark.structs import HalfMessage, Message, SendResult

DEFAULT_TOPIC_QUEUE_NUMS = 4


def _check_text(what: str, text: str) -> None:
    if NAME_VALUE_SEP in text or PROPERTY_SEP in text:
        raise ValueError(f"{what} {text!r} contains a control character (\\x01 or \\x02) "
                         "that the properties encoding reserves")


def validate(message: Message) -> None:
    if not isinstance(message.topic, str) or not message.topic:
        raise ValueError(f"message topic must be a non-empty string, got {message.topic!r}")
    if not isinstance(message.body, (bytes, bytearray, memoryview)):
        raise ValueError(f"message body must be bytes, got {type(message.body).__name__}")
    if not len(message.body):
        raise ValueError("message body is empty: RocketMQ refuses a message without a body "
                         "(the Java producer refuses it; RocketMQ 5 brokers fail on it)")
    if message.delay_level < 0:
        raise ValueError(f"delay_level must be >= 0, got {message.delay_level}")
    for k, v in message.properties.items():
        if not k:
            raise ValueError("message property with an empty name")
        _check_text("property name", k)
        _check_text(f"value of property {k!r}", str(v))
    for name in ("tags", "keys"):
        value = getattr(message, name)
        if value is not None:
            _check_text(name, value)


def uniq_key_of(message: Message) -> str | None:
    return message.properties.get(PROP_UNIQ_KEY) or None


def message_properties(message: Message, uniq_key: str) -> dict[str, str]:
    """What goes on the wire: user properties, then KEYS, TAGS, DELAY, UNIQ_KEY, WAIT."""
    props = {k: str(v) for k, v in message.properties.items()}
    if message.keys:
        props[PROP_KEYS] = message.keys
    if message.tags:
        props[PROP_TAGS] = message.tags
    if message.delay_level > 0:
        props[PROP_DELAY] = str(message.delay_level)
    props[PROP_UNIQ_KEY] = uniq_key
    props.setdefault(PROP_WAIT, "true")
    return props


def send_request(message: Message, *, queue_id: int, producer_group: str, uniq_key: str,
                 born_timestamp: int, compression: Compression = DEFAULT_COMPRESSION,
                 transactional: bool = False) -> RemotingCommand:
    """SEND_MESSAGE_V2 of ``message``; ``transactional``: as a half message (TRAN_MSG=true,
    PGROUP, sysFlag TRANSACTION_PREPARED_TYPE, as the Java producer's
    sendMessageInTransaction), held by the broker until END_TRANSACTION."""
    validate(message)
    props = message_properties(message, uniq_key)
    if transactional:
        if message.delay_level > 0:
            raise ValueError("a transactional message cannot have a delay level")
        if timer.is_timed(message.properties):
            raise ValueError("a transactional message cannot be a timer message (RocketMQ keeps "
                             "TRANSACTION and DELAY message types apart)")
        props[PROP_TRANSACTION_PREPARED] = "true"
        props[PROP_PRODUCER_GROUP] = producer_group
    reconsume_times, max_reconsume = 0, None
    if message.topic.startswith(RETRY_PREFIX):
        reconsume_times = int(props.pop(PROP_RECONSUME_TIME, 0) or 0)
        if PROP_MAX_RECONSUME_TIMES in props:
            max_reconsume = int(props.pop(PROP_MAX_RECONSUME_TIMES))
    body, sys_flag = bytes(message.body), 0
    if compression.applies(len(body)):
        body, sys_flag = compression.deflate(body), compression.sys_flag
    if transactional:
        sys_flag |= MessageSysFlag.TRANSACTION_PREPARED_TYPE
    header = SendMessageRequestHeader(
        producer_group=producer_group, topic=message.topic, default_topic=DEFAULT_TOPIC,
        default_topic_queue_nums=DEFAULT_TOPIC_QUEUE_NUMS, queue_id=queue_id, sys_flag=sys_flag,
        born_timestamp=born_timestamp, flag=message.flag, properties=encode_properties(props),
        reconsume_times=reconsume_times, unit_mode=False, max_reconsume_times=max_reconsume,
        batch=False)
    return request(RequestCode.SEND_MESSAGE_V2, header.to_v2_ext(), body)


def validate_batch(messages: Sequence[Message]) -> str:
    """The batch's topic; ValueError for an empty or mixed batch, delays, retry topics."""
    if not messages:
        raise ValueError("send_batch needs at least one message")
    topic = messages[0].topic
    for m in messages:
        validate(m)
        if m.topic != topic:
            raise ValueError(f"a batch goes to one topic; got {topic!r} and {m.topic!r}")
        if m.delay_level:
            raise ValueError(f"delay_level {m.delay_level} is not supported in a batch")
        if timer.is_timed(m.properties):
            # a 5.x broker reads the timer of the batch's own properties only: the items
            # would be stored at once
            raise ValueError("timer messages (TIMER_DELIVER_MS, ...) are not supported in a batch")
    if topic.startswith(RETRY_PREFIX):
        raise ValueError(f"batches cannot be sent to retry topic {topic!r}")
    return topic


def batch_request(messages: Sequence[Message], *, queue_id: int, producer_group: str,
                  uniq_keys: Sequence[str], born_timestamp: int,
                  compression: Compression = DEFAULT_COMPRESSION) -> RemotingCommand:
    topic = validate_batch(messages)
    compress = all(compression.applies(len(m.body)) for m in messages)
    items = [BatchItem(body=compression.deflate(bytes(m.body)) if compress else bytes(m.body),
                       properties=message_properties(m, uid), flag=m.flag)
             for m, uid in zip(messages, uniq_keys, strict=True)]
    header = SendMessageRequestHeader(
        producer_group=producer_group, topic=topic, default_topic=DEFAULT_TOPIC,
        default_topic_queue_nums=DEFAULT_TOPIC_QUEUE_NUMS, queue_id=queue_id,
        sys_flag=compression.sys_flag if compress else 0,
        born_timestamp=born_timestamp, flag=0, properties=encode_properties({PROP_WAIT: "true"}),
        reconsume_times=0, unit_mode=False, batch=True)
    return request(RequestCode.SEND_BATCH_MESSAGE, header.to_v2_ext(), encode_batch(items))


def end_transaction_request(half: HalfMessage, state: int, *, producer_group: str,
                            from_check: bool = False,
                            transaction_id: str | None = None) -> RemotingCommand:
    """END_TRANSACTION of ``half``: ``state`` COMMIT delivers it to its queue, ROLLBACK drops
    it, UNKNOWN (only as an answer to a check) leaves it to the next check. The broker keeps
    no transaction state: every COMMIT of the same half message delivers it once more."""
    if state not in (TransactionState.COMMIT, TransactionState.ROLLBACK, TransactionState.UNKNOWN):
        raise ValueError(f"transaction state {state} is not COMMIT (8), ROLLBACK (12) or UNKNOWN (0)")
    header = EndTransactionRequestHeader(
        producer_group=producer_group, tran_state_table_offset=half.tran_state_table_offset,
        commit_log_offset=half.commit_log_offset, commit_or_rollback=state, msg_id=half.msg_id,
        from_transaction_check=from_check, transaction_id=transaction_id,
        bname=None if from_check else half.queue.broker_name)
    return request(RequestCode.END_TRANSACTION, header)


def send_result(response: RemotingCommand, *, queue: MessageQueue, msg_id: str, address: str,
                request_code: int) -> SendResult:
    """SendResult of a stored message (codes 0, 10, 11, 12); BrokerError otherwise."""
    check(response, request_code, address, ok=SEND_STORED_CODES)
    h = SendMessageResponseHeader.from_ext(response.ext)
    return SendResult(status=SEND_STATUS[response.code], msg_id=msg_id, offset_msg_id=h.msg_id,
                      queue=MessageQueue(queue.topic, queue.broker_name, h.queue_id),
                      queue_offset=h.queue_offset)

