"""One function per message: protobuf (``v1.sidecar_pb2``) <-> domain values.

Protobuf has no null: an empty string means "not set" for optional text fields, and
``QueueOffsets.has_committed`` carries what ``committed is None`` means in the domain.
"""

from __future__ import annotations

from typing import Iterable, Mapping

from rocketmq_spark.errors import ConfigError
from rocketmq_spark.remoting.bodies import (CONSUME_FROM, EXPRESSION_TYPES, MESSAGE_MODELS, ConsumerData,
                                            SubscriptionData)
from rocketmq_spark.remoting.compression import DEFAULT_COMPRESSION, Compression
from rocketmq_spark.remoting.message import PROP_UNIQ_KEY, MessageExt
from rocketmq_spark.remoting.route import MessageQueue
from rocketmq_spark.sidecar.liveness import ProcessRef
from rocketmq_spark.sidecar.model import (
    Indexed,
    DEFAULT_MAX_RECONSUME_TIMES, DEFAULT_MAX_ROWS_PER_BATCH, DEFAULT_PULL_BATCH_SIZE, DEFAULT_REQUEST_TIMEOUT_MS,
    SIDECAR_GROUP, Cluster, CommitOutcome, HealthInfo, Outgoing, PullSpec, SendBackItem, TxnRef)
from rocketmq_spark.sidecar.v1 import sidecar_pb2 as pb
from rocketmq_spark.structs import HalfMessage, Message, QueueOffsets, SendResult
from rocketmq_spark.tls import TlsSettings, Verify


def _opt(text: str) -> str | None:
    return text or None


# ---------------------------------------------------------------- cluster and queues

def tls_from_pb(t: pb.Tls) -> TlsSettings:
    return TlsSettings(ca_file=_opt(t.ca_file), cert_file=_opt(t.cert_file), key_file=_opt(t.key_file),
                       key_password=_opt(t.key_password), verify=Verify(t.verify or Verify.FULL.value))


def tls_to_pb(t: TlsSettings) -> pb.Tls:
    return pb.Tls(ca_file=t.ca_file or "", cert_file=t.cert_file or "", key_file=t.key_file or "",
                  key_password=t.key_password or "", verify=t.verify.value)


def cluster_from_pb(c: pb.Cluster) -> Cluster:
    return Cluster(c.name_server, _opt(c.access_key), _opt(c.secret_key),
                   tls_from_pb(c.tls) if c.HasField("tls") else None,
                   c.request_timeout_ms or DEFAULT_REQUEST_TIMEOUT_MS)


def cluster_to_pb(c: Cluster) -> pb.Cluster:
    out = pb.Cluster(name_server=c.name_server, access_key=c.access_key or "",
                     secret_key=c.secret_key or "", request_timeout_ms=c.request_timeout_ms)
    if c.tls is not None:
        out.tls.CopyFrom(tls_to_pb(c.tls))
    return out


def queue_from_pb(q: pb.MessageQueue) -> MessageQueue:
    if not q.topic or not q.broker_name or q.queue_id < 0:
        raise ConfigError(f"incomplete message queue: topic={q.topic!r} "
                          f"broker_name={q.broker_name!r} queue_id={q.queue_id}")
    return MessageQueue(q.topic, q.broker_name, q.queue_id)


def queue_to_pb(q: MessageQueue) -> pb.MessageQueue:
    return pb.MessageQueue(topic=q.topic, broker_name=q.broker_name, queue_id=q.queue_id)


def queues_from_pb(qs: Iterable[pb.MessageQueue]) -> list[MessageQueue]:
    return [queue_from_pb(q) for q in qs]


# ---------------------------------------------------------------- locks

def holder_to_pb(r: ProcessRef | None) -> pb.ProcessRef | None:
    if r is None:
        return None
    return pb.ProcessRef(boot_id=r.boot_id, pid_namespace=r.pid_namespace, pid=r.pid,
                         start_ticks=r.start_ticks)


def holder_from_pb(r: pb.LockRequest | pb.RegisterConsumerRequest) -> ProcessRef | None:
    """The request's holder, None when the caller named none."""
    if not r.HasField("holder"):
        return None
    h = r.holder
    return ProcessRef(h.boot_id, h.pid_namespace, h.pid, h.start_ticks)


# ---------------------------------------------------------------- consumers

def _one_of(value: str, allowed: Iterable[str], what: str) -> str:
    if value not in allowed:
        raise ConfigError(f"{what} {value!r} is not one of {', '.join(allowed)}")
    return value


def consumer_from_pb(r: pb.RegisterConsumerRequest) -> ConsumerData:
    """A query's consumer, as it heartbeats: it pulls (CONSUME_ACTIVELY)."""
    return ConsumerData(
        r.consumer_group, "CONSUME_ACTIVELY",
        _one_of(r.message_model or "CLUSTERING", MESSAGE_MODELS, "message_model"),
        _one_of(r.consume_from_where or "CONSUME_FROM_LAST_OFFSET", CONSUME_FROM, "consume_from_where"),
        tuple(SubscriptionData(s.topic, s.expression or "*", 0,
                               _one_of(s.expression_type or "TAG", EXPRESSION_TYPES, "expression_type"))
              for s in r.subscriptions))


