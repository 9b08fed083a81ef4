"""MQClient: every broker/NameServer operation the project needs, over one Transport.

THIS FILE IS THE CONTRACT other layers code against. Signatures are fixed (methods and
keyword parameters with defaults may be added). Errors: BrokerError(code, remark,
retriable) for non-success answers, TransportError/RequestTimeout for I/O, ValueError
for bad arguments. One MQClient is safe to share between threads.

How it works: NameServer calls go through ``routes.NameServers`` (failover in turn) and
routes are cached by ``routes.RouteCache``; broker calls go to the master of the queue's
broker (found in the topic's route, else in any cached route, else in the cluster info);
``producer`` and ``pull`` build the requests and read the answers; ``transport`` does the
I/O and signs every request when ACL credentials are configured.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections import defaultdict
from typing import Callable, Iterable, Mapping, Sequence

from rocketmq_spark.client import admin, producer
from rocketmq_spark.client.busy import BUSY_TIMEOUT, while_busy
from rocketmq_spark.client import pull as pull_codec
from rocketmq_spark.client import readable
from rocketmq_spark.client.acl import Signer
from rocketmq_spark.client.calls import check, request
from rocketmq_spark.client.config import ClientConfig
from rocketmq_spark.client.direct import DirectConnection, DirectPuller
from rocketmq_spark.client.ids import UniqIdGenerator
from rocketmq_spark.client.routes import NameServers, RouteCache
from rocketmq_spark.client.transport import PendingCall, RequestHandler, Transport
from rocketmq_spark.errors import BrokerError, ConfigError, RemoteProtocolError, RequestTimeout, TransportError
from rocketmq_spark.remoting.bodies import (
    CheckClientRequestBody, ConsumeStats, ConsumerData, HeartbeatData, SubscriptionData, LockBatchBody, decode_consumer_list,
    decode_lock_ok, subscription_group_body)
from rocketmq_spark.remoting.codes import DEFAULT_TOPIC, Perm, RequestCode, ResponseCode
from rocketmq_spark.remoting.command import RemotingCommand
from rocketmq_spark.remoting import timer
from rocketmq_spark.remoting.compression import DEFAULT_COMPRESSION, Compression
from rocketmq_spark.remoting.headers import (
    ConsumerSendMsgBackRequestHeader, CreateTopicRequestHeader, GetConsumerListRequestHeader,
    GetConsumeStatsRequestHeader, OffsetResponseHeader, QueryConsumerOffsetRequestHeader,
    QueryMessageRequestHeader, UNIQUE_KEY_QUERY,
    QueueRequestHeader, SearchOffsetRequestHeader, TimestampResponseHeader, TopicRequestHeader,
    UnregisterClientRequestHeader, UpdateConsumerOffsetRequestHeader, ViewMessageRequestHeader)
from rocketmq_spark.remoting.message import (
    PROP_RETRY_TOPIC, MessageExt, decode_message, decode_messages, parse_offset_msg_id)
from rocketmq_spark.remoting.route import MASTER_ID, MessageQueue, TopicRouteData
from rocketmq_spark.structs import HalfMessage, Message, PullResult, SendResult

log = logging.getLogger(__name__)

DEFAULT_PRODUCER_GROUP = "rocketmq_spark_producer"
DIRECT_IDLE = 4          # idle direct pull connections kept per broker
DIRECT_MAX_IDLE = 60.0   # seconds; brokers close connections idle for 120 s
_SEND_FAILOVER = (BrokerError, TransportError)


class MQClient:
    def __init__(self, config: ClientConfig, *, clock: Callable[[], float] = time.monotonic,
                 compression: Compression = DEFAULT_COMPRESSION, send_retries: int = 2,
                 busy_timeout: float = BUSY_TIMEOUT, transport: Transport | None = None) -> None:
        self.config = config
        if bool(config.access_key) != bool(config.secret_key):
            missing = "secret_key" if config.access_key else "access_key"
            raise ConfigError(f"ACL needs both access_key and secret_key; {missing} is not set")
        signer = Signer(config.access_key, config.secret_key) \
            if config.access_key and config.secret_key else None
        if config.request_timeout <= 0:
            raise ConfigError(f"request_timeout must be positive, got {config.request_timeout}")
        self.compression = compression
        self._broker_releases: dict[str, tuple[int, ...]] = {}
        self._broker_timers: dict[str, bool] = {}
        self.send_retries = send_retries
        self.busy_timeout = busy_timeout
        self._transport = transport or Transport(
            connect_timeout=config.request_timeout,
            tls=config.tls.context() if config.tls is not None else None)
        if signer is not None:
            self._transport.rpc_hook = signer
        self._ns = NameServers(config.name_servers, self._transport.invoke, config.request_timeout)
        self._routes = RouteCache(self._ns, ttl=config.route_ttl, clock=clock)
        self._clock = clock
        self._ids = UniqIdGenerator()
        self._lock = threading.Lock()
        self._round_robin: dict[str, itertools.count[int]] = {}
        self._pull_broker_id: dict[MessageQueue, int] = {}
        self._unreachable = readable.Unreachable(clock)
        self._read_addrs: dict[str, Mapping[int, str]] = {}   # broker name -> last addresses read from
        self._direct_idle: dict[str, list[DirectConnection]] = {}
        self._closed = False

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle = [c for conns in self._direct_idle.values() for c in conns]
            self._direct_idle.clear()
        for conn in idle:
            conn.close()
        self._transport.close()

    def __enter__(self) -> "MQClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------ plumbing

    @property
    def transport(self) -> Transport:
        return self._transport

    def invoke(self, address: str, code: int, ext: dict[str, str] | None = None, body: bytes = b"",
               *, timeout: float | None = None) -> RemotingCommand:
        """Any request to ``address``; the answer if SUCCESS, else BrokerError."""
        return self._call(address, request(code, ext, body), timeout=timeout)

    def set_request_handler(self, code: int, handler: RequestHandler | None) -> None:
        """Handle requests the servers send us (e.g. NOTIFY_CONSUMER_IDS_CHANGED, 40)."""
        self._transport.register_handler(code, handler)

    def _call(self, address: str, cmd: RemotingCommand, *, timeout: float | None = None,
              ok: Iterable[int] = (ResponseCode.SUCCESS,)) -> RemotingCommand:
        response = self._transport.invoke(address, cmd, timeout or self.config.request_timeout)
        return check(response, cmd.code, address, frozenset(ok))

    def _namesrv(self, code: int) -> RemotingCommand:
        return self._ns.checked(request(code))[0]

    # ------------------------------------------------------------ routes

    def route(self, topic: str, *, refresh: bool = False) -> TopicRouteData:
        return self._routes.get(topic, refresh=refresh)

    def subscribe_queues(self, topic: str, *, refresh: bool = False) -> list[MessageQueue]:
        return self.route(topic, refresh=refresh).subscribe_queues(topic)

    def publish_queues(self, topic: str, *, refresh: bool = False) -> list[MessageQueue]:
        return self.route(topic, refresh=refresh).publish_queues(topic)

    def master_addr(self, topic: str, broker_name: str) -> str:
        """The master of ``broker_name``: from the topic's route (refreshed once if it lacks
        the broker), else any cached route, else the cluster info."""
        if topic:
            try:
                addr = self.route(topic).master_addr(broker_name) \
                    or self.route(topic, refresh=True).master_addr(broker_name)
                if addr:
                    return addr
            except BrokerError as exc:
                if exc.code != ResponseCode.TOPIC_NOT_EXIST:
                    raise
        addr = self._routes.masters().get(broker_name) or self.cluster_brokers().get(broker_name)
        if addr:
            return addr
        raise BrokerError(ResponseCode.SERVICE_NOT_AVAILABLE,
                          f"no master address known for broker {broker_name!r} (topic {topic!r})")

    def topic_list(self) -> list[str]:
        return admin.decode_topic_list(self._namesrv(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER).body)

    def cluster_brokers(self) -> dict[str, str]:   # broker name -> master address
        return admin.decode_cluster_masters(self._namesrv(RequestCode.GET_BROKER_CLUSTER_INFO).body)

    def cluster_addresses(self) -> dict[str, dict[int, str]]:   # broker name -> id -> address
        return admin.decode_cluster_addresses(self._namesrv(RequestCode.GET_BROKER_CLUSTER_INFO).body)

    # ------------------------------------------------------------ send

    def send(self, message: Message, *, queue: MessageQueue | None = None,
             producer_group: str = DEFAULT_PRODUCER_GROUP, timeout: float | None = None) -> SendResult:
        uniq = producer.uniq_key_of(message) or self._ids.next_id()
        producer.validate(message)

        def attempt(mq: MessageQueue) -> SendResult:
            addr = self._timed_to(self.master_addr(mq.topic, mq.broker_name), message)
            cmd = producer.send_request(message, queue_id=mq.queue_id, producer_group=producer_group,
                                        uniq_key=uniq, born_timestamp=_now_ms(),
                                        compression=self._codec_for(addr, self.compression))
            response = self._transport.invoke(addr, cmd, timeout or self.config.request_timeout)
            return producer.send_result(response, queue=mq, msg_id=uniq, address=addr,
                                        request_code=cmd.code)

        return self._with_failover(message.topic, queue, attempt)

    def send_batch(self, messages: Sequence[Message], *, queue: MessageQueue | None = None,
                   producer_group: str = DEFAULT_PRODUCER_GROUP) -> SendResult:
        topic = producer.validate_batch(messages)
        uniqs = [producer.uniq_key_of(m) or self._ids.next_id() for m in messages]
        msg_id = ",".join(uniqs)

        def attempt(mq: MessageQueue) -> SendResult:
            addr = self.master_addr(mq.topic, mq.broker_name)
            cmd = producer.batch_request(messages, queue_id=mq.queue_id, producer_group=producer_group,
                                         uniq_keys=uniqs, born_timestamp=_now_ms(),
                                         compression=self._codec_for(addr, self.compression))
            response = self._transport.invoke(addr, cmd, self.config.request_timeout)
            return producer.send_result(response, queue=mq, msg_id=msg_id, address=addr,
                                        request_code=cmd.code)

        return self._with_failover(topic, queue, attempt)

    def send_oneway(self, message: Message, *, queue: MessageQueue | None = None,
                    producer_group: str = DEFAULT_PRODUCER_GROUP) -> None:
        uniq = producer.uniq_key_of(message) or self._ids.next_id()
        producer.validate(message)
        mq = queue or self._select_queue(message.topic, self.send_queues(message.topic), None)
        addr = self._timed_to(self.master_addr(mq.topic, mq.broker_name), message)
        cmd = producer.send_request(message, queue_id=mq.queue_id, producer_group=producer_group,
                                    uniq_key=uniq, born_timestamp=_now_ms(),
                                    compression=self._codec_for(addr, self.compression))
        self._transport.invoke_oneway(addr, cmd, self.config.request_timeout)

    def _with_failover(self, topic: str, queue: MessageQueue | None,
                       attempt: Callable[[MessageQueue], SendResult]) -> SendResult:
        """``queue``, again while its broker answers busy (nothing stored), for at most
        ``busy_timeout`` seconds; without a queue, round robin with up to ``send_retries``
        more attempts on another broker after a retriable failure, busy included, as Java's
        producer does (not after a timeout: the message may be stored), and the last
        attempt again while its broker answers busy."""
        if queue is not None:
            if queue.topic != topic:
                raise ValueError(f"queue {queue} is not a queue of topic {topic!r}")
            return while_busy(lambda: attempt(queue), timeout=self.busy_timeout)
        candidates = self.send_queues(topic)
        avoid: str | None = None
        for n in range(self.send_retries + 1):
            mq = self._select_queue(topic, candidates, avoid)
            try:
                if n == self.send_retries:
                    return while_busy(lambda: attempt(mq), timeout=self.busy_timeout)
                return attempt(mq)
            except _SEND_FAILOVER as exc:
                if not exc.retriable or isinstance(exc, RequestTimeout) or n == self.send_retries:
                    raise
                log.info("send to %s failed (%s); retrying on another queue", mq, exc)
                avoid = mq.broker_name
        raise AssertionError("unreachable")

    def send_queues(self, topic: str, *, keyed: bool = False) -> list[MessageQueue]:
        """The queues a send to ``topic`` may go to, sorted: its publish queues, or, for a
        topic that has no route yet, TBW102's writable brokers with min(4, queues) queues
        each, on which the broker creates the topic at the first send (what the Java
        producer does; a sharding key picks among these too). ``keyed``: the queues a
        sharding key picks among, which include those of a broker whose master is away (the
        key keeps its queue and waits; the list must not change with the outage)."""
        try:
            queues = self.route(topic).publish_queues(topic, without_master=keyed)
        except BrokerError as exc:
            if exc.code != ResponseCode.TOPIC_NOT_EXIST:
                raise
            try:
                default = self.route(DEFAULT_TOPIC)
            except BrokerError:
                raise exc from None
            queues = sorted(MessageQueue(topic, qd.broker_name, i) for qd in default.queue_datas
                            if qd.perm & Perm.WRITE and default.master_addr(qd.broker_name)
                            for i in range(min(producer.DEFAULT_TOPIC_QUEUE_NUMS, qd.read_queue_nums)))
            if not queues:
                raise exc from None
        if not queues:
            raise BrokerError(ResponseCode.NO_PERMISSION, f"topic {topic!r} has no writable queue")
        return queues

    def _select_queue(self, topic: str, candidates: list[MessageQueue], avoid: str | None) -> MessageQueue:
        with self._lock:
            counter = self._round_robin.setdefault(topic, itertools.count())
        start = next(counter)
        for i in range(len(candidates)):
            mq = candidates[(start + i) % len(candidates)]
            if mq.broker_name != avoid:
                return mq
        return candidates[start % len(candidates)]

    # ------------------------------------------------------------ transactions

    def send_async(self, message: Message, *, queue: MessageQueue,
                   producer_group: str = DEFAULT_PRODUCER_GROUP, transactional: bool = False,
                   timeout: float | None = None,
                   compression: Compression | None = None) -> "PendingSend":
        """``send`` to ``queue`` sent now, answered later (several can be in flight); with
        ``transactional`` as a half message, which the broker holds until END_TRANSACTION
        (``HalfMessage.of(result)`` names it). ``compression``: this send's, instead of the
        client's."""
        uniq = producer.uniq_key_of(message) or self._ids.next_id()
        addr = self._timed_to(self.master_addr(queue.topic, queue.broker_name), message)
        cmd = producer.send_request(message, queue_id=queue.queue_id, producer_group=producer_group,
                                    uniq_key=uniq, born_timestamp=_now_ms(),
                                    compression=self._codec_for(addr, compression or self.compression),
                                    transactional=transactional)
        call = self._transport.submit(addr, cmd, timeout or self.config.request_timeout)
        return PendingSend(call, queue, uniq, addr, cmd.code)

    def send_batch_async(self, messages: Sequence[Message], *, queue: MessageQueue,
                         producer_group: str = DEFAULT_PRODUCER_GROUP,
                         timeout: float | None = None,
                         compression: Compression | None = None) -> "PendingSend":
        """``send_batch`` to ``queue`` sent now, answered later (several can be in flight)."""
        producer.validate_batch(messages)
        uniqs = [producer.uniq_key_of(m) or self._ids.next_id() for m in messages]
        addr = self.master_addr(queue.topic, queue.broker_name)
        cmd = producer.batch_request(messages, queue_id=queue.queue_id, producer_group=producer_group,
                                     uniq_keys=uniqs, born_timestamp=_now_ms(),
                                     compression=self._codec_for(addr, compression or self.compression))
        call = self._transport.submit(addr, cmd, timeout or self.config.request_timeout)
        return PendingSend(call, queue, ",".join(uniqs), addr, cmd.code)

    def end_transaction(self, half: HalfMessage, state: int, *, producer_group: str,
                        from_check: bool = False, transaction_id: str | None = None,
                        oneway: bool = False, address: str | None = None,
                        timeout: float | None = None) -> "PendingCall | None":
        """END_TRANSACTION of ``half`` on its broker (or at ``address``): sent now; the
        returned call's ``result()`` is the answer (BrokerError for a refusal, checked by
        ``check_end_transaction``). ``oneway`` waits for nothing (as the Java producer
        sends it): None. Every COMMIT of the same half message delivers it once more."""
        addr = address or self.master_addr(half.queue.topic, half.queue.broker_name)
        cmd = producer.end_transaction_request(half, state, producer_group=producer_group,
                                               from_check=from_check, transaction_id=transaction_id)
        if oneway:
            self._transport.invoke_oneway(addr, cmd, timeout or self.config.request_timeout)
            return None
        return self._transport.submit(addr, cmd, timeout or self.config.request_timeout)

    @staticmethod
    def check_end_transaction(call: PendingCall, address: str) -> None:
        """Wait for an END_TRANSACTION answer; BrokerError unless SUCCESS."""
        check(call.result(), RequestCode.END_TRANSACTION, address)

    # ------------------------------------------------------------ pull

    def pull(self, queue: MessageQueue, offset: int, *, group: str, max_nums: int = 32,
             expression: str = "*", commit_offset: int | None = None, suspend_ms: int = 0,
             timeout: float | None = None, decode: bool = True, expression_type: str = "TAG") -> PullResult:
        return self.pull_async(queue, offset, group=group, max_nums=max_nums, expression=expression,
                               commit_offset=commit_offset, suspend_ms=suspend_ms, timeout=timeout,
                               decode=decode, expression_type=expression_type).result()

    def pull_async(self, queue: MessageQueue, offset: int, *, group: str, max_nums: int = 32,
                   expression: str = "*", commit_offset: int | None = None, suspend_ms: int = 0,
                   timeout: float | None = None, decode: bool = True,
                   expression_type: str = "TAG") -> "PendingPull":
        """``pull`` sent now, answered later: several pulls of a queue can be in flight."""
        broker_id, addr = self._pull_address(queue)
        cmd = pull_codec.pull_request(queue, offset, group=group, max_nums=max_nums,
                                      expression=expression, commit_offset=commit_offset,
                                      suspend_ms=suspend_ms, allow_commit=broker_id == MASTER_ID,
                                      expression_type=expression_type)
        if timeout is None:
            timeout = pull_codec.pull_timeout(suspend_ms, self.config.request_timeout)
        return PendingPull(self, queue, self._transport.submit(addr, cmd, timeout), expression, addr, decode,
                           expression_type)

    def direct_puller(self, queue: MessageQueue, *, fresh: bool = False) -> "DirectPuller":
        """Pulls of ``queue``'s broker over a connection of their own, answered in the
        calling thread (``client/direct.py``): for one thread reading a range. The address
        is ``_pull_address``'s (the master, or a slave while the master is away: the
        puller's ``replica``). ``fresh``: a new connection, not one from the pool."""
        broker_id, addr = self._pull_address(queue)
        conn: DirectConnection | None = None
        while not fresh:
            with self._lock:
                idle = self._direct_idle.get(addr)
                conn = idle.pop() if idle else None
            if conn is None or conn.alive(DIRECT_MAX_IDLE):
                break
            conn.close()
        if conn is None:
            try:
                conn = DirectConnection(addr, timeout=self.config.request_timeout, tls=self._transport.tls)
            except TransportError:
                self.read_failed(queue, addr)
                raise
        return DirectPuller(conn, request_timeout=self.config.request_timeout,
                            sign=self._transport.rpc_hook, give_back=self._give_back,
                            replica=broker_id != MASTER_ID)

    def _give_back(self, conn: DirectConnection) -> None:
        with self._lock:
            idle = self._direct_idle.setdefault(conn.address, [])
            if len(idle) < DIRECT_IDLE and not self._closed:
                idle.append(conn)
                return
        conn.close()

    def _pull_address(self, queue: MessageQueue) -> tuple[int, str]:
        """(broker id, address) a pull of ``queue`` goes to (``readable.choose``): the broker
        the last answer suggested, else the master, else a slave, passing over addresses
        that failed a read lately (``read_failed``); the master of ``master_addr`` when the
        cached routes know no address of the broker name."""
        with self._lock:
            suggested = self._pull_broker_id.get(queue, MASTER_ID)
        addrs = self._routes.broker_addrs(queue.broker_name)
        if not addrs:
            try:
                self.route(queue.topic)
            except BrokerError:
                # no route now (the NameServer dropped the topic's only broker): the
                # addresses read from last, as the Java client keeps its last route
                with self._lock:
                    addrs = self._read_addrs.get(queue.broker_name, {})
                if not addrs:
                    raise
            else:
                addrs = self._routes.broker_addrs(queue.broker_name)
        got = readable.choose(addrs, suggested, self._unreachable.down)
        if got is None:
            return MASTER_ID, self.master_addr(queue.topic, queue.broker_name)
        with self._lock:
            self._read_addrs[queue.broker_name] = addrs
        return got

    def read_failed(self, queue: MessageQueue, address: str) -> None:
        """``address`` refused or dropped a read of ``queue``: pass it over for a while and
        ask the NameServer for the topic's route again (which drops a master whose
        connection closed); the next ``_pull_address`` takes another address of the name if
        there is one."""
        self._unreachable.mark(address)
        with self._lock:
            self._pull_broker_id.pop(queue, None)
        try:
            self.route(queue.topic, refresh=True)
        except (BrokerError, TransportError) as exc:
            log.info("route of %s after a failed read from %s: %s", queue.topic, address, exc)

    # ------------------------------------------------------------ offsets

    def _queue_call(self, queue: MessageQueue, cmd: RemotingCommand,
                    ok: Iterable[int] = (ResponseCode.SUCCESS,)) -> RemotingCommand:
        try:
            return self._call(self.master_addr(queue.topic, queue.broker_name), cmd, ok=ok)
        except (BrokerError, TransportError) as exc:
            self._master_failed(queue.topic, exc)
            raise

    def _master_failed(self, topic: str, exc: BaseException) -> None:
        """A master request that did not reach its broker, or that a slave refused: the
        master may have moved (a 5.x controller or DLedger elects a slave, at the slave's
        address), so the topic's next request asks the NameServer first, not the cached
        route of up to ``route_ttl`` seconds ago."""
        if isinstance(exc, TransportError) or (
                isinstance(exc, BrokerError) and exc.code == ResponseCode.SERVICE_NOT_AVAILABLE):
            self._routes.expire(topic)

    def query_consumer_offset(self, group: str, queue: MessageQueue) -> int | None:
        cmd = request(RequestCode.QUERY_CONSUMER_OFFSET,
                      QueryConsumerOffsetRequestHeader(group, queue.topic, queue.queue_id))
        response = self._queue_call(queue, cmd, ok=(ResponseCode.SUCCESS, ResponseCode.QUERY_NOT_FOUND))
        if response.code == ResponseCode.QUERY_NOT_FOUND:
            return None
        return OffsetResponseHeader.from_ext(response.ext).offset

    def update_consumer_offset(self, group: str, queue: MessageQueue, offset: int, *,
                               oneway: bool = False) -> None:
        if offset < 0:
            raise ValueError(f"consumer offset must be >= 0, got {offset}")
        cmd = request(RequestCode.UPDATE_CONSUMER_OFFSET,
                      UpdateConsumerOffsetRequestHeader(group, queue.topic, queue.queue_id, offset))
        if oneway:
            self._transport.invoke_oneway(self.master_addr(queue.topic, queue.broker_name), cmd,
                                          self.config.request_timeout)
            return
        try:
            self._queue_call(queue, cmd)
        except BrokerError as exc:
            # RocketMQ 5.x keeps offsets only of groups it knows (a consumer's first
            # heartbeat or pull creates one); 4.x takes any. Create it, as an admin would.
            if exc.code != ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST:
                raise
            self.create_subscription_group(group, self.master_addr(queue.topic, queue.broker_name))
            self._queue_call(queue, cmd)

    def create_subscription_group(self, group: str, address: str) -> None:
        """UPDATE_AND_CREATE_SUBSCRIPTIONGROUP of ``group`` (the broker's defaults) on ``address``."""
        self._call(address, request(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, None,
                                    subscription_group_body(group)))

    def _offset(self, code: int, queue: MessageQueue, replica: bool = False) -> int:
        """GET_MIN/MAX_OFFSET of the master; with ``replica``, of the address a read would go
        to (``_pull_address``: a slave while the master is away, so never beyond what the
        reads can get), the master first."""
        cmd = request(code, QueueRequestHeader(queue.topic, queue.queue_id))
        if not replica:
            return OffsetResponseHeader.from_ext(self._queue_call(queue, cmd).ext).offset
        broker_id, addr = self._pull_address(queue)
        try:
            return OffsetResponseHeader.from_ext(self._call(addr, cmd).ext).offset
        except TransportError:
            self.read_failed(queue, addr)
            again_id, again = self._pull_address(queue)
            if again == addr:
                raise
            log.info("%s: offsets of %s from %s (broker id %d): %s does not answer",
                     queue.topic, queue.broker_name, again, again_id, addr)
            return OffsetResponseHeader.from_ext(self._call(again, cmd).ext).offset

    def max_offset(self, queue: MessageQueue, *, replica: bool = False) -> int:
        return self._offset(RequestCode.GET_MAX_OFFSET, queue, replica)

    def min_offset(self, queue: MessageQueue, *, replica: bool = False) -> int:
        return self._offset(RequestCode.GET_MIN_OFFSET, queue, replica)

    def search_offset(self, queue: MessageQueue, timestamp_ms: int) -> int:
        """The offset whose store time is nearest ``timestamp_ms`` (as the broker defines it)."""
        cmd = request(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP,
                      SearchOffsetRequestHeader(queue.topic, queue.queue_id, timestamp_ms))
        return OffsetResponseHeader.from_ext(self._queue_call(queue, cmd).ext).offset

    def earliest_store_time(self, queue: MessageQueue) -> int:
        cmd = request(RequestCode.GET_EARLIEST_MSG_STORETIME,
                      QueueRequestHeader(queue.topic, queue.queue_id))
        return TimestampResponseHeader.from_ext(self._queue_call(queue, cmd).ext).timestamp

    def consume_stats(self, group: str, topic: str | None = None) -> ConsumeStats:
        """GET_CONSUME_STATS of every master hosting ``topic`` (every master of the
        cluster when None), merged: offset tables united, TPS summed."""
        if topic:
            masters = {bd.broker_name: bd.master_addr for bd in self.route(topic).broker_datas
                       if bd.master_addr}
        else:
            masters = self.cluster_brokers()
        table, tps = {}, 0.0
        header = GetConsumeStatsRequestHeader(group, topic or None)
        for _name, addr in sorted(masters.items()):
            stats = ConsumeStats.decode(
                self._call(addr, request(RequestCode.GET_CONSUME_STATS, header)).body)
            table.update(stats.offset_table)
            tps += stats.consume_tps
        return ConsumeStats(table, tps)

    # ------------------------------------------------------------ locks

    def _by_broker(self, queues: Iterable[MessageQueue]) -> dict[str, list[MessageQueue]]:
        groups: dict[str, list[MessageQueue]] = defaultdict(list)
        for mq in sorted(set(queues)):
            groups[mq.broker_name].append(mq)
        return dict(groups)

    def lock_batch(self, group: str, client_id: str, queues: Iterable[MessageQueue]) -> frozenset[MessageQueue]:
        """Queues now held by ``client_id``. A broker that fails contributes nothing; if
        every broker asked fails, the first error is raised."""
        granted: set[MessageQueue] = set()
        errors: list[Exception] = []
        groups = self._by_broker(queues)
        for broker, mqs in sorted(groups.items()):
            body = LockBatchBody(group, client_id, tuple(mqs)).encode()
            try:
                addr = self.master_addr(mqs[0].topic, broker)
                response = self._call(addr, request(RequestCode.LOCK_BATCH_MQ, None, body))
            except (BrokerError, TransportError) as exc:
                log.warning("locking %d queue(s) on %s failed: %s", len(mqs), broker, exc)
                self._master_failed(mqs[0].topic, exc)
                errors.append(exc)
                continue
            granted |= decode_lock_ok(response.body)
        if groups and len(errors) == len(groups):
            raise errors[0]
        return frozenset(granted)

    def unlock_batch(self, group: str, client_id: str, queues: Iterable[MessageQueue]) -> None:
        """Unlock on every broker; the first error is raised after all were tried."""
        errors: list[Exception] = []
        for broker, mqs in sorted(self._by_broker(queues).items()):
            body = LockBatchBody(group, client_id, tuple(mqs)).encode()
            try:
                addr = self.master_addr(mqs[0].topic, broker)
                self._call(addr, request(RequestCode.UNLOCK_BATCH_MQ, None, body))
            except (BrokerError, TransportError) as exc:
                errors.append(exc)
        if errors:
            raise errors[0]

    # ------------------------------------------------------------ membership

    def _known_masters(self, topics: Iterable[str] = ()) -> list[str]:
        for topic in topics:
            try:
                self.route(topic)
            except BrokerError as exc:
                if exc.code != ResponseCode.TOPIC_NOT_EXIST:
                    raise
        masters = dict(self._routes.masters()) or self.cluster_brokers()
        return sorted(set(masters.values()))

    def _to_all(self, addresses: Iterable[str], cmd: RemotingCommand) -> None:
        errors: list[Exception] = []
        for addr in addresses:
            try:
                self._call(addr, cmd)
            except (BrokerError, TransportError) as exc:
                errors.append(exc)
        if errors:
            raise errors[0]

    def heartbeat(self, *, client_id: str | None = None, consumers: Sequence[ConsumerData] = (),
                  producer_groups: Sequence[str] = (), addresses: Sequence[str] | None = None) -> None:
        """HEART_BEAT to ``addresses``, or to every master known (cached routes plus the
        consumers' topics; the whole cluster when none is known)."""
        data = HeartbeatData(client_id or self.config.client_id, tuple(producer_groups),
                             tuple(consumers))
        topics = {s.topic for c in consumers for s in c.subscriptions}
        targets = addresses if addresses is not None else self._known_masters(sorted(topics))
        self._to_all(targets, request(RequestCode.HEART_BEAT, None, data.encode()))

    def check_client_config(self, group: str, subscription: SubscriptionData, *,
                            client_id: str | None = None) -> None:
        """CHECK_CLIENT_CONFIG to every master of the subscription's topic, as the Java
        consumer checks a subscription that is not TAG before it starts: BrokerError with
        the broker's code and remark when one refuses it (the property filter off,
        SYSTEM_ERROR; a selector that does not compile, SUBSCRIPTION_PARSE_FAILED)."""
        body = CheckClientRequestBody(client_id or self.config.client_id, group, subscription)
        cmd = request(RequestCode.CHECK_CLIENT_CONFIG, None, body.encode())
        for addr in self._known_masters([subscription.topic]):
            self._call(addr, cmd)

    def unregister(self, *, client_id: str | None = None, producer_group: str | None = None,
                   consumer_group: str | None = None, addresses: Sequence[str] | None = None) -> None:
        """UNREGISTER_CLIENT to ``addresses``, or to every master known."""
        header = UnregisterClientRequestHeader(client_id or self.config.client_id,
                                               producer_group or None, consumer_group or None)
        targets = addresses if addresses is not None else self._known_masters()
        self._to_all(targets, request(RequestCode.UNREGISTER_CLIENT, header))

    def consumer_list(self, group: str, topic: str) -> tuple[str, ...]:
        """Client ids of the group, asked of a broker hosting ``topic`` (the next one on
        I/O failure). A group with nobody online is an error (SYSTEM_ERROR) on 4.9.8."""
        masters = sorted(bd.master_addr for bd in self.route(topic).broker_datas if bd.master_addr)
        if not masters:
            raise BrokerError(ResponseCode.SERVICE_NOT_AVAILABLE, f"topic {topic!r} has no master")
        cmd = request(RequestCode.GET_CONSUMER_LIST_BY_GROUP, GetConsumerListRequestHeader(group))
        for i, addr in enumerate(masters):
            try:
                return decode_consumer_list(self._call(addr, cmd).body)
            except TransportError:
                if i == len(masters) - 1:
                    raise
        raise AssertionError("unreachable")

    # ------------------------------------------------------------ retry

    def send_back(self, message: MessageExt, *, group: str, delay_level: int = 0,
                  broker_name: str | None = None, max_reconsume_times: int = 16) -> None:
        """CONSUMER_SEND_MSG_BACK to the master of ``broker_name`` (the message's STOREHOST
        when None): the broker stores a copy in %RETRY%<group> (or %DLQ%<group>)."""
        address = self.master_addr(message.topic, broker_name) if broker_name \
            else str(message.store_host)
        self.send_back_by_offset(
            message.commit_log_offset, address=address, group=group, delay_level=delay_level,
            origin_msg_id=message.msg_id,
            origin_topic=message.properties.get(PROP_RETRY_TOPIC) or message.topic,
            max_reconsume_times=max_reconsume_times)

    def send_back_by_offset(self, commit_log_offset: int, *, address: str, group: str,
                            delay_level: int = 0, origin_msg_id: str | None = None,
                            origin_topic: str | None = None, max_reconsume_times: int = 16) -> None:
        """The same, for callers that only kept the message's commit-log offset."""
        if commit_log_offset < 0:
            raise ValueError(f"commit_log_offset must be >= 0, got {commit_log_offset}")
        header = ConsumerSendMsgBackRequestHeader(
            offset=commit_log_offset, group=group, delay_level=delay_level,
            origin_msg_id=origin_msg_id or None, origin_topic=origin_topic or None,
            unit_mode=False, max_reconsume_times=max_reconsume_times)
        self._call(address, request(RequestCode.CONSUMER_SEND_MSG_BACK, header))

    # ------------------------------------------------------------ admin

    def create_topic(self, topic: str, *, queues: int = 4, perm: int = 6,
                     brokers: Sequence[str] | None = None) -> None:  # every master if None
        if queues <= 0:
            raise ValueError(f"queues must be > 0, got {queues}")
        if not 0 <= perm <= 15:
            raise ValueError(f"perm must be 0..15, got {perm}")
        cluster = self.cluster_brokers()
        if brokers is None:
            targets = cluster
        else:
            unknown = sorted(set(brokers) - set(cluster))
            if unknown:
                raise ValueError(f"unknown broker(s) {unknown}; the cluster has {sorted(cluster)}")
            targets = {b: cluster[b] for b in brokers}
        if not targets:
            raise BrokerError(ResponseCode.SERVICE_NOT_AVAILABLE, "the NameServer knows no broker")
        header = CreateTopicRequestHeader(topic, read_queue_nums=queues, write_queue_nums=queues,
                                          perm=perm, topic_sys_flag=0)
        for _name, addr in sorted(targets.items()):
            self._call(addr, request(RequestCode.UPDATE_AND_CREATE_TOPIC, header))
        self._routes.invalidate(topic)

    def topic_stats(self, topic: str) -> dict[MessageQueue, admin.TopicOffset]:
        """GET_TOPIC_STATS_INFO of every master hosting ``topic``, merged."""
        out: dict[MessageQueue, admin.TopicOffset] = {}
        cmd = request(RequestCode.GET_TOPIC_STATS_INFO, TopicRequestHeader(topic))
        for addr in sorted({bd.master_addr for bd in self.route(topic).broker_datas if bd.master_addr}):
            out.update(admin.decode_topic_stats(self._call(addr, cmd).body))
        return out

    def view_message(self, offset_msg_id: str) -> MessageExt:
        """VIEW_MESSAGE_BY_ID: the stored message an offset message id points at."""
        try:
            host, offset = parse_offset_msg_id(offset_msg_id)
        except ValueError as exc:
            raise ValueError(f"bad offset message id {offset_msg_id!r}: {exc}") from None
        response = self._call(str(host), request(RequestCode.VIEW_MESSAGE_BY_ID,
                                                 ViewMessageRequestHeader(offset)))
        return decode_message(response.body)[0]

    def query_message(self, topic: str, key: str, *, unique: bool = False, max_num: int = 64,
                      begin_ms: int = 0, end_ms: int = (1 << 63) - 1,
                      brokers: Iterable[str] | None = None) -> dict[str, list[MessageExt]]:
        """QUERY_MESSAGE to the master of every broker of ``topic`` (or of ``brokers``), as
        mqadmin queryMsgByKey / queryMsgByUniqueKey ask: broker name -> the records its
        index files under ``topic#key`` (``unique``: a UNIQ_KEY), newest first.

        The index is a hash index: records of other keys can be among them, callers check.
        A broker answers at most ``max_num`` records, fewer if its maxMsgsNumBatch (64) or,
        for ``unique``, its defaultQueryMaxNum (32) is lower: an answer that long may have
        left records out. QUERY_NOT_FOUND is an empty list."""
        if max_num < 1:
            raise ValueError(f"max_num must be >= 1, got {max_num}")
        ext = QueryMessageRequestHeader(topic, key, max_num, begin_ms, end_ms).to_ext()
        if unique:
            ext[UNIQUE_KEY_QUERY] = "true"
        cmd = request(RequestCode.QUERY_MESSAGE, ext)
        wanted = None if brokers is None else set(brokers)
        out: dict[str, list[MessageExt]] = {}
        for bd in sorted(self.route(topic).broker_datas, key=lambda b: b.broker_name):
            if (wanted is not None and bd.broker_name not in wanted) or not bd.master_addr:
                continue
            response = self._call(bd.master_addr, cmd, ok=(ResponseCode.SUCCESS, ResponseCode.QUERY_NOT_FOUND))
            out[bd.broker_name] = decode_messages(response.body) if response.code == ResponseCode.SUCCESS else []
        return out

    def broker_release(self, address: str) -> tuple[int, ...]:
        """The broker's release, e.g. ``(5, 5, 0)``, from GET_BROKER_RUNTIME_INFO (its
        ``brokerVersionDesc``, ``V5_5_0``; 5.x brokers leave out the ``brokerVersion``
        ordinal), asked once per address."""
        release = self._broker_releases.get(address)
        if release is None:
            info = self.broker_runtime_info(address)
            release = admin.broker_release(info)
            if release is None:
                raise RemoteProtocolError(
                    f"broker {address} answers brokerVersionDesc {info.get('brokerVersionDesc')!r} "
                    f"and brokerVersion {info.get('brokerVersion')!r}: no release in either")
            self._broker_releases[address] = release
        return release

    def _codec_for(self, address: str, compression: Compression) -> Compression:
        """``compression``, once the broker at ``address`` is one whose consumers read it:
        ConfigError when it names lz4 or zstd and the broker is older than 5.0 (its
        consumers inflate every compressed body as zlib)."""
        if compression.needs_5x:
            release = self.broker_release(address)
            if release < (5,):
                raise ConfigError(
                    f"compressionType {compression.codec!r} needs RocketMQ 5.x brokers (consumers "
                    f"before 5.0 read zlib bodies only); the broker at {address} is "
                    f"{'.'.join(map(str, release))}: use zlib, the default")
        return compression

    def broker_has_timers(self, address: str) -> bool:
        """Whether the broker at ``address`` delivers timer messages at their time (its
        GET_BROKER_RUNTIME_INFO has the ``timer*`` keys of a 5.x timer store), asked once
        per address."""
        known = self._broker_timers.get(address)
        if known is None:
            known = self._broker_timers[address] = timer.has_timers(self.broker_runtime_info(address))
        return known

    def _timed_to(self, address: str, message: Message) -> str:
        """``address``, once its broker honours ``message``'s timer, if it has one:
        ConfigError naming the broker's release when it has no timer store (a 4.x broker
        would store the message at once, ignoring the time)."""
        if timer.is_timed(message.properties) and not self.broker_has_timers(address):
            release = ".".join(map(str, self.broker_release(address)))
            raise ConfigError(
                f"timer messages (deliver_time / delay_ms, property {timer.PROP_TIMER_DELIVER_MS}) need a broker "
                f"with a timer store (RocketMQ 5.x); the broker at {address} is {release} and has none: it "
                f"would deliver them at once (use delay_level instead)")
        return address

    def broker_runtime_info(self, address: str) -> dict[str, str]:
        return admin.decode_runtime_info(
            self._call(address, request(RequestCode.GET_BROKER_RUNTIME_INFO)).body)

    def wait_dispatched(self, address: str, *, timeout: float = 30.0,
                        sleep: Callable[[float], None] = time.sleep) -> None:
        """Return once the broker at ``address`` has built its consume queues from every
        record its commit log held when this was called: what a pull can see from then on
        includes every write this client had answered before. (A broker answers a write
        once it is in the commit log, and fills the consume queues from there on a thread
        of its own.) Raises RequestTimeout after ``timeout`` seconds."""
        deadline = self._clock() + timeout
        target = prev = admin.dispatch_progress(self.broker_runtime_info(address))[0]
        pause = 0.005
        while True:
            now_max, behind = admin.dispatch_progress(self.broker_runtime_info(address))
            # the dispatcher stood at (commit-log max then) - behind, and that max was at
            # least the one of the previous answer, whichever order the broker reads them
            if prev - behind >= target:
                return
            if self._clock() > deadline:
                raise RequestTimeout(f"broker {address} had not dispatched its commit log up to "
                                     f"{target} after {timeout:.0f} s ({behind} bytes behind)")
            prev = now_max
            sleep(pause)
            pause = min(pause * 2, 0.1)


