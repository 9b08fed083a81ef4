"""``SidecarClient``: the typed face of the sidecar's gRPC API for the Spark layer.

Methods mirror the RPCs with domain values (``MessageQueue``, ``QueueOffsets``, ...);
failed calls raise the rocketmq_spark error the sidecar reported (``status.from_status``).
Channels are cached per (process, address): Spark's Python workers call the sidecar for
every partition, and a forked worker must not reuse its parent's channel.
"""

from __future__ import annotations

import os
import threading
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence, TypeVar

import grpc
import pyarrow as pa

from rocketmq_spark.remoting.bodies import ConsumerData
from rocketmq_spark.remoting.compression import Compression
from rocketmq_spark.remoting.route import MessageQueue
from rocketmq_spark.sidecar import arrow, liveness, shm
from rocketmq_spark.sidecar import converters as cv
from rocketmq_spark.sidecar.model import (Indexed, DEFAULT_MAX_ROWS_PER_BATCH, DEFAULT_PULL_BATCH_SIZE,
                                          SIDECAR_GROUP, Cluster, CommitOutcome, HealthInfo, Outgoing,
                                          PullSpec, SendBackItem, TxnRef)
from rocketmq_spark.sidecar.errors import SidecarUnavailable
from rocketmq_spark.sidecar.address import GRPC_OPTIONS, parse_address
from rocketmq_spark.sidecar.status import from_status
from rocketmq_spark.sidecar.v1 import sidecar_pb2 as pb
from rocketmq_spark.sidecar.v1 import sidecar_pb2_grpc as pb_grpc
from rocketmq_spark.structs import HalfMessage, Message, QueueOffsets, SendResult

T = TypeVar("T")

_CHANNEL_OPTIONS = GRPC_OPTIONS + (
    # a restarted sidecar is reachable again quickly
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
    # gRPC shares subchannels between channels with the same arguments: a new channel would
    # inherit the dead sidecar's reconnect backoff and its last error, and fail at once
    ("grpc.use_local_subchannel_pool", 1),
)
_channels: dict[tuple[int, str], grpc.Channel] = {}
_channels_mutex = threading.Lock()

DEFAULT_TIMEOUT = 120.0
COMMIT_TIMEOUT = 3600.0      # a commit sends one END_TRANSACTION per message of a batch


def channel_for(target: str) -> grpc.Channel:
    """The process's shared channel to ``target`` (a gRPC target such as ``unix:/p`` or ``h:p``)."""
    key = (os.getpid(), target)
    with _channels_mutex:
        ch = _channels.get(key)
        if ch is None:
            ch = _channels[key] = grpc.insecure_channel(target, options=_CHANNEL_OPTIONS)
        return ch


def drop_channel(target: str, channel: grpc.Channel | None = None) -> None:
    """Forget the cached channel to ``target`` (only if it is ``channel``, when given), so
    the next client connects afresh instead of waiting out the channel's reconnect backoff.
    It is not closed: calls still running on it finish; it goes when its clients do."""
    key = (os.getpid(), target)
    with _channels_mutex:
        ch = _channels.get(key)
        if ch is not None and (channel is None or ch is channel):
            del _channels[key]


def _queues(qs: Iterable[MessageQueue]) -> list[pb.MessageQueue]:
    return [cv.queue_to_pb(q) for q in qs]