def consumer_to_pb(cluster: Cluster, client_id: str, c: ConsumerData,
                   holder: ProcessRef | None) -> pb.RegisterConsumerRequest:
    return pb.RegisterConsumerRequest(
        cluster=cluster_to_pb(cluster), consumer_group=c.group_name, client_id=client_id,
        message_model=c.message_model, consume_from_where=c.consume_from_where,
        subscriptions=[pb.Subscription(topic=s.topic, expression=s.sub_string, expression_type=s.expression_type)
                       for s in c.subscriptions],
        holder=holder_to_pb(holder))


# ---------------------------------------------------------------- health

def health_to_pb(h: HealthInfo) -> pb.HealthResponse:
    return pb.HealthResponse(version=h.version, api=h.api, pid=h.pid, uptime_ms=h.uptime_ms)


def health_from_pb(h: pb.HealthResponse) -> HealthInfo:
    return HealthInfo(h.version, h.api, h.pid, h.uptime_ms)


# ---------------------------------------------------------------- offsets

def queue_offsets_to_pb(o: QueueOffsets) -> pb.QueueOffsets:
    return pb.QueueOffsets(queue=queue_to_pb(o.queue), min_offset=o.min_offset,
                           max_offset=o.max_offset, has_committed=o.committed is not None,
                           committed=o.committed or 0)


def queue_offsets_from_pb(o: pb.QueueOffsets) -> QueueOffsets:
    return QueueOffsets(queue_from_pb(o.queue), o.min_offset, o.max_offset,
                        o.committed if o.has_committed else None)


def queue_offset_to_pb(q: MessageQueue, offset: int) -> pb.QueueOffset:
    return pb.QueueOffset(queue=queue_to_pb(q), offset=offset)


def queue_offset_from_pb(o: pb.QueueOffset) -> tuple[MessageQueue, int]:
    if o.offset < 0:
        raise ConfigError(f"negative offset {o.offset} for queue {o.queue.topic}/"
                          f"{o.queue.broker_name}/{o.queue.queue_id}")
    return queue_from_pb(o.queue), o.offset


def offsets_map_from_pb(os: Iterable[pb.QueueOffset]) -> dict[MessageQueue, int]:
    return dict(queue_offset_from_pb(o) for o in os)


def offsets_map_to_pb(offsets: Mapping[MessageQueue, int]) -> list[pb.QueueOffset]:
    return [queue_offset_to_pb(q, o) for q, o in offsets.items()]


# ---------------------------------------------------------------- pull

def pull_spec_from_pb(r: pb.PullRequest) -> PullSpec:
    return PullSpec(queue=queue_from_pb(r.queue), start=r.start_offset, end=r.end_offset,
                    group=r.consumer_group or SIDECAR_GROUP,
                    sub_expression=r.sub_expression or "*",
                    expression_type=_one_of(r.expression_type or "TAG", EXPRESSION_TYPES, "expression_type"),
                    pull_batch_size=r.pull_batch_size or DEFAULT_PULL_BATCH_SIZE,
                    max_rows_per_batch=r.max_rows_per_batch or DEFAULT_MAX_ROWS_PER_BATCH,
                    fail_on_data_loss=r.fail_on_data_loss,
                    restore_retry_topic_of=_opt(r.restore_retry_topic_of),
                    shared_memory=r.shared_memory,
                    broker_unavailable_timeout_ms=r.broker_unavailable_timeout_ms)


def pull_request_to_pb(cluster: Cluster, s: PullSpec) -> pb.PullRequest:
    return pb.PullRequest(cluster=cluster_to_pb(cluster), consumer_group=s.group,
                          queue=queue_to_pb(s.queue), start_offset=s.start, end_offset=s.end,
                          sub_expression=s.sub_expression, expression_type=s.expression_type,
                          pull_batch_size=s.pull_batch_size,
                          max_rows_per_batch=s.max_rows_per_batch,
                          fail_on_data_loss=s.fail_on_data_loss,
                          restore_retry_topic_of=s.restore_retry_topic_of or "",
                          shared_memory=s.shared_memory,
                          broker_unavailable_timeout_ms=s.broker_unavailable_timeout_ms)


# ---------------------------------------------------------------- send

def out_message_from_pb(m: pb.OutMessage) -> Outgoing:
    if not m.topic:
        raise ConfigError("a message to send has an empty topic")
    msg = Message(topic=m.topic, body=m.body, tags=_opt(m.tags), keys=_opt(m.keys),
                  properties=dict(m.properties), delay_level=m.delay_level)
    return Outgoing(msg, _opt(m.sharding_key))


def out_message_to_pb(o: Outgoing) -> pb.OutMessage:
    m = o.message
    return pb.OutMessage(topic=m.topic, body=m.body, tags=m.tags or "", keys=m.keys or "",
                         properties=dict(m.properties), sharding_key=o.sharding_key or "",
                         delay_level=m.delay_level)


