"""The gRPC servicer: each method converts, delegates to ``SidecarService``, converts back.

``grpc_errors`` is the one place domain errors become gRPC statuses (``status.to_status``).
"""

from __future__ import annotations

import functools
import inspect
import logging
from typing import Any, Callable, Iterator, TypeVar

import grpc

from rocketmq_spark.errors import RocketMQError
from rocketmq_spark.sidecar import converters as cv
from rocketmq_spark.sidecar.service import SidecarService
from rocketmq_spark.sidecar.status import to_status
from rocketmq_spark.sidecar.v1 import sidecar_pb2 as pb
from rocketmq_spark.sidecar.v1 import sidecar_pb2_grpc as pb_grpc

log = logging.getLogger(__name__)

F = TypeVar("F", bound=Callable[..., Any])

# Errors that are the caller's or the cluster's business, not the sidecar's bugs.
_EXPECTED = (RocketMQError,)


def _abort(context: grpc.ServicerContext, exc: BaseException, method: str) -> None:
    if not isinstance(exc, _EXPECTED):
        log.exception("%s failed", method, exc_info=exc)
    else:
        log.info("%s failed: %s", method, exc)
    status, details, md = to_status(exc)
    context.set_trailing_metadata(tuple(md))
    context.abort(status, details)


def grpc_errors(fn: F) -> F:
    """Map exceptions of a unary or server-streaming method to a gRPC status."""
    name = fn.__name__
    if inspect.isgeneratorfunction(fn):
        @functools.wraps(fn)
        def stream(self: Any, request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
            try:
                yield from fn(self, request, context)
            except Exception as exc:
                _abort(context, exc, name)
        return stream  # type: ignore[return-value]

    @functools.wraps(fn)
    def unary(self: Any, request: Any, context: grpc.ServicerContext) -> Any:
        try:
            return fn(self, request, context)
        except Exception as exc:
            _abort(context, exc, name)
    return unary  # type: ignore[return-value]


class SidecarServicer(pb_grpc.SidecarServicer):
    def __init__(self, service: SidecarService) -> None:
        self.service = service

    @grpc_errors
    def Health(self, request: pb.HealthRequest, context: grpc.ServicerContext) -> pb.HealthResponse:
        return cv.health_to_pb(self.service.health())

    @grpc_errors
    def GetQueues(self, request: pb.GetQueuesRequest, context: grpc.ServicerContext) -> pb.GetQueuesResponse:
        qs = self.service.get_queues(cv.cluster_from_pb(request.cluster), list(request.topics),
                                     request.refresh)
        return pb.GetQueuesResponse(queues=[cv.queue_to_pb(q) for q in qs])

    @grpc_errors
    def GetOffsets(self, request: pb.GetOffsetsRequest, context: grpc.ServicerContext) -> pb.GetOffsetsResponse:
        os_ = self.service.get_offsets(cv.cluster_from_pb(request.cluster),
                                       cv.queues_from_pb(request.queues), request.consumer_group,
                                       replica_reads=request.replica_reads)
        return pb.GetOffsetsResponse(offsets=[cv.queue_offsets_to_pb(o) for o in os_])

    @grpc_errors
    def SearchOffsets(self, request: pb.SearchOffsetsRequest,
                      context: grpc.ServicerContext) -> pb.SearchOffsetsResponse:
        found = self.service.search_offsets(cv.cluster_from_pb(request.cluster),
                                            cv.queues_from_pb(request.queues), request.timestamp_ms)
        return pb.SearchOffsetsResponse(offsets=[cv.queue_offset_to_pb(q, o) for q, o in found])

    @grpc_errors
    def QueryMessages(self, request: pb.QueryMessagesRequest,
                      context: grpc.ServicerContext) -> pb.QueryMessagesResponse:
        found = self.service.query_messages(cv.cluster_from_pb(request.cluster), request.topic, request.key,
                                            unique=request.unique, max_num=request.max_num,
                                            brokers=list(request.brokers))
        return pb.QueryMessagesResponse(answers=[
            pb.BrokerAnswer(broker_name=b, found=[cv.indexed_to_pb(b, m) for m in ms])
            for b, ms in sorted(found.items())])

    @grpc_errors
    def Lock(self, request: pb.LockRequest, context: grpc.ServicerContext) -> pb.LockResponse:
        got = self.service.lock(cv.cluster_from_pb(request.cluster), request.consumer_group,
                                request.owner_id, cv.queues_from_pb(request.queues),
                                request.keep_renewed, holder=cv.holder_from_pb(request))
        return pb.LockResponse(locked=[cv.queue_to_pb(q) for q in sorted(got)])

    @grpc_errors
    def RegisterConsumer(self, request: pb.RegisterConsumerRequest,
                         context: grpc.ServicerContext) -> pb.RegisterConsumerResponse:
        self.service.register_consumer(cv.cluster_from_pb(request.cluster), request.client_id,
                                       cv.consumer_from_pb(request), holder=cv.holder_from_pb(request))
        return pb.RegisterConsumerResponse()

    @grpc_errors
    def UnregisterConsumer(self, request: pb.UnregisterConsumerRequest,
                           context: grpc.ServicerContext) -> pb.UnregisterConsumerResponse:
        self.service.unregister_consumer(cv.cluster_from_pb(request.cluster), request.consumer_group,
                                         request.client_id)
        return pb.UnregisterConsumerResponse()

    @grpc_errors
    def Unlock(self, request: pb.UnlockRequest, context: grpc.ServicerContext) -> pb.UnlockResponse:
        self.service.unlock(cv.cluster_from_pb(request.cluster), request.consumer_group,
                            request.owner_id, cv.queues_from_pb(request.queues))
        return pb.UnlockResponse()

    @grpc_errors
    def Pull(self, request: pb.PullRequest, context: grpc.ServicerContext) -> Iterator[pb.ArrowChunk]:
        spec = cv.pull_spec_from_pb(request)
        cluster = cv.cluster_from_pb(request.cluster)
        if spec.shared_memory:
            chunks: Iterator[Any] = self.service.pull_files(cluster, spec, context.is_active)
            wrap: Callable[[Any], pb.ArrowChunk] = lambda path: pb.ArrowChunk(shm_path=path)  # noqa: E731
        else:
            chunks = self.service.pull(cluster, spec)
            wrap = lambda data: pb.ArrowChunk(ipc=data)  # noqa: E731
        try:
            for item in chunks:
                if not context.is_active():   # the reader went away: stop pulling
                    return
                yield wrap(item)
        finally:
            close = getattr(chunks, "close", None)
            if close is not None:
                close()

    @grpc_errors
    def CommitOffsets(self, request: pb.CommitOffsetsRequest,
                      context: grpc.ServicerContext) -> pb.CommitOffsetsResponse:
        self.service.commit_offsets(cv.cluster_from_pb(request.cluster), request.consumer_group,
                                    cv.offsets_map_from_pb(request.offsets))
        return pb.CommitOffsetsResponse()

    @grpc_errors
    def Send(self, request: pb.SendRequest, context: grpc.ServicerContext) -> pb.SendResponse:
        results = self.service.send(cv.cluster_from_pb(request.cluster), request.producer_group,
                                    [cv.out_message_from_pb(m) for m in request.messages],
                                    transaction_tag=request.transaction_tag or None,
                                    unreachable_timeout_ms=request.broker_unavailable_timeout_ms,
                                    compression=cv.compression_from_pb(request))
        return pb.SendResponse(results=[cv.send_result_to_pb(r) for r in results])

    @grpc_errors
    def CommitTransaction(self, request: pb.CommitTransactionRequest,
                          context: grpc.ServicerContext) -> pb.CommitTransactionResponse:
        outcome = self.service.commit_transaction(
            cv.cluster_from_pb(request.cluster), request.producer_group, cv.txn_from_pb(request.transaction),
            [(t.partition, t.attempt) for t in request.tasks], cv.halves_from_pb(request.messages),
            ordered=request.ordered)
        return cv.commit_outcome_to_pb(outcome)

    @grpc_errors
    def AbortTransaction(self, request: pb.AbortTransactionRequest,
                         context: grpc.ServicerContext) -> pb.AbortTransactionResponse:
        rolled, decided = self.service.abort_transaction(
            cv.cluster_from_pb(request.cluster), request.producer_group, cv.txn_from_pb(request.transaction),
            cv.halves_from_pb(request.messages))
        return pb.AbortTransactionResponse(rolled_back=rolled, decided=decided)

    @grpc_errors
    def SendBack(self, request: pb.SendBackRequest, context: grpc.ServicerContext) -> pb.SendBackResponse:
        self.service.send_back(cv.cluster_from_pb(request.cluster), request.consumer_group,
                               [cv.send_back_item_from_pb(i) for i in request.items])
        return pb.SendBackResponse()