def _now_ms() -> int:
    return int(time.time() * 1000)


class PendingSend:
    """A send in flight (``MQClient.send_async``)."""

    def __init__(self, call: PendingCall, queue: MessageQueue, msg_id: str, address: str,
                 code: int) -> None:
        self._call, self._queue, self._msg_id, self._address, self._code = call, queue, msg_id, address, code

    def result(self) -> SendResult:
        return producer.send_result(self._call.result(), queue=self._queue, msg_id=self._msg_id,
                                    address=self._address, request_code=self._code)


class PendingPull:
    """A pull in flight (``MQClient.pull_async``)."""

    def __init__(self, client: MQClient, queue: MessageQueue, call: PendingCall, expression: str,
                 address: str, decode: bool, expression_type: str = "TAG") -> None:
        self._client, self._queue, self._call = client, queue, call
        self._expression, self._address, self._decode = expression, address, decode
        self._expression_type = expression_type

    def result(self) -> PullResult:
        try:
            response = self._call.result()
        except TransportError:
            self._client.read_failed(self._queue, self._address)
            raise
        result = pull_codec.pull_result(response, expression=self._expression, address=self._address,
                                        decode=self._decode, expression_type=self._expression_type)
        with self._client._lock:
            self._client._pull_broker_id[self._queue] = result.suggest_which_broker_id
        return result

    def cancel(self) -> None:
        self._call.cancel()