def compression_from_pb(r: pb.SendRequest) -> Compression:
    if not r.HasField("compression"):
        return DEFAULT_COMPRESSION
    try:
        return Compression(r.compression.codec or DEFAULT_COMPRESSION.codec, r.compression.over_bytes)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def compression_to_pb(c: Compression) -> pb.Compression:
    return pb.Compression(codec=c.codec, over_bytes=c.over_bytes)


def send_result_to_pb(r: SendResult) -> pb.SendResult:
    return pb.SendResult(status=r.status, msg_id=r.msg_id, offset_msg_id=r.offset_msg_id,
                         queue=queue_to_pb(r.queue), queue_offset=r.queue_offset)


def send_result_from_pb(r: pb.SendResult) -> SendResult:
    return SendResult(r.status, r.msg_id, r.offset_msg_id, queue_from_pb(r.queue), r.queue_offset)


# ---------------------------------------------------------------- exactly-once writes

def txn_from_pb(t: pb.Transaction) -> TxnRef:
    if not t.log_topic:
        raise ConfigError("a transaction needs its log topic")
    return TxnRef(t.log_topic, t.transactional_id, t.batch_id, t.epoch)


def txn_to_pb(t: TxnRef) -> pb.Transaction:
    return pb.Transaction(log_topic=t.log_topic, transactional_id=t.txn_id, batch_id=t.batch,
                          epoch=t.epoch)


def halves_from_pb(groups: Iterable[pb.HalfMessages]) -> list[HalfMessage]:
    out: list[HalfMessage] = []
    for g in groups:
        q = queue_from_pb(g.queue)
        n = len(g.commit_log_offsets)
        if len(g.tran_state_table_offsets) != n or len(g.msg_ids) != n:
            raise ConfigError(f"half messages of {q.topic}/{q.broker_name}/{q.queue_id}: "
                              f"{n} commit-log offsets, {len(g.tran_state_table_offsets)} table "
                              f"offsets and {len(g.msg_ids)} ids")
        out.extend(HalfMessage(q, c, t, m) for c, t, m in
                   zip(g.commit_log_offsets, g.tran_state_table_offsets, g.msg_ids))
    return out


def halves_to_pb(halves: Iterable[HalfMessage]) -> list[pb.HalfMessages]:
    """Grouped by queue, each queue's in the given order."""
    groups: dict[MessageQueue, pb.HalfMessages] = {}
    for h in halves:
        g = groups.get(h.queue)
        if g is None:
            g = groups[h.queue] = pb.HalfMessages(queue=queue_to_pb(h.queue))
        g.commit_log_offsets.append(h.commit_log_offset)
        g.tran_state_table_offsets.append(h.tran_state_table_offset)
        g.msg_ids.append(h.msg_id)
    return list(groups.values())


def commit_outcome_to_pb(o: CommitOutcome) -> pb.CommitTransactionResponse:
    return pb.CommitTransactionResponse(decided_epoch=o.decided_epoch, committed=o.committed,
                                        rolled_back=o.rolled_back, recovered=o.recovered)


def commit_outcome_from_pb(r: pb.CommitTransactionResponse) -> CommitOutcome:
    return CommitOutcome(r.decided_epoch, r.committed, r.rolled_back, r.recovered)


# ---------------------------------------------------------------- send back

def send_back_item_from_pb(i: pb.SendBackItem) -> SendBackItem:
    if i.commit_log_offset <= 0 and not i.offset_msg_id:
        raise ConfigError("a send-back item needs commit_log_offset or offset_msg_id")
    return SendBackItem(commit_log_offset=i.commit_log_offset, offset_msg_id=i.offset_msg_id,
                        broker_name=i.broker_name, origin_msg_id=i.origin_msg_id,
                        origin_topic=i.origin_topic, delay_level=i.delay_level,
                        max_reconsume_times=i.max_reconsume_times or DEFAULT_MAX_RECONSUME_TIMES)


def send_back_item_to_pb(i: SendBackItem) -> pb.SendBackItem:
    return pb.SendBackItem(broker_name=i.broker_name, commit_log_offset=i.commit_log_offset,
                           offset_msg_id=i.offset_msg_id, origin_msg_id=i.origin_msg_id,
                           origin_topic=i.origin_topic, delay_level=i.delay_level,
                           max_reconsume_times=i.max_reconsume_times)


def indexed_to_pb(broker_name: str, m: MessageExt) -> pb.IndexedMessage:
    return pb.IndexedMessage(queue=queue_to_pb(MessageQueue(m.topic, broker_name, m.queue_id)),
                             queue_offset=m.queue_offset, keys=m.keys or "", has_keys=m.keys is not None,
                             uniq_key=m.properties.get(PROP_UNIQ_KEY, ""), offset_msg_id=m.offset_msg_id)


def indexed_from_pb(f: pb.IndexedMessage) -> Indexed:
    return Indexed(queue_from_pb(f.queue), f.queue_offset, f.keys if f.has_keys else None,
                   f.uniq_key or None, f.offset_msg_id)
