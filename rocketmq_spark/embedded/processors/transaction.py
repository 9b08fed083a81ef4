"""END_TRANSACTION (37): ``EndTransactionProcessor`` of 4.9.8.

Checks in Apache's order, with its answers: ``commitOrRollback`` must be 0, 8 or 12 (the
header's own check, its exception text as remark); 0 (UNKNOWN) gets no answer at all,
not even to a request that is not oneway. Then the message starting at
``commitLogOffset`` must exist ("Find prepared transaction message failed") and match:
its PGROUP the ``producerGroup`` (a message without PGROUP fails as Java does, with a
NullPointerException), its queue offset ``tranStateTableOffset``, its own offset
``commitLogOffset``. Any message found there is used; nothing says whether it was
resolved before, so a second commit delivers again.

Commit stores a *new* message in REAL_TOPIC / REAL_QID: body, flag, born fields and every
property of the half message (TRAN_MSG, PGROUP, REAL_TOPIC, REAL_QID and WAIT included,
as 4.9.8 stores them), sysFlag TRANSACTION_COMMIT_TYPE, preparedTransactionOffset = the
half message's commit-log offset (DELAY is honoured here); then the op message that
keeps the half message from being checked back, and SUCCESS without remark. Rollback
stores the op message only and answers SUCCESS with the remark Apache leaves in place,
"not set any response code". With sync flush the answer waits for fsync.
"""

from __future__ import annotations

from rocketmq_spark.embedded.processors.base import BrokerContext, Call, Refuse
from rocketmq_spark.remoting.codes import MessageSysFlag, ResponseCode, TransactionState
from rocketmq_spark.remoting.command import RemotingCommand
from rocketmq_spark.remoting.headers import EndTransactionRequestHeader
from rocketmq_spark.remoting.message import PROP_PRODUCER_GROUP, PROP_REAL_QID, PROP_REAL_TOPIC, MessageExt

NOT_SET = "not set any response code"  # RemotingCommand.createResponseCommand's placeholder remark
NOT_FOUND = "Find prepared transaction message failed"
BAD_STATE = ("org.apache.rocketmq.remoting.exception.RemotingCommandException: commitOrRollback field wrong, "
             "org.apache.rocketmq.common.protocol.header.EndTransactionRequestHeader.checkFields"
             "(EndTransactionRequestHeader.java:60)")
NO_PRODUCER_GROUP = ('java.lang.NullPointerException: Cannot invoke "String.equals(Object)" because "<local4>" '
                     "is null, org.apache.rocketmq.broker.processor.EndTransactionProcessor.checkPrepareMessage"
                     "(EndTransactionProcessor.java:168)")
STATES = frozenset({TransactionState.UNKNOWN, TransactionState.COMMIT, TransactionState.ROLLBACK})


def handle_end_transaction(broker: BrokerContext, call: Call) -> RemotingCommand | None:
    h = EndTransactionRequestHeader.from_ext(call.ext)
    if h.commit_or_rollback not in STATES:
        raise Refuse(ResponseCode.SYSTEM_ERROR, BAD_STATE)
    if h.commit_or_rollback == TransactionState.UNKNOWN:
        return None  # the producer does not know yet: Apache answers nothing, a check-back will ask
    half = check_prepared(broker.half_messages.look(h.commit_log_offset), h)
    if h.commit_or_rollback == TransactionState.COMMIT:
        broker.put([committed(half, h.commit_log_offset)])
        op = broker.half_messages.delete_prepared(half)
        return broker.answer_when_durable(call, op, call.answer(ResponseCode.SUCCESS), wait=True)
    op = broker.half_messages.delete_prepared(half)
    return broker.answer_when_durable(call, op, call.answer(ResponseCode.SUCCESS, NOT_SET), wait=True)


def check_prepared(half: MessageExt | None, h: EndTransactionRequestHeader) -> MessageExt:
    """``checkPrepareMessage``: ``half``, unless it is not the message ``h`` names."""
    if half is None:
        raise Refuse(ResponseCode.SYSTEM_ERROR, NOT_FOUND)
    group = half.properties.get(PROP_PRODUCER_GROUP)
    if group is None:
        raise Refuse(ResponseCode.SYSTEM_ERROR, NO_PRODUCER_GROUP)
    if group != h.producer_group:
        raise Refuse(ResponseCode.SYSTEM_ERROR, "The producer group wrong")
    if half.queue_offset != h.tran_state_table_offset:
        raise Refuse(ResponseCode.SYSTEM_ERROR, "The transaction state table offset wrong")
    if half.commit_log_offset != h.commit_log_offset:
        raise Refuse(ResponseCode.SYSTEM_ERROR, "The commit log offset wrong")
    return half


def committed(half: MessageExt, commit_log_offset: int) -> MessageExt:
    """``endMessageTransaction``: the message a commit delivers to the real topic."""
    qid_text = half.properties.get(PROP_REAL_QID)
    try:
        queue_id = int(qid_text) if qid_text is not None else None
    except ValueError:
        queue_id = None
    if queue_id is None:
        detail = "Cannot parse null string: null" if qid_text is None else f'For input string: "{qid_text}"'
        raise Refuse(ResponseCode.SYSTEM_ERROR, f"java.lang.NumberFormatException: {detail}")
    topic = half.properties.get(PROP_REAL_TOPIC)
    if not topic:
        raise Refuse(ResponseCode.SYSTEM_ERROR, "java.lang.NullPointerException: the message has no REAL_TOPIC")
    sys_flag = (half.sys_flag & ~MessageSysFlag.TRANSACTION_MASK) | MessageSysFlag.TRANSACTION_COMMIT_TYPE
    return MessageExt(topic=topic, body=half.body, queue_id=queue_id, flag=half.flag, sys_flag=sys_flag,
                      born_timestamp=half.born_timestamp, born_host=half.born_host,
                      reconsume_times=half.reconsume_times, prepared_transaction_offset=commit_log_offset,
                      properties=dict(half.properties))
