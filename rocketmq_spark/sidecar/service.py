"""The sidecar's domain object: every RPC as a method on domain values (no gRPC here).

One ``MQClient`` per distinct ``Cluster`` (name servers + credentials), created on first
use and kept for the life of the process; the lock keeper renews orderly consumers' locks.
The service holds no Spark state: every call says which cluster, group and queues it means.
"""

from __future__ import annotations

import logging
import os
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence, TypeVar

import pyarrow as pa

import rocketmq_spark
from rocketmq_spark.client import ClientConfig, MQClient
from rocketmq_spark.client.mqclient import DEFAULT_PRODUCER_GROUP
from rocketmq_spark.client.pull import client_tags
from rocketmq_spark.errors import BrokerError, ConfigError, RocketMQError, TransportError
from rocketmq_spark.remoting.message import PROP_UNIQ_KEY, HostPort, MessageExt, parse_offset_msg_id
from rocketmq_spark.remoting.bodies import ConsumerData
from rocketmq_spark.remoting.codes import RequestCode, ResponseCode
from rocketmq_spark.remoting.compression import DEFAULT_COMPRESSION, Compression
from rocketmq_spark.remoting.route import MessageQueue
from rocketmq_spark.sidecar import arrow, columnar, offsets, send, shm
from rocketmq_spark.sidecar.locks import LOCK_LEASE, LOCK_RENEW_INTERVAL, LockKeeper, LockKey
from rocketmq_spark.sidecar.liveness import ProcessRef
from rocketmq_spark.sidecar.model import (API_VERSION, TAG_PROPERTY, Cluster, CommitOutcome, HealthInfo,
                                          Outgoing, PullSpec, SendBackItem, TxnRef, TxnTag, queue_name)
from rocketmq_spark.sidecar.members import MemberKeeper, MemberKey
from rocketmq_spark.sidecar.producers import ProducerKeeper
from rocketmq_spark.sidecar.pull import PullPolicy, pipeline_depth, read_chunks
from rocketmq_spark.sidecar.readahead import readahead
from rocketmq_spark.sidecar.transactions import Transactions, validate_halves
from rocketmq_spark.structs import HalfMessage, QueueOffsets, SendResult, WalkedBodies

log = logging.getLogger(__name__)

_Batch = TypeVar("_Batch", "pa.RecordBatch", "columnar.Encoded")   # what a range is served as

ClientFactory = Callable[[Cluster], MQClient]
PULL_READAHEAD = 4       # bodies fetched ahead by a thread when a range is read one pull at a time
RUNS_AHEAD = 2           # lists of bodies (a run of pulls: <= 4 MiB) fetched ahead otherwise


def default_client_factory(cluster: Cluster) -> MQClient:
    try:
        config = ClientConfig.parse(cluster.name_server, access_key=cluster.access_key,
                                    secret_key=cluster.secret_key, tls=cluster.tls,
                                    request_timeout=cluster.request_timeout_ms / 1000)
    except ValueError as exc:
        raise ConfigError(f"bad name_server {cluster.name_server!r}: {exc}") from None
    return MQClient(config)


def _require(value: str, what: str) -> str:
    if not value:
        raise ConfigError(f"{what} is empty")
    return value