class SidecarClient:
    def __init__(self, address: str, *, timeout: float = DEFAULT_TIMEOUT,
                 channel: grpc.Channel | None = None) -> None:
        """``channel``: use this one instead of the process's shared channel."""
        self.address = str(parse_address(address))
        self.timeout = timeout
        self._shared = channel is None
        self._channel = channel if channel is not None else channel_for(self.address)
        self._stub = pb_grpc.SidecarStub(self._channel)

    def __repr__(self) -> str:
        return f"SidecarClient({self.address!r})"

    def _error(self, err: grpc.RpcError) -> Exception:
        exc = from_status(err, self.address)
        if (isinstance(exc, SidecarUnavailable) and self._shared
                and err.code() == grpc.StatusCode.UNAVAILABLE):
            drop_channel(self.address, self._channel)
        return exc

    def _call(self, method: Callable[..., T], request: Any, timeout: float | None = None) -> T:
        try:
            return method(request, timeout=timeout or self.timeout)
        except grpc.RpcError as err:
            raise self._error(err) from None

    # ------------------------------------------------------------ RPCs

    def health(self, *, timeout: float | None = None) -> HealthInfo:
        return cv.health_from_pb(self._call(self._stub.Health, pb.HealthRequest(), timeout))

    def get_queues(self, cluster: Cluster | str, topics: Sequence[str], *,
                   refresh: bool = False) -> list[MessageQueue]:
        r = self._call(self._stub.GetQueues, pb.GetQueuesRequest(
            cluster=cv.cluster_to_pb(Cluster.of(cluster)), topics=list(topics), refresh=refresh))
        return [cv.queue_from_pb(q) for q in r.queues]

    def get_offsets(self, cluster: Cluster | str, queues: Sequence[MessageQueue],
                    consumer_group: str | None = None, *, replica_reads: bool = False) -> list[QueueOffsets]:
        """Min, max (and with ``consumer_group`` committed) offsets; ``replica_reads``: the
        min and max from a slave of a broker whose master does not answer."""
        r = self._call(self._stub.GetOffsets, pb.GetOffsetsRequest(
            cluster=cv.cluster_to_pb(Cluster.of(cluster)), queues=_queues(queues),
            consumer_group=consumer_group or "", replica_reads=replica_reads))
        return [cv.queue_offsets_from_pb(o) for o in r.offsets]

    def search_offsets(self, cluster: Cluster | str, queues: Sequence[MessageQueue],
                       timestamp_ms: int) -> dict[MessageQueue, int]:
        r = self._call(self._stub.SearchOffsets, pb.SearchOffsetsRequest(
            cluster=cv.cluster_to_pb(Cluster.of(cluster)), queues=_queues(queues),
            timestamp_ms=timestamp_ms))
        return cv.offsets_map_from_pb(r.offsets)

    def query_messages(self, cluster: Cluster | str, topic: str, key: str, *, unique: bool = False,
                       max_num: int = 64, brokers: Sequence[str] = ()) -> dict[str, list[Indexed]]:
        """Broker name -> the records its index files under ``topic#key`` (QUERY_MESSAGE)."""
        r = self._call(self._stub.QueryMessages, pb.QueryMessagesRequest(
            cluster=cv.cluster_to_pb(Cluster.of(cluster)), topic=topic, key=key, unique=unique,
            max_num=max_num, brokers=list(brokers)))
        return {a.broker_name: [cv.indexed_from_pb(f) for f in a.found] for a in r.answers}

    def lock(self, cluster: Cluster | str, consumer_group: str, owner_id: str,
             queues: Sequence[MessageQueue], *, keep_renewed: bool = True) -> frozenset[MessageQueue]:
        """Lock ``queues`` for ``owner_id``; returns those granted now. With
        ``keep_renewed``, the sidecar renews them for as long as this process keeps calling
        (a lease), and stops at once when it sees this process gone (same host)."""
        r = self._call(self._stub.Lock, pb.LockRequest(
            cluster=cv.cluster_to_pb(Cluster.of(cluster)), consumer_group=consumer_group,
            owner_id=owner_id, queues=_queues(queues), keep_renewed=keep_renewed,
            holder=cv.holder_to_pb(liveness.current())))
        return frozenset(cv.queues_from_pb(r.locked))

    def unlock(self, cluster: Cluster | str, consumer_group: str, owner_id: str,
               queues: Sequence[MessageQueue] = ()) -> None:
        """Unlock ``queues`` (empty: every queue ``owner_id`` holds in the group)."""
        self._call(self._stub.Unlock, pb.UnlockRequest(
            cluster=cv.cluster_to_pb(Cluster.of(cluster)), consumer_group=consumer_group,
            owner_id=owner_id, queues=_queues(queues)))

    def register_consumer(self, cluster: Cluster | str, client_id: str, consumer: ConsumerData) -> None:
        """Keep ``client_id`` registered with the brokers as a consumer of its group, for as
        long as this process keeps calling (a lease) and runs."""
        self._call(self._stub.RegisterConsumer,
                   cv.consumer_to_pb(Cluster.of(cluster), client_id, consumer, liveness.current()))

    def unregister_consumer(self, cluster: Cluster | str, consumer_group: str, client_id: str) -> None:
        self._call(self._stub.UnregisterConsumer, pb.UnregisterConsumerRequest(
            cluster=cv.cluster_to_pb(Cluster.of(cluster)), consumer_group=consumer_group, client_id=client_id))

    def pull_chunks(self, cluster: Cluster | str, spec: PullSpec) -> Iterator[bytes]:
        """The raw Arrow IPC stream of a range, chunk by chunk."""
        stream = self._stub.Pull(cv.pull_request_to_pb(Cluster.of(cluster), spec))
        try:
            for chunk in stream:
                yield chunk.ipc
        except grpc.RpcError as err:
            raise self._error(err) from None
        finally:
            stream.cancel()     # no-op once the stream has ended

    def pull_batches(self, cluster: Cluster | str, queue: MessageQueue, start: int, end: int, *,
                     consumer_group: str = SIDECAR_GROUP, sub_expression: str = "*",
                     pull_batch_size: int = DEFAULT_PULL_BATCH_SIZE,
                     max_rows_per_batch: int = DEFAULT_MAX_ROWS_PER_BATCH,
                     fail_on_data_loss: bool = True,
                     restore_retry_topic_of: str | None = None,
                     shared_memory: bool | None = None,
                     broker_unavailable_timeout_ms: int = 0,
                     expression_type: str = "TAG") -> Iterator[pa.RecordBatch]:
        """Rows of ``[start, end)`` of ``queue`` (``arrow.SOURCE_SCHEMA``), decoded batch by
        batch as the stream arrives; an empty range yields nothing. ``shared_memory``
        (default: when the sidecar listens on a Unix socket, so shares this host) has the
        batches handed over as files in shared memory instead of bytes in the stream.
        ``broker_unavailable_timeout_ms``: how long the sidecar may wait for a broker that
        stops answering mid-range (going on where it was, on a slave while the master is
        away); 0 fails the read at once."""
        local = self.address.startswith("unix:") if shared_memory is None else shared_memory
        spec = PullSpec(queue, start, end, consumer_group or SIDECAR_GROUP, sub_expression,
                        pull_batch_size, max_rows_per_batch, fail_on_data_loss,
                        restore_retry_topic_of or None, shared_memory=local,
                        broker_unavailable_timeout_ms=broker_unavailable_timeout_ms,
                        expression_type=expression_type)
        if local:
            return self._shm_batches(cluster, spec)
        return arrow.read_ipc_chunks(self.pull_chunks(cluster, spec))

    def _shm_batches(self, cluster: Cluster | str, spec: PullSpec) -> Iterator[pa.RecordBatch]:
        stream = self._stub.Pull(cv.pull_request_to_pb(Cluster.of(cluster), spec))
        files = shm.FileReader()          # hands each file back once its batches are gone
        try:
            for chunk in stream:
                yield from files.take(chunk.shm_path)
        except grpc.RpcError as err:
            raise self._error(err) from None
        finally:
            stream.cancel()
            files.close()

    def commit_offsets(self, cluster: Cluster | str, consumer_group: str,
                       offsets: Mapping[MessageQueue, int]) -> None:
        self._call(self._stub.CommitOffsets, pb.CommitOffsetsRequest(
            cluster=cv.cluster_to_pb(Cluster.of(cluster)), consumer_group=consumer_group,
            offsets=cv.offsets_map_to_pb(offsets)))

    def send(self, cluster: Cluster | str, messages: Sequence[Message | Outgoing], *,
             producer_group: str | None = None, transaction_tag: str | None = None,
             broker_unavailable_timeout_ms: int = 0,
             compression: Compression | None = None) -> list[SendResult]:
        """Send ``messages`` (``Outgoing`` to give a sharding key); results in order. With
        ``transaction_tag`` (``TxnTag.encode()``) as half messages, for exactly-once writes.
        ``broker_unavailable_timeout_ms``: how long a keyed or half message waits for a
        broker that cannot be reached. ``compression``: None, the Java producer's default."""
        items = [m if isinstance(m, Outgoing) else Outgoing(m) for m in messages]
        r = self._call(self._stub.Send, pb.SendRequest(
            cluster=cv.cluster_to_pb(Cluster.of(cluster)), producer_group=producer_group or "",
            messages=[cv.out_message_to_pb(o) for o in items], transaction_tag=transaction_tag or "",
            broker_unavailable_timeout_ms=broker_unavailable_timeout_ms,
            compression=cv.compression_to_pb(compression) if compression is not None else None),
            timeout=self.timeout + broker_unavailable_timeout_ms / 1000)
        return [cv.send_result_from_pb(x) for x in r.results]

    def commit_transaction(self, cluster: Cluster | str, producer_group: str, txn: TxnRef,
                           tasks: Sequence[tuple[int, int]], halves: Sequence[HalfMessage], *,
                           ordered: bool = True) -> CommitOutcome:
        """Decide ``txn``'s batch for this attempt (unless another attempt decided it first)
        and commit the deciding attempt's half messages, each once (``ordered``: each
        queue's one at a time, in order)."""
        r = self._call(self._stub.CommitTransaction, pb.CommitTransactionRequest(
            cluster=cv.cluster_to_pb(Cluster.of(cluster)), producer_group=producer_group,
            transaction=cv.txn_to_pb(txn),
            tasks=[pb.TaskAttempt(partition=p, attempt=a) for p, a in tasks],
            messages=cv.halves_to_pb(halves), ordered=ordered), timeout=COMMIT_TIMEOUT)
        return cv.commit_outcome_from_pb(r)

    def abort_transaction(self, cluster: Cluster | str, producer_group: str, txn: TxnRef,
                          halves: Sequence[HalfMessage]) -> tuple[int, bool]:
        """Roll ``halves`` back unless the batch was decided for this attempt:
        (rolled back, decided)."""
        r = self._call(self._stub.AbortTransaction, pb.AbortTransactionRequest(
            cluster=cv.cluster_to_pb(Cluster.of(cluster)), producer_group=producer_group,
            transaction=cv.txn_to_pb(txn), messages=cv.halves_to_pb(halves)), timeout=COMMIT_TIMEOUT)
        return r.rolled_back, r.decided

    def send_back(self, cluster: Cluster | str, consumer_group: str,
                  items: Sequence[SendBackItem]) -> None:
        self._call(self._stub.SendBack, pb.SendBackRequest(
            cluster=cv.cluster_to_pb(Cluster.of(cluster)), consumer_group=consumer_group,
            items=[cv.send_back_item_to_pb(i) for i in items]))
