"""The broker's request table: RequestCode -> handler, and the dispatcher around it.

The dispatcher answers unknown codes with REQUEST_CODE_NOT_SUPPORTED (" request type N
not supported"), turns ``Refuse`` into its answer, a missing or ill-typed header field
(``HeaderError``) into SYSTEM_ERROR naming the field, and any other failure into
SYSTEM_ERROR with the exception's class and message (as Java does), never dropping the
connection. Oneway requests (flag 2) get no answer.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Callable, Mapping, Optional, TypeVar

from rocketmq_spark.embedded.processors import admin, consumer, pull, replicate, send, transaction
from rocketmq_spark.embedded.processors.base import BrokerContext, Call, Handler, Refuse, Served
from rocketmq_spark.embedded.store import StoreError
from rocketmq_spark.errors import RemoteProtocolError
from rocketmq_spark.remoting.codes import RequestCode, ResponseCode
from rocketmq_spark.remoting.command import RemotingCommand

if TYPE_CHECKING:
    from rocketmq_spark.embedded.server import Connection

log = logging.getLogger(__name__)

R = RequestCode
HANDLERS: dict[int, Handler] = {
    R.SEND_MESSAGE: send.handle_send,
    R.SEND_MESSAGE_V2: send.handle_send,
    R.SEND_BATCH_MESSAGE: send.handle_send,
    R.PULL_MESSAGE: pull.handle_pull,
    R.LITE_PULL_MESSAGE: pull.handle_pull,
    R.QUERY_CONSUMER_OFFSET: consumer.handle_query_offset,
    R.UPDATE_CONSUMER_OFFSET: consumer.handle_update_offset,
    R.HEART_BEAT: consumer.handle_heartbeat,
    R.UNREGISTER_CLIENT: consumer.handle_unregister,
    R.CONSUMER_SEND_MSG_BACK: consumer.handle_send_back,
    R.GET_CONSUMER_LIST_BY_GROUP: consumer.handle_consumer_list,
    R.LOCK_BATCH_MQ: consumer.handle_lock,
    R.UNLOCK_BATCH_MQ: consumer.handle_unlock,
    R.CHECK_CLIENT_CONFIG: consumer.handle_check_client_config,
    R.GET_MAX_OFFSET: admin.handle_max_offset,
    R.GET_MIN_OFFSET: admin.handle_min_offset,
    R.SEARCH_OFFSET_BY_TIMESTAMP: admin.handle_search_offset,
    R.GET_EARLIEST_MSG_STORETIME: admin.handle_earliest_time,
    R.VIEW_MESSAGE_BY_ID: admin.handle_view_message,
    R.QUERY_MESSAGE: admin.handle_query_message,
    R.UPDATE_AND_CREATE_TOPIC: admin.handle_create_topic,
    R.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: admin.handle_create_subscription_group,
    R.GET_ALL_TOPIC_CONFIG: admin.handle_all_topic_config,
    R.GET_ALL_CONSUMER_OFFSET: admin.handle_all_consumer_offset,
    R.GET_ALL_SUBSCRIPTIONGROUP_CONFIG: admin.handle_all_subscription_groups,
    replicate.REPLICATE_COMMIT_LOG: replicate.handle_replicate,
    R.GET_BROKER_RUNTIME_INFO: admin.handle_runtime_info,
    R.GET_TOPIC_STATS_INFO: admin.handle_topic_stats,
    R.GET_CONSUMER_CONNECTION_LIST: admin.handle_consumer_connections,
    R.GET_CONSUME_STATS: admin.handle_consume_stats,
    R.GET_PRODUCER_CONNECTION_LIST: admin.handle_producer_connections,
    R.END_TRANSACTION: transaction.handle_end_transaction,
}


def not_supported(call: Call) -> RemotingCommand:
    return call.answer(ResponseCode.REQUEST_CODE_NOT_SUPPORTED, f" request type {call.cmd.code} not supported")


S = TypeVar("S", bound=Served)


def answer_request(broker: S, call: Call,
                   handlers: Mapping[int, Callable[[S, Call], Optional[RemotingCommand]]]) -> RemotingCommand | None:
    """The answer to ``call`` (None when it is given later or never)."""
    handler = handlers.get(call.cmd.code)
    if handler is None:
        return not_supported(call)
    try:
        if broker.acl is not None:  # ACL hook: raises Refuse for a request the ACL denies
            broker.acl.check(call)
        return handler(broker, call)
    except Refuse as r:
        return call.answer(r.code, r.remark, r.ext)
    except StoreError as exc:
        return call.answer(exc.code, exc.remark)
    except RemoteProtocolError as exc:  # HeaderError included: the remark names the field
        return call.answer(ResponseCode.SYSTEM_ERROR, str(exc))
    except Exception as exc:
        log.exception("%s: request %d failed", broker.name, call.cmd.code)
        return call.answer(ResponseCode.SYSTEM_ERROR, f"{type(exc).__name__}: {exc}")


def dispatch(broker: BrokerContext, conn: "Connection", cmd: RemotingCommand) -> None:
    if cmd.is_response:  # answers to our own oneway notifications: none are expected
        return
    call = Call(cmd, conn)
    call.send(answer_request(broker, call, HANDLERS))
