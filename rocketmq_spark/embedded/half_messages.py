"""The half and op queues of transactional messages (Apache's ``TransactionalMessageBridge``).

How this works. A send whose properties say ``TRAN_MSG=true`` (the property decides, not
the sysFlag) is stored as a *half message*: the same message in RMQ_SYS_TRANS_HALF_TOPIC
queue 0 with REAL_TOPIC / REAL_QID naming where it belongs and the transaction bits of
its sysFlag cleared, so no consumer of the real topic sees it. Ending a transaction
writes an *op message* to RMQ_SYS_TRANS_OP_HALF_TOPIC (same queue id as the half
message, tag ``d``, body = the half message's queue offset as text); a commit first
stores a new message in the real topic (``processors.transaction``), a rollback nothing
else. The broker keeps no other transaction state: END_TRANSACTION finds the half
message again by its commit-log offset, and a second commit delivers it again, as 4.9.8
does.

The check service (``embedded.transactions``) reads both queues from the consume offsets
of group CID_RMQ_SYS_TRANS, kept and saved with every other consumer offset; before each
check-back it appends a copy of the half message to the half queue (its check count in
TRANSACTION_CHECK_TIMES) and moves past the original. Queues, copies and progress are
all on disk, so a restarted broker goes on where it stopped. Like Apache, the op topic
is never entered in the topic table (its queues exist in the store only), and
TRANS_CHECK_MAX_TIME_TOPIC is created (1 queue, read/write) when the first half message
is given up on.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import replace
from typing import Callable, Mapping, Sequence

from rocketmq_spark.embedded.offsets import ConsumerOffsetManager
from rocketmq_spark.embedded.store import GetResult, GetStatus, MessageStore, PutResult, Stored
from rocketmq_spark.embedded.topics import TopicManager
from rocketmq_spark.errors import RemoteProtocolError
from rocketmq_spark.remoting.codes import (TRANS_CHECK_MAX_TIME_TOPIC, TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC,
                                           MessageSysFlag, Perm)
from rocketmq_spark.remoting.message import (PROP_REAL_QID, PROP_REAL_TOPIC, PROP_TRANSACTION_PREPARED, PROP_WAIT,
                                             HostPort, MessageExt, decode_message, decode_messages)

log = logging.getLogger(__name__)

CHECK_GROUP = "CID_RMQ_SYS_TRANS"      # MixAll.CID_SYS_RMQ_TRANS: whose offsets are the check progress
REMOVE_TAG = "d"                       # TransactionalMessageUtil.REMOVETAG
HALF_QUEUE_ID = 0
PROP_PREPARED_QUEUE_OFFSET = "TRAN_PREPARED_QUEUE_OFFSET"
DURABLE_WAIT_SECONDS = 30.0

Put = Callable[[Sequence[MessageExt]], PutResult]


def is_transactional(properties: Mapping[str, str]) -> bool:
    """``Boolean.parseBoolean(TRAN_MSG)``: what makes a send a half message."""
    return properties.get(PROP_TRANSACTION_PREPARED, "").lower() == "true"


def to_half(m: MessageExt) -> MessageExt:
    """``parseHalfMessageInner``: the message as the half queue stores it."""
    props = {**m.properties, PROP_REAL_TOPIC: m.topic, PROP_REAL_QID: str(m.queue_id)}
    return replace(m, topic=TRANS_HALF_TOPIC, queue_id=HALF_QUEUE_ID, properties=props,
                   sys_flag=m.sys_flag & ~MessageSysFlag.TRANSACTION_MASK)


def op_message(half: MessageExt, born_timestamp: int, host: HostPort) -> MessageExt:
    """``makeOpMessageInner``: "half offset N is done", in the op queue of ``half``'s queue
    id. Its properties are those of ``new Message(topic, "d", body)``: TAGS and WAIT=true."""
    return MessageExt(topic=TRANS_OP_HALF_TOPIC, body=str(half.queue_offset).encode(), queue_id=half.queue_id,
                      born_timestamp=born_timestamp, born_host=host,
                      properties={"TAGS": REMOVE_TAG, PROP_WAIT: "true"})


class HalfMessages:
    """The half queue, the op queue and the check group's offsets of one broker. ``put``
    stores messages as they are (no delay levels)."""

    def __init__(self, store: MessageStore, put: Put, topics: TopicManager,
                 offsets: ConsumerOffsetManager) -> None:
        self.store = store
        self._put = put
        self.topics = topics
        self.offsets = offsets

    # ------------------------------------------------------------ END_TRANSACTION

    def look(self, commit_log_offset: int) -> MessageExt | None:
        """The message that starts at ``commit_log_offset`` (``lookMessageByOffset``): any
        message there, a half message or not; None when no record starts there."""
        raw = self.store.message_at(commit_log_offset)
        if raw is None:
            return None
        try:
            return decode_message(raw)[0]
        except RemoteProtocolError:
            return None

    def delete_prepared(self, half: MessageExt) -> PutResult:
        """Mark ``half`` resolved (``putOpMessage`` with REMOVETAG)."""
        return self._put([op_message(half, self.store.clock.now_ms(), self.store.store_host)])

    # ------------------------------------------------------------ the check service

    def consume_offset(self, topic: str, queue_id: int = HALF_QUEUE_ID) -> int:
        """The check progress in ``topic`` (``fetchConsumeOffset``): the committed offset of
        CID_RMQ_SYS_TRANS, else the queue's min offset."""
        offset = self.offsets.query(CHECK_GROUP, topic, queue_id)
        return offset if offset >= 0 else self.store.min_offset(topic, queue_id)

    def commit_offset(self, topic: str, offset: int, queue_id: int = HALF_QUEUE_ID) -> None:
        self.offsets.commit(CHECK_GROUP, topic, queue_id, offset)

    def half_queue_ids(self) -> list[int]:
        """``fetchMessageQueues(RMQ_SYS_TRANS_HALF_TOPIC)``: created with 1 queue if missing."""
        config = self.topics.ensure(TRANS_HALF_TOPIC, 1)
        return list(range(config.read_queue_nums))

    def half_at(self, queue_id: int, offset: int) -> tuple[MessageExt | None, GetResult]:
        """``getHalfMsg``: the half message at ``offset`` and the store's answer."""
        result = self.store.get(TRANS_HALF_TOPIC, queue_id, offset, 1)
        if result.status is not GetStatus.FOUND:
            return None, result
        try:
            return decode_message(result.body)[0], result
        except RemoteProtocolError as exc:
            log.error("transactions: unreadable half message at %d: %s", offset, exc)
            return None, replace(result, status=GetStatus.OFFSET_FOUND_NULL)

    def ops_from(self, queue_id: int, offset: int, count: int = 32) -> tuple[list[MessageExt], GetResult]:
        """``pullOpMsg``: up to ``count`` op messages from ``offset``."""
        result = self.store.get(TRANS_OP_HALF_TOPIC, queue_id, offset, count)
        if result.status is not GetStatus.FOUND:
            return [], result
        return decode_messages(result.body), result

    def put_back(self, half: MessageExt, extra: dict[str, str] | None = None) -> Stored:
        """``renewHalfMessageInner`` + put: a copy of ``half`` (as now in memory, check count
        included) at the end of its half queue. Like Apache's copy it keeps body, sysFlag,
        properties, born and store host, born time, and drops flag and reconsume times."""
        copy = MessageExt(topic=half.topic, body=half.body, queue_id=half.queue_id, sys_flag=half.sys_flag,
                          born_timestamp=half.born_timestamp, born_host=half.born_host,
                          properties={**half.properties, **(extra or {})})
        return self._put([copy]).stored[0]

    def discard(self, half: MessageExt) -> Stored:
        """``resolveDiscardMsg``: the half message to TRANS_CHECK_MAX_TIME_TOPIC, whose
        consumers may look at what was given up on (check count, sysFlag and all)."""
        self.topics.ensure(TRANS_CHECK_MAX_TIME_TOPIC, 1, Perm.READ | Perm.WRITE)
        moved = MessageExt(topic=TRANS_CHECK_MAX_TIME_TOPIC, body=half.body, queue_id=0, flag=half.flag,
                           sys_flag=half.sys_flag, born_timestamp=half.born_timestamp, born_host=half.born_host,
                           reconsume_times=half.reconsume_times, properties=dict(half.properties))
        return self._put([moved]).stored[0]

    def wait_durable(self, end_offset: int) -> bool:
        """Block until the commit log is fsynced past ``end_offset``."""
        if end_offset <= 0:
            return True
        done = threading.Event()
        ok: list[bool] = []

        def durable(success: bool) -> None:
            ok.append(success)
            done.set()

        self.store.when_durable(end_offset, durable)
        return done.wait(DURABLE_WAIT_SECONDS) and all(ok)
