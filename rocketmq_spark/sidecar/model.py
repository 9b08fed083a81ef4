"""Domain values of the sidecar API (what the gRPC messages mean, as frozen dataclasses).

The wire (protobuf) types stay in ``v1``; ``converters`` translates one to the other.
Queues, offsets, messages and send results reuse ``rocketmq_spark.structs``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rocketmq_spark.errors import ConfigError
from rocketmq_spark.remoting.route import MessageQueue
from rocketmq_spark.structs import Message
from rocketmq_spark.tls import TlsSettings

API_VERSION = "v1"
# Group used for the sidecar's own pulls (store-time checks of SearchOffsets) and for
# range pulls that name no consumer group.
SIDECAR_GROUP = "rocketmq_spark_sidecar"
DEFAULT_PULL_BATCH_SIZE = 32
DEFAULT_MAX_ROWS_PER_BATCH = 4096
DEFAULT_MAX_RECONSUME_TIMES = 16


DEFAULT_REQUEST_TIMEOUT_MS = 3_000     # as RocketMQ's producer's sendMsgTimeout


@dataclass(frozen=True)
class Cluster:
    """Which cluster a call talks to; the sidecar keeps one client per distinct value."""

    name_server: str
    access_key: str | None = None
    secret_key: str | None = field(default=None, repr=False)
    tls: TlsSettings | None = None
    request_timeout_ms: int = DEFAULT_REQUEST_TIMEOUT_MS   # a request's answer, long polls excepted

    def __post_init__(self) -> None:
        if self.request_timeout_ms <= 0:
            raise ConfigError(f"cluster request_timeout_ms must be > 0, got {self.request_timeout_ms}")
        if not self.name_server or not self.name_server.strip():
            raise ConfigError("cluster name_server is empty (expected 'host:port' or 'h1:port;h2:port')")
        if bool(self.access_key) != bool(self.secret_key):
            raise ConfigError("cluster access_key and secret_key must be given together")

    @classmethod
    def of(cls, value: "Cluster | str") -> "Cluster":
        return value if isinstance(value, Cluster) else cls(value)


@dataclass(frozen=True)
class HealthInfo:
    version: str
    api: str
    pid: int
    uptime_ms: int


@dataclass(frozen=True)
class Outgoing:
    """A message to send; messages with the same ``sharding_key`` go to the same queue."""

    message: Message
    sharding_key: str | None = None


@dataclass(frozen=True)
class SendBackItem:
    """A consumed message to hand back to the broker for redelivery (or the DLQ)."""

    commit_log_offset: int = 0           # the message's PHYSICALOFFSET (0: from offset_msg_id)
    offset_msg_id: str = ""              # store host + commit-log offset
    broker_name: str = ""                # empty: found from offset_msg_id's store host
    origin_msg_id: str = ""
    origin_topic: str = ""
    delay_level: int = 0                 # 0: the broker chooses; < 0: straight to the DLQ
    max_reconsume_times: int = DEFAULT_MAX_RECONSUME_TIMES


@dataclass(frozen=True)
class PullSpec:
    """One half-open range ``[start, end)`` of one queue to read as Arrow."""

    queue: MessageQueue
    start: int
    end: int
    group: str = SIDECAR_GROUP
    sub_expression: str = "*"
    pull_batch_size: int = DEFAULT_PULL_BATCH_SIZE
    max_rows_per_batch: int = DEFAULT_MAX_ROWS_PER_BATCH
    fail_on_data_loss: bool = True
    restore_retry_topic_of: str | None = None
    shared_memory: bool = False           # batches as files in shared memory (same host)
    # ms a read may go on waiting for a broker that stopped answering (0: fail at once)
    broker_unavailable_timeout_ms: int = 0
    expression_type: str = "TAG"          # how the broker reads sub_expression: TAG or SQL92

    def __post_init__(self) -> None:
        if self.start < 0 or self.end < self.start:
            raise ConfigError(f"pull range [{self.start}, {self.end}) of {queue_name(self.queue)} "
                              "is not a range of offsets (need 0 <= start <= end)")
        if not 1 <= self.pull_batch_size <= 1024:
            raise ConfigError(f"pull_batch_size must be in 1..1024, got {self.pull_batch_size}")
        if self.max_rows_per_batch < 1:
            raise ConfigError(f"max_rows_per_batch must be >= 1, got {self.max_rows_per_batch}")
        if self.broker_unavailable_timeout_ms < 0:
            raise ConfigError("broker_unavailable_timeout_ms must be >= 0, got "
                              f"{self.broker_unavailable_timeout_ms}")


def queue_name(q: MessageQueue) -> str:
    """``topic/broker/queue_id``, how errors and logs name a queue."""
    return f"{q.topic}/{q.broker_name}/{q.queue_id}"


# ---------------------------------------------------------------- exactly-once writes

TAG_PROPERTY = "RMQ_SPARK_TXN"      # on every half message of an exactly-once sink


def check_id(what: str, value: str) -> str:
    """Transactional ids and epochs are tags and tag fields: plain, short text."""
    if not value or len(value) > 200 or any(c in value for c in "\x01\x02 |"):
        raise ConfigError(f"{what} {value!r} must be 1..200 characters without spaces, '|' "
                          f"or control characters")
    return value


@dataclass(frozen=True)
class TxnTag:
    """What every half message of an exactly-once sink carries (property RMQ_SPARK_TXN)."""

    log_topic: str
    txn_id: str
    batch: int
    epoch: str
    partition: int
    attempt: int

    def encode(self) -> str:
        return "|".join((self.log_topic, self.txn_id, str(self.batch), self.epoch,
                         str(self.partition), str(self.attempt)))

    @classmethod
    def parse(cls, text: str | None) -> "TxnTag | None":
        parts = (text or "").split("|")
        if len(parts) != 6:
            return None
        try:
            return cls(parts[0], parts[1], int(parts[2]), parts[3], int(parts[4]), int(parts[5]))
        except ValueError:
            return None


@dataclass(frozen=True)
class TxnRef:
    """One batch of one exactly-once sink, as one attempt writes it."""

    log_topic: str
    txn_id: str
    batch: int
    epoch: str

    def __post_init__(self) -> None:
        check_id("transactional id", self.txn_id)
        check_id("epoch", self.epoch)


@dataclass(frozen=True)
class CommitOutcome:
    decided_epoch: str       # the attempt whose half messages count (ours, or an earlier one)
    committed: int           # half messages committed by this call
    rolled_back: int         # half messages of ours rolled back (another attempt decided)
    recovered: int           # half messages of an unfinished earlier commit committed now




@dataclass(frozen=True)
class Indexed:
    """One record a broker's message index answered (QUERY_MESSAGE): where it is and the
    properties a caller checks it with (the index is a hash index)."""

    queue: MessageQueue
    queue_offset: int
    keys: str | None
    uniq_key: str | None
    offset_msg_id: str

    @property
    def msg_id(self) -> str:
        """The ``msg_id`` column's value: UNIQ_KEY, else the offset message id."""
        return self.uniq_key or self.offset_msg_id
