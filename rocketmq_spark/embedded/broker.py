"""One embedded broker: store, topic/group/offset tables, clients, locks, long polling,
the delay timer, 5.x timer messages (``timers``, on by default), transactional messages and their check-backs, and its remoting server,
under ``<data_dir>/<broker name>/``.

Layout on disk: ``commitlog/`` (segments), ``consumequeue/<topic>/<queueId>/``,
``config/topics.json``, ``config/subscriptionGroup.json``, ``config/consumerOffset.json``,
``config/delayOffset.json``, ``config/timerCheckpoint.json``, ``broker.json`` (the last port, reused when free so that the
STOREHOST of stored messages stays reachable after a restart) and ``lock``. Half messages,
op messages and the check progress need nothing more: they are queues of the store and
offsets of group CID_RMQ_SYS_TRANS (see ``half_messages``).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Callable, Mapping, Sequence

from rocketmq_spark.client.transport import Transport
from rocketmq_spark.embedded.acl import AclValidator
from rocketmq_spark.embedded.clients import Channel, ClientManager, Notice
from rocketmq_spark.embedded.clock import Clock, SystemClock
from rocketmq_spark.embedded.groups import SubscriptionGroupManager
from rocketmq_spark.embedded.half_messages import HalfMessages
from rocketmq_spark.embedded.locks import RebalanceLockManager
from rocketmq_spark.embedded.gates import Gate
from rocketmq_spark.embedded.long_poll import PullHoldService
from rocketmq_spark.embedded.offsets import ConsumerOffsetManager
from rocketmq_spark.embedded.persist import read_json, write_json
from rocketmq_spark.embedded.processors import dispatch
from rocketmq_spark.embedded.processors.admin import disk_used_ratio
from rocketmq_spark.embedded.processors.base import Call
from rocketmq_spark.embedded.processors.pull import answer_plain_pull
from rocketmq_spark.embedded.schedule import ScheduleService
from rocketmq_spark.embedded.server import Connection, RemotingServer, advertised_ip
from rocketmq_spark.embedded.stats import BrokerStats
from rocketmq_spark.embedded.processors.replicate import CommitLogWaiters
from rocketmq_spark.embedded.replication import SYNC_INTERVAL, ReplicaService
from rocketmq_spark.embedded.store import MessageStore, PutResult, StoreError
from rocketmq_spark.embedded.timer import WHEEL_QUEUE, TimerService
from rocketmq_spark.embedded.store.commitlog import DEFAULT_SEGMENT_SIZE
from rocketmq_spark.embedded.store.message_store import MAX_TRANSFER_COUNT
from rocketmq_spark.embedded.topics import TopicConfig, TopicManager
from rocketmq_spark.embedded.transactions import (TRANSACTION_CHECK_INTERVAL_MS, TRANSACTION_CHECK_MAX,
                                                  TRANSACTION_TIMEOUT_MS, TransactionCheckService,
                                                  TransactionConfig)
from rocketmq_spark.remoting.codes import (DELAY_LEVELS_MS, FLAG_ONEWAY, SCHEDULE_TOPIC, SERIALIZE_JSON,
                                           SERVER_VERSION, TRANS_HALF_TOPIC, MessageSysFlag, Perm, RequestCode,
                                           ResponseCode)
from rocketmq_spark.remoting.command import RemotingCommand
from rocketmq_spark.remoting import timer
from rocketmq_spark.remoting.message import PROP_DELAY, PROP_REAL_QID, PROP_REAL_TOPIC, HostPort, MessageExt
from rocketmq_spark.tls import ServerTls

log = logging.getLogger(__name__)

HOUSEKEEPING_INTERVAL = 10.0
SLAVE_PUT_REMARK = ("service not available now. It may be caused by one of the following reasons: the broker's "
                    "disk is full [CL: {0:5.2f} CQ: {0:5.2f} INDEX: {0:5.2f}], messages are put to the slave, "
                    "message store has been shut down, etc.")
IDLE_CONNECTION_SECONDS = 120.0


class Broker:
    """One broker. What tests and tools may use besides ``start``/``stop``:

    ``name``, ``cluster``, ``addr`` ("ip:port" as routed), ``port``, ``root`` (its data
    directory), ``clock``, ``flush``/``flush_sync``, ``acl_file``/``acl`` (``AclValidator`` or None);
    ``store`` (MessageStore: ``max_offset``, ``min_offset``, ``store_time``, ``get``,
    ``message_at``, ``delete_segments_before``, ``commitlog``), ``topics`` (TopicManager:
    ``get``, ``names``, ``put``, ``ensure``), ``groups`` (SubscriptionGroupManager),
    ``offsets`` (ConsumerOffsetManager: ``query``, ``commit``, ``topics_of``),
    ``clients`` (ClientManager: ``group``, ``consumer_ids``), ``locks``
    (RebalanceLockManager: ``holder``), ``long_poll`` (``held_count``), ``schedule``
    (``progress``), ``stats``, ``transaction_config``, ``half_messages`` (HalfMessages:
    the half and op queues), ``transaction_checks`` (TransactionCheckService:
    ``check_now``, ``rounds``, ``wait_rounds``); and ``create_topic``, ``put``,
    ``expire_clients``.

    ``transaction_timeout_ms``, ``transaction_check_interval_ms`` and
    ``transaction_check_max`` are Apache's transactionTimeOut, transactionCheckInterval
    and transactionCheckMax (defaults 6000 ms, 60000 ms, 15). ``enable_property_filter`` is
    enablePropertyFilter: SQL92 subscriptions are evaluated (default True here, false in
    Apache) or refused with SYSTEM_ERROR.

    ``timers`` (default True): single sends with TIMER_DELIVER_MS / TIMER_DELAY_MS /
    TIMER_DELAY_SEC wait in rmq_sys_wheel_timer until their time, as on a 5.x broker, and
    GET_BROKER_RUNTIME_INFO has 5.x's ``timer*`` keys; False: the properties are stored and
    ignored, the message is visible at once, as on 4.x (``timer`` exposes ``pending``).
    """

    def __init__(self, name: str, data_dir: str | Path, *, host: str = "127.0.0.1",
                 advertised_host: str | None = None, port: int = 0, cluster: str = "DefaultCluster",
                 default_queues: int = 4, flush: str = "sync", clock: Clock | None = None,
                 segment_size: int = DEFAULT_SEGMENT_SIZE, acl_file: str | None = None,
                 max_transfer_count: int = MAX_TRANSFER_COUNT, tls: ServerTls | None = None,
                 transaction_timeout_ms: int = TRANSACTION_TIMEOUT_MS,
                 transaction_check_interval_ms: int = TRANSACTION_CHECK_INTERVAL_MS,
                 transaction_check_max: int = TRANSACTION_CHECK_MAX, dispatch_lag_ms: int = 0,
                 enable_property_filter: bool = True,
                 timers: bool = True,
                 broker_id: int = 0, master: str | Callable[[], str | None] | None = None,
                 root: str | Path | None = None, sync_interval: float = SYNC_INTERVAL,
                 acting_master: bool = False) -> None:
        if flush not in ("sync", "async"):
            raise ValueError(f"flush must be 'sync' or 'async', not {flush!r}")
        if broker_id < 0:
            raise ValueError(f"broker_id must be 0 (a master) or more (a slave), not {broker_id}")
        if broker_id and master is None:
            raise ValueError(f"slave {name} (broker_id {broker_id}) needs the address of its master")
        if broker_id and (acl_file or tls):
            raise ValueError("a slave does not replicate over ACL or TLS yet: start it without either")
        self.transaction_config = TransactionConfig(transaction_timeout_ms, transaction_check_interval_ms,
                                                    transaction_check_max)
        self.name = name
        self.broker_id = broker_id
        # A slave's master: an address, or a function giving it (None while it is not known).
        self._master = master if callable(master) or master is None else (lambda: master)
        self.sync_interval = sync_interval
        # registers with enableActingMaster (Apache's enableSlaveActingMaster): a NameServer
        # with supportActingMaster routes the name's lowest slave as brokerId 0 while no
        # master is up
        self.acting_master = acting_master
        self.cluster = cluster
        self.host = host
        self.advertised_host = advertised_ip(host, advertised_host)
        self.requested_port = port
        self.root = Path(root) if root is not None else Path(data_dir) / (
            name if broker_id == 0 else f"{name}-{broker_id}")
        self.default_queues = default_queues
        self.flush = flush
        self.clock: Clock = clock or SystemClock()
        self.segment_size = segment_size
        self.max_transfer_count = max_transfer_count
        self.dispatch_lag_ms = dispatch_lag_ms   # see MessageStore: reads lag sends, as Apache's can
        # Apache's enablePropertyFilter (default false there): SQL92 subscriptions allowed
        self.enable_property_filter = enable_property_filter
        self.timers = timers
        self.acl_file = acl_file
        self.gates: list[Gate] = []              # fault tests hold requests here (gates.py)
        self.tls = tls
        # ACL hook: check(call) raises Refuse for a request plain_acl.yml denies (acl.py).
        self.acl: AclValidator | None = AclValidator.from_file(acl_file) if acl_file else None
        self._opaque = iter(range(1, 1 << 31))
        self._opaque_lock = threading.Lock()
        self._housekeeper: threading.Thread | None = None
        self._used = False
        self._build()
        self.started = False

    # ------------------------------------------------------------ life cycle

    def _build(self) -> None:
        """Fresh runtime parts: a broker can be stopped and started again (what is on
        disk stays; connections, clients and locks start empty, as after a restart)."""
        self.boot_ms = self.clock.now_ms()
        self.stats = BrokerStats()
        self.clients = ClientManager(self.clock)
        self.locks = RebalanceLockManager(self.clock)
        self.groups = SubscriptionGroupManager(self.root / "config" / "subscriptionGroup.json")
        self.offsets = ConsumerOffsetManager(self.root / "config" / "consumerOffset.json")
        self.topics = TopicManager(self.root / "config" / "topics.json", cluster=self.cluster, broker=self.name,
                                   clock=self.clock)
        self.server = RemotingServer(self.name, self.host, self._on_request, on_close=self._on_close,
                                     tls=self.tls, frame_handler=self._on_frame)
        self.long_poll = PullHoldService(self._max_offset, name=f"{self.name}-long-poll")
        self.replication_waiters = CommitLogWaiters()    # a master's held REPLICATE_COMMIT_LOG requests
        self.replica: ReplicaService | None = None      # a slave's copier (replication.py)
        self.store: MessageStore = None  # type: ignore[assignment]  # opened in start()
        self.schedule: ScheduleService = None  # type: ignore[assignment]
        self.timer: TimerService | None = None
        self.half_messages: HalfMessages = None  # type: ignore[assignment]
        self.transaction_checks: TransactionCheckService = None  # type: ignore[assignment]
        self._stop = threading.Event()

    @property
    def port(self) -> int:
        return self.server.port

    @property
    def addr(self) -> str:
        return f"{self.advertised_host}:{self.port}"

    @property
    def is_slave(self) -> bool:
        return self.broker_id != 0

    @property
    def master_addr(self) -> str | None:
        return self._master() if self._master is not None else None

    @property
    def flush_sync(self) -> bool:
        return self.flush == "sync"

    def start(self) -> "Broker":
        if self.started:
            return self
        if self._used:  # started before: start from a clean slate
            self._build()
        self._used = True
        self.root.mkdir(parents=True, exist_ok=True)
        meta_path = self.root / "broker.json"
        meta = read_json(meta_path, {}) or {}
        self.server.bind(self.requested_port, preferred=None if self.requested_port else meta.get("port"))
        try:
            self.store = MessageStore(self.root, HostPort(self.advertised_host, self.port), clock=self.clock,
                                      segment_size=self.segment_size,
                                      max_transfer_count=self.max_transfer_count,
                                      dispatch_lag_ms=self.dispatch_lag_ms)
            self.store.open()
            self.topics.load()
            self.groups.load()
            self.offsets.load()
            self.schedule = ScheduleService(self.store, lambda m: self.put([m], apply_delay=False),
                                            self.root / "config" / "delayOffset.json", clock=self.clock,
                                            name=f"{self.name}-schedule")
            self.schedule.load()
            if self.timers:            # 5.x's TopicConfigManager creates the wheel's topic
                self.topics.ensure(timer.TIMER_TOPIC, 1)
                self.timer = TimerService(self.store, lambda m: self.put([m], apply_delay=False),
                                          self.root / "config" / "timerCheckpoint.json", clock=self.clock,
                                          name=f"{self.name}-timer")
                self.timer.load()
                self.store.add_listener(self.timer.notify_arrival)
            self.half_messages = HalfMessages(self.store, lambda ms: self.put(ms, apply_delay=False), self.topics,
                                              self.offsets)
            self.transaction_checks = TransactionCheckService(
                self.half_messages, self._ask_producer, clock=self.clock, config=self.transaction_config,
                name=f"{self.name}-transaction-check")
            self.store.add_listener(self.long_poll.notify_arrival)
            self.store.add_listener(self.schedule.notify_arrival)
            self.store.add_listener(self.replication_waiters.notify)
            write_json(meta_path, {"name": self.name, "cluster": self.cluster, "port": self.port,
                                   "brokerId": self.broker_id})
        except BaseException:
            self.server.stop()
            if self.store is not None:
                self.store.close()
            raise
        self.offsets.start()
        self.long_poll.start()
        if self.is_slave:   # a slave delivers nothing itself: its master's deliveries are copied
            self.replica = ReplicaService(self, self._master, Transport(io_timeout=60.0),  # type: ignore[arg-type]
                                          sync_interval=self.sync_interval)
            self.replica.start()
        else:
            self.schedule.start()
            if self.timer is not None:
                self.timer.start()
            self.transaction_checks.start()
        self.server.start()
        self._housekeeper = threading.Thread(target=self._housekeeping, name=f"{self.name}-housekeeping",
                                             daemon=True)
        self._housekeeper.start()
        self.started = True
        log.info("%s listening on %s (store %s, flush %s)", self.name, self.addr, self.root, self.flush)
        return self

    def stop(self) -> None:
        if not self.started:
            return
        self.started = False
        self._stop.set()
        self.replication_waiters.close()
        self.server.stop()
        self.long_poll.stop()
        if self.replica is not None:
            self.replica.stop()          # closes its transport
            self.replica = None
        self.schedule.stop()
        if self.timer is not None:
            self.timer.stop()
        self.transaction_checks.stop()
        self.offsets.close()
        self.store.close()
        if self._housekeeper is not None:
            self._housekeeper.join(5)
        log.info("%s stopped", self.name)

    # ------------------------------------------------------------ requests

    def _on_request(self, conn: Connection, cmd: RemotingCommand) -> None:
        for gate in list(self.gates):          # fault tests only (gates.py); empty otherwise
            if not gate.admit(cmd, conn.peer_gone):
                return
        dispatch(self, conn, cmd)

    def _on_frame(self, conn: Connection, frame: bytes) -> bool:
        """Plain pulls answered from the frame as read (``processors.pull``); not while a
        gate or an ACL must see each request."""
        if self.gates or self.acl is not None:
            return False
        return answer_plain_pull(self, conn, frame)

    def _on_close(self, conn: Connection) -> None:
        self.long_poll.drop_connection(conn.id)
        for notice in self.clients.connection_closed(conn.id):
            self.notify_consumer_ids_changed(notice)

    def _max_offset(self, topic: str, queue_id: int) -> int:
        return self.store.max_offset(topic, queue_id) if self.store is not None else 0

    def answer_when_durable(self, call: Call, result: PutResult, answer: RemotingCommand, *,
                            wait: bool) -> RemotingCommand | None:
        """``answer`` now (async flush, or the message does not wait) or once the commit
        log is fsynced past ``result`` (group commit); FLUSH_DISK_TIMEOUT if fsync failed."""
        if not (self.flush_sync and wait):
            return answer
        if call.oneway:
            return None

        def done(ok: bool) -> None:
            call.send(answer if ok else replace(answer, code=ResponseCode.FLUSH_DISK_TIMEOUT))

        self.store.when_durable(result.end_offset, done)
        return None

    # ------------------------------------------------------------ messages

    def put(self, messages: Sequence[MessageExt], *, apply_delay: bool = True) -> PutResult:
        """Store messages; with ``apply_delay`` a DELAY > 0 reroutes a message through
        SCHEDULE_TOPIC_XXXX, and (``timers``) a timer ahead through rmq_sys_wheel_timer
        (REAL_TOPIC/REAL_QID keep where it goes); StoreError MESSAGE_ILLEGAL for a timer
        that is not a number or more than 3 days ahead."""
        if self.is_slave:   # Apache's store refuses puts on a slave (PutMessageStatus.SERVICE_NOT_AVAILABLE)
            raise StoreError(ResponseCode.SERVICE_NOT_AVAILABLE, SLAVE_PUT_REMARK.format(disk_used_ratio(self.root)))
        if apply_delay:
            messages = [self._timed(self._delayed(m)) for m in messages]
        started = time.monotonic()
        try:
            result = self.store.put(messages)
        except Exception:
            self.stats.put_failed += 1
            raise
        self.stats.on_put(len(result.stored), sum(s.size for s in result.stored),
                          (time.monotonic() - started) * 1000)
        return result

    def _delayed(self, m: MessageExt) -> MessageExt:
        try:
            level = int(m.properties.get(PROP_DELAY, "0"))
        except ValueError:
            return m
        tx = m.sys_flag & MessageSysFlag.TRANSACTION_MASK
        # Half messages wait for their commit, which honours DELAY (Apache would delay the
        # half message itself and lose its real topic; its Java producer drops DELAY).
        if level <= 0 or m.topic in (SCHEDULE_TOPIC, TRANS_HALF_TOPIC) or tx not in (0, 0x8):
            return m
        props = dict(m.properties)
        if level > len(DELAY_LEVELS_MS):
            level = len(DELAY_LEVELS_MS)
            props[PROP_DELAY] = str(level)
        props[PROP_REAL_TOPIC] = m.topic
        props[PROP_REAL_QID] = str(m.queue_id)
        return replace(m, topic=SCHEDULE_TOPIC, queue_id=level - 1, properties=props)

    def _timed(self, m: MessageExt) -> MessageExt:
        """What a 5.x broker's put hook (HookUtils.handleScheduleMessage) makes of a timer
        message: a delay level wins and drops the timer; a time ahead goes to the wheel."""
        if not self.timers or m.topic == timer.TIMER_TOPIC or not timer.is_timed(m.properties):
            return m
        if (m.sys_flag & MessageSysFlag.TRANSACTION_MASK) not in (0, 0x8):
            return m                   # half messages are timed (if at all) when committed
        if m.topic == SCHEDULE_TOPIC:  # a delay level: the timer properties are dropped
            return replace(m, properties={k: v for k, v in m.properties.items()
                                          if k not in timer.TIMER_REQUESTS})
        now = self.clock.now_ms()
        try:
            out = timer.wheel_time(timer.deliver_ms(m.properties, now), now)
        except timer.TimerIllegal:
            raise StoreError(ResponseCode.MESSAGE_ILLEGAL, timer.illegal_remark()) from None
        if out is None:                # not ahead: stored at once, as a normal message
            return m
        props = {**m.properties, timer.PROP_TIMER_OUT_MS: str(out), PROP_REAL_TOPIC: m.topic,
                 PROP_REAL_QID: str(m.queue_id)}
        return replace(m, topic=timer.TIMER_TOPIC, queue_id=WHEEL_QUEUE, properties=props)

    # ------------------------------------------------------------ topics, clients

    def create_topic(self, topic: str, queues: int | None = None, perm: int = Perm.READ | Perm.WRITE) -> TopicConfig:
        n = self.default_queues if queues is None else queues
        return self.topics.put(TopicConfig(topic, n, n, perm))

    def push(self, conn: Channel, code: int, ext: Mapping[str, str], body: bytes = b"") -> bool:
        """A oneway request to a client (JSON, as a 4.9.8 broker frames it); False when
        the connection is closed."""
        with self._opaque_lock:
            opaque = next(self._opaque)
        return conn.send(RemotingCommand(code=code, opaque=opaque, flag=FLAG_ONEWAY, ext_fields=dict(ext),
                                         body=body, language="JAVA", version=SERVER_VERSION,
                                         serialize_type=SERIALIZE_JSON))

    def notify_consumer_ids_changed(self, notice: Notice) -> None:
        """NOTIFY_CONSUMER_IDS_CHANGED (oneway, JSON) to every channel of the group."""
        group, channels = notice
        for channel in channels:
            self.push(channel.conn, RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, {"consumerGroup": group})

    def _ask_producer(self, group: str, ext: Mapping[str, str], body: bytes) -> bool:
        """CHECK_TRANSACTION_STATE to one live connection of producer group ``group``."""
        return any(self.push(ch.conn, RequestCode.CHECK_TRANSACTION_STATE, ext, body)
                   for ch in self.clients.producers_in_turn(group))

    def expire_clients(self) -> list[Connection]:
        """Drop clients silent for 120 s (by the broker's clock) and close their
        connections; returns the connections closed."""
        stale, notices = self.clients.expire()
        for notice in notices:
            self.notify_consumer_ids_changed(notice)
        for conn in stale:
            close = getattr(conn, "close", None)
            if close is not None:
                close("no heartbeat for 120 s")
        return list(stale)  # type: ignore[arg-type]

    def _housekeeping(self) -> None:
        while not self._stop.wait(HOUSEKEEPING_INTERVAL):
            try:
                self.expire_clients()
                limit = time.monotonic() - IDLE_CONNECTION_SECONDS
                for conn in self.server.connections():
                    if conn.last_read < limit:
                        conn.close("idle for 120 s")
            except Exception:
                log.exception("%s: housekeeping failed", self.name)