class SidecarService:
    def __init__(self, *, client_factory: ClientFactory = default_client_factory,
                 lock_interval: float = LOCK_RENEW_INTERVAL,
                 pull_policy: PullPolicy = PullPolicy()) -> None:
        self._factory = client_factory
        self._clients: dict[Cluster, MQClient] = {}
        self._clients_mutex = threading.Lock()
        self._started = time.monotonic()
        self.pull_policy = pull_policy
        self.txns = Transactions()
        self.producers = ProducerKeeper(self.client)
        self.members = MemberKeeper(self.client)
        self._answering: set[Cluster] = set()      # clusters whose client answers check-backs
        self.runtime_dir = Path(tempfile.gettempdir())   # set by the server to its own directory
        self._last_sweep = 0.0
        self.locks = LockKeeper(self._lock_batch, interval=lock_interval,
                                lease=max(LOCK_LEASE, 3 * lock_interval), on_gone=self._holder_gone)
        # Queues each owner locked without keep_renewed, so "unlock all" finds them too.
        self._locked_once: dict[LockKey, set[MessageQueue]] = {}
        self._locks_mutex = threading.Lock()
        # Lock and unlock calls of one owner run one at a time, in the order they reach the
        # service: an unlock waits for a lock call already under way (a reader's renewal
        # that was in flight when it stopped) instead of being overtaken by its hold().
        self._owner_mutexes: dict[LockKey, threading.Lock] = {}
        # Pull ranges read to their end, and their rows (observability: logs, tests).
        self.pulls_served = 0
        self.rows_served = 0
        self._served_mutex = threading.Lock()

    # ------------------------------------------------------------ clients

    def client(self, cluster: Cluster) -> MQClient:
        with self._clients_mutex:
            c = self._clients.get(cluster)
            if c is None:
                c = self._clients[cluster] = self._factory(cluster)
            return c

    def _transactional(self, cluster: Cluster, group: str) -> MQClient:
        """The cluster's client, answering check-backs, with ``group`` registered (so that
        brokers can check back its half messages: before any exists)."""
        c = self.client(cluster)
        with self._clients_mutex:
            if cluster not in self._answering:
                self._answering.add(cluster)
                c.set_request_handler(RequestCode.CHECK_TRANSACTION_STATE,
                                      lambda address, cmd: self.txns.answer_check(c, address, cmd))
        self.producers.register(cluster, group)
        return c

    def close(self) -> None:
        """Unlock what the keeper holds (others need not wait for the locks to expire),
        close the clients and remove the batch files kept for reuse."""
        shm.drop_free(shm.shm_dir(self.runtime_dir))
        self.locks.close()
        self.producers.close()
        self.members.close()
        for key in list(self.members.members()):
            self.members.leave(key)
        for key, queues in self.locks.release_all().items():
            try:
                self.client(key.cluster).unlock_batch(key.group, key.owner, sorted(queues))
            except Exception as exc:  # best effort: the broker expires them anyway
                log.warning("unlocking %d queues of group %s at exit failed: %s",
                            len(queues), key.group, exc)
        with self._clients_mutex:
            clients, self._clients = list(self._clients.values()), {}
        for c in clients:
            try:
                c.close()
            except Exception as exc:  # closing is best effort
                log.debug("closing a client failed: %s", exc)

    # ------------------------------------------------------------ RPCs

    def health(self) -> HealthInfo:
        return HealthInfo(rocketmq_spark.__version__, API_VERSION, os.getpid(),
                          int((time.monotonic() - self._started) * 1000))

    def get_queues(self, cluster: Cluster, topics: Sequence[str], refresh: bool = False) -> list[MessageQueue]:
        c = self.client(cluster)
        out: set[MessageQueue] = set()
        for t in topics:
            out.update(c.subscribe_queues(_require(t, "topic"), refresh=refresh))
        return sorted(out)

    def get_offsets(self, cluster: Cluster, queues: Sequence[MessageQueue],
                    group: str | None = None, *, replica_reads: bool = False) -> list[QueueOffsets]:
        return offsets.queue_offsets(self.client(cluster), queues, group or None, replica_reads=replica_reads)

    def search_offsets(self, cluster: Cluster, queues: Sequence[MessageQueue],
                       timestamp_ms: int) -> list[tuple[MessageQueue, int]]:
        if timestamp_ms < 0:
            raise ConfigError(f"timestamp_ms must be >= 0, got {timestamp_ms}")
        return offsets.search_offsets(self.client(cluster), queues, timestamp_ms)

    def query_messages(self, cluster: Cluster, topic: str, key: str, *, unique: bool, max_num: int,
                       brokers: Sequence[str] = ()) -> dict[str, list[MessageExt]]:
        """QUERY_MESSAGE to every master of ``topic`` (or of ``brokers``). With ``unique``,
        ``key`` is a ``msg_id`` value: the UNIQ_KEY, or for a message stored without one its
        offset message id, which no index files; when ``key`` reads as an offset message id
        of one of those masters, the record it points at (VIEW_MESSAGE_BY_ID) is added to
        that broker's answer if it has no UNIQ_KEY (a message whose ``msg_id`` is ``key``)."""
        if not 1 <= max_num <= 64:
            raise ConfigError(f"max_num must be 1..64, got {max_num}")
        client = self.client(cluster)
        found = client.query_message(topic, key, unique=unique, max_num=max_num, brokers=brokers or None)
        if unique:
            self._add_by_offset_id(client, topic, key, found)
        return found

    @staticmethod
    def _add_by_offset_id(client: MQClient, topic: str, key: str, found: dict[str, list[MessageExt]]) -> None:
        try:
            host, offset = parse_offset_msg_id(key)
        except ValueError:
            return
        masters = {bd.master_addr: bd.broker_name for bd in client.route(topic).broker_datas
                   if bd.broker_name in found and bd.master_addr}
        broker = masters.get(str(host))
        if broker is None or offset < 0:
            return                    # no master of the read stored it: no row has that offset id
        try:
            m = client.view_message(key)
        except BrokerError as exc:
            if exc.code == ResponseCode.SYSTEM_ERROR:     # "can not find message by the offset"
                return
            raise
        if PROP_UNIQ_KEY not in m.properties and m.offset_msg_id == key:
            found[broker].append(m)

    def _lock_batch(self, cluster: Cluster, group: str, owner: str,
                    queues: frozenset[MessageQueue]) -> frozenset[MessageQueue]:
        return frozenset(self.client(cluster).lock_batch(group, owner, queues))

    def _owner_mutex(self, key: LockKey) -> threading.Lock:
        with self._locks_mutex:
            return self._owner_mutexes.setdefault(key, threading.Lock())

    def lock(self, cluster: Cluster, group: str, owner: str, queues: Sequence[MessageQueue],
             keep_renewed: bool = True, *, holder: ProcessRef | None = None) -> frozenset[MessageQueue]:
        """Lock ``queues`` for ``owner``; with ``keep_renewed``, keep them locked while the
        caller keeps asking (a lease) and ``holder``, the calling process, runs."""
        key = LockKey(cluster, _require(group, "consumer_group"), _require(owner, "owner_id"))
        with self._owner_mutex(key):
            granted = self._lock_batch(cluster, group, owner, frozenset(queues))
            if keep_renewed:
                self.locks.hold(key, queues, granted, holder)
            else:
                with self._locks_mutex:
                    self._locked_once.setdefault(key, set()).update(granted)
            return granted

    def unlock(self, cluster: Cluster, group: str, owner: str,
               queues: Sequence[MessageQueue] = ()) -> None:
        key = LockKey(cluster, _require(group, "consumer_group"), _require(owner, "owner_id"))
        with self._owner_mutex(key):
            released = self.locks.release(key, frozenset(queues) if queues else None)
            with self._locks_mutex:
                once = self._locked_once.get(key, set())
                if queues:
                    targets = set(queues)
                    once -= targets
                else:
                    targets = set(released) | once
                    once.clear()
                if not once:
                    self._locked_once.pop(key, None)
            if targets:
                self.client(cluster).unlock_batch(group, owner, sorted(targets))

    def register_consumer(self, cluster: Cluster, client_id: str, consumer: ConsumerData, *,
                          holder: ProcessRef | None = None) -> None:
        """Keep ``client_id`` registered as a consumer of its group (``members``). A
        subscription that is not TAG is first checked with the brokers (CHECK_CLIENT_CONFIG,
        as the Java consumer does): BrokerError with their code and remark if refused."""
        _require(consumer.group_name, "consumer_group")
        for sub in consumer.subscriptions:
            if sub.expression_type != "TAG":
                self.client(cluster).check_client_config(consumer.group_name, sub, client_id=client_id)
        self.members.join(MemberKey(cluster, consumer.group_name, _require(client_id, "client_id")),
                          consumer, holder)

    def unregister_consumer(self, cluster: Cluster, group: str, client_id: str) -> None:
        self.members.leave(MemberKey(cluster, _require(group, "consumer_group"), _require(client_id, "client_id")))

    def _holder_gone(self, key: LockKey, queues: frozenset[MessageQueue]) -> None:
        """The process that held ``key``'s locks is gone (the lock keeper saw it): unlock
        them, unless the owner has locked again meanwhile (a restarted query)."""
        with self._owner_mutex(key):
            if queues and not self.locks.held(key):
                self.client(key.cluster).unlock_batch(key.group, key.owner, sorted(queues))

    def pull(self, cluster: Cluster, spec: PullSpec) -> Iterator[bytes]:
        """The range as one Arrow IPC stream, in chunks, produced pull by pull."""
        return arrow.ipc_chunks(self._batches(cluster, spec))

    def pull_files(self, cluster: Cluster, spec: PullSpec,
                   reader_alive: Callable[[], bool] = lambda: True) -> Iterator[str]:
        """The range as files in shared memory, a few record batches each, written no
        faster than the reader takes them (``shm``)."""
        directory = shm.shm_dir(self.runtime_dir)
        if time.monotonic() - self._last_sweep > shm.STALE_SECONDS / 2:
            self._last_sweep = time.monotonic()
            shm.sweep(directory)
        # A thread writes the files: the next one is decoded and written while gRPC sends the
        # last one's path (each send waits for gRPC's own threads, which wait for the CPU on a
        # busy host: bench/README.md, stop 35).
        files = shm.batch_files(self._batches(cluster, spec, encoded=True), directory, reader_alive=reader_alive)
        return readahead(files, shm.FILES_AHEAD, name=f"rocketmq-files-{spec.queue.queue_id}", discard=shm.discard)

    def trim_batch_files(self) -> None:
        """Remove the shared-memory files kept for reuse that are past the pool or unused."""
        shm.trim(shm.shm_dir(self.runtime_dir))

    def _batches(self, cluster: Cluster, spec: PullSpec, *,
                 encoded: bool = False) -> Iterator["pa.RecordBatch | columnar.Encoded"]:
        """The range's rows as record batches, produced pull by pull; ``encoded``: as IPC
        messages already (``columnar.Encoded``) where the compiled encoder applies."""
        client = self.client(cluster)
        # A thread reads the range (and owns its connection) while this one decodes and
        # hands over: the broker works on the next pulls meanwhile. It hands over a list of
        # bodies at a time (a compiled run's, or a pipeline's worth), one body when pulls go
        # one at a time (a tag filter).
        ahead = PULL_READAHEAD if pipeline_depth(client, spec, self.pull_policy) == 1 else RUNS_AHEAD
        chunks = readahead(self._range(client, spec), ahead, name=f"rocketmq-pull-{spec.queue.queue_id}")
        bodies = (body for chunk in chunks for body in chunk)
        window = columnar.Window(spec.start, spec.end, client_tags(spec.sub_expression, spec.expression_type),
                                 spec.queue.broker_name, spec.restore_retry_topic_of)
        batcher = columnar.BodyBatcher(window, spec.max_rows_per_batch, encoded=encoded)
        return self._served(spec, batcher.batches(bodies))

    def _range(self, client: MQClient, spec: PullSpec) -> Iterator[list[bytes | WalkedBodies]]:
        """The range's pull bodies in lists (``pull.read_chunks``), over a connection of the
        range's own when the client offers one (client/direct.py). A broker that stops
        answering mid-range: the read goes on over a new connection to the address the
        client picks then (a slave while the master is away), within the spec's
        ``broker_unavailable_timeout_ms``."""
        direct = getattr(client, "direct_puller", None)
        if direct is None:
            yield from read_chunks(client, spec, self.pull_policy, _reconnect_shared(client, spec))
            return

        def reconnect(failed: Any, exc: BaseException) -> Any:
            nonlocal pooled
            failed.close()
            if pooled:          # the broker may have closed the pooled connection while idle:
                pooled = False  # the same address once more, on a new connection
            else:
                client.read_failed(spec.queue, failed.address)
            puller = direct(spec.queue, fresh=True)
            opened.append(puller)
            log.info("pulling %s: %s; going on from %s", queue_name(spec.queue), exc, puller.address)
            return puller

        yielded = False
        pooled = True
        opened: list[Any] = []
        try:
            puller = self._first_puller(direct, spec)
            opened.append(puller)
            for chunk in read_chunks(puller, spec, self.pull_policy,
                                     reconnect if spec.broker_unavailable_timeout_ms > 0 else None):
                yielded = True
                yield chunk
        except TransportError as exc:
            if yielded or spec.broker_unavailable_timeout_ms > 0:
                raise
            # a pooled connection the broker had just closed: once more, on a new one
            log.info("pulling %s: %s; once more on a new connection", queue_name(spec.queue), exc)
            with direct(spec.queue, fresh=True) as again:
                yield from read_chunks(again, spec, self.pull_policy)
        finally:
            for p in opened:
                p.close()

    def _first_puller(self, direct: Callable[..., Any], spec: PullSpec) -> Any:
        """The range's first connection; while none can be opened (the master refuses and
        no other address is known yet), again after a pause, within the spec's
        ``broker_unavailable_timeout_ms``."""
        p = self.pull_policy
        deadline = p.clock() + spec.broker_unavailable_timeout_ms / 1000
        pause = p.reconnect_initial
        while True:
            try:
                return direct(spec.queue)
            except TransportError as exc:
                if p.clock() + pause > deadline:
                    raise
                log.info("pulling %s: %s; trying again in %.1f s", queue_name(spec.queue), exc, pause)
                p.sleep(pause)
                pause = min(pause * 2, p.reconnect_max)

    def _served(self, spec: PullSpec, batches: Iterator[_Batch]) -> Iterator[_Batch]:
        """Pass ``batches`` through; once the range is read whole, count it and log one line
        (which sidecar served which reads is what a deployment's logs must show)."""
        rows = 0
        for batch in batches:
            rows += batch.num_rows
            yield batch
        with self._served_mutex:
            self.pulls_served += 1
            self.rows_served += rows
        log.info("served pull %s [%d, %d) group %s: %d rows", queue_name(spec.queue), spec.start,
                 spec.end, spec.group, rows)

    def commit_offsets(self, cluster: Cluster, group: str, positions: Mapping[MessageQueue, int]) -> None:
        """Every queue's offset, each broker's whatever another's does: a broker that does
        not answer (a master away) keeps the others' commits going; the first error is
        raised once all were tried."""
        _require(group, "consumer_group")
        c = self.client(cluster)
        errors: list[RocketMQError] = []
        silent: set[str] = set()             # brokers that did not answer: not asked again now
        for q, off in positions.items():
            if q.broker_name in silent:
                continue
            try:
                c.update_consumer_offset(group, q, off)
            except RocketMQError as exc:
                errors.append(exc)
                if isinstance(exc, TransportError):
                    silent.add(q.broker_name)
        if errors:
            raise errors[0]

    def send(self, cluster: Cluster, producer_group: str | None, items: Sequence[Outgoing], *,
             transaction_tag: str | None = None, unreachable_timeout_ms: int = 0,
             compression: Compression = DEFAULT_COMPRESSION) -> list[SendResult]:
        group = producer_group or DEFAULT_PRODUCER_GROUP
        wait = max(0, unreachable_timeout_ms) / 1000
        if transaction_tag is None:
            return send.send_all(self.client(cluster), items, group, unreachable_timeout=wait,
                                 compression=compression)
        if TxnTag.parse(transaction_tag) is None:
            raise ConfigError(f"transaction tag {transaction_tag!r} is not "
                              "<log topic>|<id>|<batch>|<epoch>|<partition>|<attempt>")
        return send.send_halves(self._transactional(cluster, group), items, group, transaction_tag,
                                tag_property=TAG_PROPERTY, unreachable_timeout=wait,
                                compression=compression)

    def commit_transaction(self, cluster: Cluster, producer_group: str, txn: TxnRef,
                           tasks: Sequence[tuple[int, int]], halves: Sequence[HalfMessage], *,
                           ordered: bool = True) -> CommitOutcome:
        group = _require(producer_group, "producer_group")
        validate_halves(halves)
        return self.txns.commit(self._transactional(cluster, group), group, txn, tasks, halves,
                                ordered=ordered)

    def abort_transaction(self, cluster: Cluster, producer_group: str, txn: TxnRef,
                          halves: Sequence[HalfMessage]) -> tuple[int, bool]:
        group = _require(producer_group, "producer_group")
        validate_halves(halves)
        return self.txns.abort(self._transactional(cluster, group), group, txn, halves)

    def send_back(self, cluster: Cluster, group: str, items: Iterable[SendBackItem]) -> None:
        _require(group, "consumer_group")
        c = self.client(cluster)
        for item in items:
            c.send_back(message_for_send_back(item), group=group, delay_level=item.delay_level,
                        broker_name=item.broker_name or None,
                        max_reconsume_times=item.max_reconsume_times)


def _reconnect_shared(client: Any, spec: PullSpec) -> Any:
    """``reconnect`` for a client without connections of its own per range: the same
    client, which picks the address per pull (and notes the ones that failed)."""
    if spec.broker_unavailable_timeout_ms <= 0:
        return None
    return lambda failed, exc: client


def message_for_send_back(item: SendBackItem) -> MessageExt:
    """The fields CONSUMER_SEND_MSG_BACK needs, rebuilt from what a row carries."""
    if not item.origin_topic:
        raise ConfigError("a send-back item needs origin_topic (the topic the row was read as)")
    if not item.broker_name and not item.offset_msg_id:
        raise ConfigError("a send-back item needs broker_name or offset_msg_id to find its broker")
    store, offset = HostPort("127.0.0.1", 0), item.commit_log_offset
    if item.offset_msg_id:
        try:
            store, from_id = parse_offset_msg_id(item.offset_msg_id)
        except ValueError as exc:
            raise ConfigError(f"bad offset_msg_id {item.offset_msg_id!r}: {exc}") from None
        if offset <= 0:
            offset = from_id
    props = {PROP_UNIQ_KEY: item.origin_msg_id} if item.origin_msg_id else {}
    return MessageExt(topic=item.origin_topic, body=b"", commit_log_offset=offset,
                      store_host=store, properties=props)
