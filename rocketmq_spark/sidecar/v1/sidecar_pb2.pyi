from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Cluster(_message.Message):
    __slots__ = ("name_server", "access_key", "secret_key", "tls", "request_timeout_ms")
    NAME_SERVER_FIELD_NUMBER: _ClassVar[int]
    ACCESS_KEY_FIELD_NUMBER: _ClassVar[int]
    SECRET_KEY_FIELD_NUMBER: _ClassVar[int]
    TLS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    name_server: str
    access_key: str
    secret_key: str
    tls: Tls
    request_timeout_ms: int
    def __init__(self, name_server: _Optional[str] = ..., access_key: _Optional[str] = ..., secret_key: _Optional[str] = ..., tls: _Optional[_Union[Tls, _Mapping]] = ..., request_timeout_ms: _Optional[int] = ...) -> None: ...

class Tls(_message.Message):
    __slots__ = ("ca_file", "cert_file", "key_file", "key_password", "verify")
    CA_FILE_FIELD_NUMBER: _ClassVar[int]
    CERT_FILE_FIELD_NUMBER: _ClassVar[int]
    KEY_FILE_FIELD_NUMBER: _ClassVar[int]
    KEY_PASSWORD_FIELD_NUMBER: _ClassVar[int]
    VERIFY_FIELD_NUMBER: _ClassVar[int]
    ca_file: str
    cert_file: str
    key_file: str
    key_password: str
    verify: str
    def __init__(self, ca_file: _Optional[str] = ..., cert_file: _Optional[str] = ..., key_file: _Optional[str] = ..., key_password: _Optional[str] = ..., verify: _Optional[str] = ...) -> None: ...

class MessageQueue(_message.Message):
    __slots__ = ("topic", "broker_name", "queue_id")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    topic: str
    broker_name: str
    queue_id: int
    def __init__(self, topic: _Optional[str] = ..., broker_name: _Optional[str] = ..., queue_id: _Optional[int] = ...) -> None: ...

class HealthRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class HealthResponse(_message.Message):
    __slots__ = ("version", "api", "pid", "uptime_ms")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    API_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    UPTIME_MS_FIELD_NUMBER: _ClassVar[int]
    version: str
    api: str
    pid: int
    uptime_ms: int
    def __init__(self, version: _Optional[str] = ..., api: _Optional[str] = ..., pid: _Optional[int] = ..., uptime_ms: _Optional[int] = ...) -> None: ...

class GetQueuesRequest(_message.Message):
    __slots__ = ("cluster", "topics", "refresh")
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    REFRESH_FIELD_NUMBER: _ClassVar[int]
    cluster: Cluster
    topics: _containers.RepeatedScalarFieldContainer[str]
    refresh: bool
    def __init__(self, cluster: _Optional[_Union[Cluster, _Mapping]] = ..., topics: _Optional[_Iterable[str]] = ..., refresh: _Optional[bool] = ...) -> None: ...

class GetQueuesResponse(_message.Message):
    __slots__ = ("queues",)
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    queues: _containers.RepeatedCompositeFieldContainer[MessageQueue]
    def __init__(self, queues: _Optional[_Iterable[_Union[MessageQueue, _Mapping]]] = ...) -> None: ...

class GetOffsetsRequest(_message.Message):
    __slots__ = ("cluster", "queues", "consumer_group", "replica_reads")
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    REPLICA_READS_FIELD_NUMBER: _ClassVar[int]
    cluster: Cluster
    queues: _containers.RepeatedCompositeFieldContainer[MessageQueue]
    consumer_group: str
    replica_reads: bool
    def __init__(self, cluster: _Optional[_Union[Cluster, _Mapping]] = ..., queues: _Optional[_Iterable[_Union[MessageQueue, _Mapping]]] = ..., consumer_group: _Optional[str] = ..., replica_reads: _Optional[bool] = ...) -> None: ...

class QueueOffsets(_message.Message):
    __slots__ = ("queue", "min_offset", "max_offset", "has_committed", "committed")
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    MIN_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAX_OFFSET_FIELD_NUMBER: _ClassVar[int]
    HAS_COMMITTED_FIELD_NUMBER: _ClassVar[int]
    COMMITTED_FIELD_NUMBER: _ClassVar[int]
    queue: MessageQueue
    min_offset: int
    max_offset: int
    has_committed: bool
    committed: int
    def __init__(self, queue: _Optional[_Union[MessageQueue, _Mapping]] = ..., min_offset: _Optional[int] = ..., max_offset: _Optional[int] = ..., has_committed: _Optional[bool] = ..., committed: _Optional[int] = ...) -> None: ...

class GetOffsetsResponse(_message.Message):
    __slots__ = ("offsets",)
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    offsets: _containers.RepeatedCompositeFieldContainer[QueueOffsets]
    def __init__(self, offsets: _Optional[_Iterable[_Union[QueueOffsets, _Mapping]]] = ...) -> None: ...

class SearchOffsetsRequest(_message.Message):
    __slots__ = ("cluster", "queues", "timestamp_ms")
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    cluster: Cluster
    queues: _containers.RepeatedCompositeFieldContainer[MessageQueue]
    timestamp_ms: int
    def __init__(self, cluster: _Optional[_Union[Cluster, _Mapping]] = ..., queues: _Optional[_Iterable[_Union[MessageQueue, _Mapping]]] = ..., timestamp_ms: _Optional[int] = ...) -> None: ...

class QueueOffset(_message.Message):
    __slots__ = ("queue", "offset")
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    queue: MessageQueue
    offset: int
    def __init__(self, queue: _Optional[_Union[MessageQueue, _Mapping]] = ..., offset: _Optional[int] = ...) -> None: ...

class SearchOffsetsResponse(_message.Message):
    __slots__ = ("offsets",)
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    offsets: _containers.RepeatedCompositeFieldContainer[QueueOffset]
    def __init__(self, offsets: _Optional[_Iterable[_Union[QueueOffset, _Mapping]]] = ...) -> None: ...

class QueryMessagesRequest(_message.Message):
    __slots__ = ("cluster", "topic", "key", "unique", "max_num", "brokers")
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    UNIQUE_FIELD_NUMBER: _ClassVar[int]
    MAX_NUM_FIELD_NUMBER: _ClassVar[int]
    BROKERS_FIELD_NUMBER: _ClassVar[int]
    cluster: Cluster
    topic: str
    key: str
    unique: bool
    max_num: int
    brokers: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, cluster: _Optional[_Union[Cluster, _Mapping]] = ..., topic: _Optional[str] = ..., key: _Optional[str] = ..., unique: _Optional[bool] = ..., max_num: _Optional[int] = ..., brokers: _Optional[_Iterable[str]] = ...) -> None: ...

class IndexedMessage(_message.Message):
    __slots__ = ("queue", "queue_offset", "keys", "uniq_key", "has_keys", "offset_msg_id")
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    QUEUE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    KEYS_FIELD_NUMBER: _ClassVar[int]
    UNIQ_KEY_FIELD_NUMBER: _ClassVar[int]
    HAS_KEYS_FIELD_NUMBER: _ClassVar[int]
    OFFSET_MSG_ID_FIELD_NUMBER: _ClassVar[int]
    queue: MessageQueue
    queue_offset: int
    keys: str
    uniq_key: str
    has_keys: bool
    offset_msg_id: str
    def __init__(self, queue: _Optional[_Union[MessageQueue, _Mapping]] = ..., queue_offset: _Optional[int] = ..., keys: _Optional[str] = ..., uniq_key: _Optional[str] = ..., has_keys: _Optional[bool] = ..., offset_msg_id: _Optional[str] = ...) -> None: ...

class BrokerAnswer(_message.Message):
    __slots__ = ("broker_name", "found")
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    FOUND_FIELD_NUMBER: _ClassVar[int]
    broker_name: str
    found: _containers.RepeatedCompositeFieldContainer[IndexedMessage]
    def __init__(self, broker_name: _Optional[str] = ..., found: _Optional[_Iterable[_Union[IndexedMessage, _Mapping]]] = ...) -> None: ...

class QueryMessagesResponse(_message.Message):
    __slots__ = ("answers",)
    ANSWERS_FIELD_NUMBER: _ClassVar[int]
    answers: _containers.RepeatedCompositeFieldContainer[BrokerAnswer]
    def __init__(self, answers: _Optional[_Iterable[_Union[BrokerAnswer, _Mapping]]] = ...) -> None: ...

class LockRequest(_message.Message):
    __slots__ = ("cluster", "consumer_group", "owner_id", "queues", "keep_renewed", "holder")
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    OWNER_ID_FIELD_NUMBER: _ClassVar[int]
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    KEEP_RENEWED_FIELD_NUMBER: _ClassVar[int]
    HOLDER_FIELD_NUMBER: _ClassVar[int]
    cluster: Cluster
    consumer_group: str
    owner_id: str
    queues: _containers.RepeatedCompositeFieldContainer[MessageQueue]
    keep_renewed: bool
    holder: ProcessRef
    def __init__(self, cluster: _Optional[_Union[Cluster, _Mapping]] = ..., consumer_group: _Optional[str] = ..., owner_id: _Optional[str] = ..., queues: _Optional[_Iterable[_Union[MessageQueue, _Mapping]]] = ..., keep_renewed: _Optional[bool] = ..., holder: _Optional[_Union[ProcessRef, _Mapping]] = ...) -> None: ...

class ProcessRef(_message.Message):
    __slots__ = ("boot_id", "pid_namespace", "pid", "start_ticks")
    BOOT_ID_FIELD_NUMBER: _ClassVar[int]
    PID_NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    START_TICKS_FIELD_NUMBER: _ClassVar[int]
    boot_id: str
    pid_namespace: int
    pid: int
    start_ticks: int
    def __init__(self, boot_id: _Optional[str] = ..., pid_namespace: _Optional[int] = ..., pid: _Optional[int] = ..., start_ticks: _Optional[int] = ...) -> None: ...

class LockResponse(_message.Message):
    __slots__ = ("locked",)
    LOCKED_FIELD_NUMBER: _ClassVar[int]
    locked: _containers.RepeatedCompositeFieldContainer[MessageQueue]
    def __init__(self, locked: _Optional[_Iterable[_Union[MessageQueue, _Mapping]]] = ...) -> None: ...

class UnlockRequest(_message.Message):
    __slots__ = ("cluster", "consumer_group", "owner_id", "queues")
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    OWNER_ID_FIELD_NUMBER: _ClassVar[int]
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    cluster: Cluster
    consumer_group: str
    owner_id: str
    queues: _containers.RepeatedCompositeFieldContainer[MessageQueue]
    def __init__(self, cluster: _Optional[_Union[Cluster, _Mapping]] = ..., consumer_group: _Optional[str] = ..., owner_id: _Optional[str] = ..., queues: _Optional[_Iterable[_Union[MessageQueue, _Mapping]]] = ...) -> None: ...

class UnlockResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class Subscription(_message.Message):
    __slots__ = ("topic", "expression", "expression_type")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    EXPRESSION_FIELD_NUMBER: _ClassVar[int]
    EXPRESSION_TYPE_FIELD_NUMBER: _ClassVar[int]
    topic: str
    expression: str
    expression_type: str
    def __init__(self, topic: _Optional[str] = ..., expression: _Optional[str] = ..., expression_type: _Optional[str] = ...) -> None: ...

class RegisterConsumerRequest(_message.Message):
    __slots__ = ("cluster", "consumer_group", "client_id", "message_model", "consume_from_where", "subscriptions", "holder")
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_MODEL_FIELD_NUMBER: _ClassVar[int]
    CONSUME_FROM_WHERE_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIPTIONS_FIELD_NUMBER: _ClassVar[int]
    HOLDER_FIELD_NUMBER: _ClassVar[int]
    cluster: Cluster
    consumer_group: str
    client_id: str
    message_model: str
    consume_from_where: str
    subscriptions: _containers.RepeatedCompositeFieldContainer[Subscription]
    holder: ProcessRef
    def __init__(self, cluster: _Optional[_Union[Cluster, _Mapping]] = ..., consumer_group: _Optional[str] = ..., client_id: _Optional[str] = ..., message_model: _Optional[str] = ..., consume_from_where: _Optional[str] = ..., subscriptions: _Optional[_Iterable[_Union[Subscription, _Mapping]]] = ..., holder: _Optional[_Union[ProcessRef, _Mapping]] = ...) -> None: ...

class RegisterConsumerResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class UnregisterConsumerRequest(_message.Message):
    __slots__ = ("cluster", "consumer_group", "client_id")
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    cluster: Cluster
    consumer_group: str
    client_id: str
    def __init__(self, cluster: _Optional[_Union[Cluster, _Mapping]] = ..., consumer_group: _Optional[str] = ..., client_id: _Optional[str] = ...) -> None: ...

class UnregisterConsumerResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class PullRequest(_message.Message):
    __slots__ = ("cluster", "consumer_group", "queue", "start_offset", "end_offset", "sub_expression", "pull_batch_size", "max_rows_per_batch", "fail_on_data_loss", "restore_retry_topic_of", "shared_memory", "broker_unavailable_timeout_ms", "expression_type")
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    START_OFFSET_FIELD_NUMBER: _ClassVar[int]
    END_OFFSET_FIELD_NUMBER: _ClassVar[int]
    SUB_EXPRESSION_FIELD_NUMBER: _ClassVar[int]
    PULL_BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    MAX_ROWS_PER_BATCH_FIELD_NUMBER: _ClassVar[int]
    FAIL_ON_DATA_LOSS_FIELD_NUMBER: _ClassVar[int]
    RESTORE_RETRY_TOPIC_OF_FIELD_NUMBER: _ClassVar[int]
    SHARED_MEMORY_FIELD_NUMBER: _ClassVar[int]
    BROKER_UNAVAILABLE_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    EXPRESSION_TYPE_FIELD_NUMBER: _ClassVar[int]
    cluster: Cluster
    consumer_group: str
    queue: MessageQueue
    start_offset: int
    end_offset: int
    sub_expression: str
    pull_batch_size: int
    max_rows_per_batch: int
    fail_on_data_loss: bool
    restore_retry_topic_of: str
    shared_memory: bool
    broker_unavailable_timeout_ms: int
    expression_type: str
    def __init__(self, cluster: _Optional[_Union[Cluster, _Mapping]] = ..., consumer_group: _Optional[str] = ..., queue: _Optional[_Union[MessageQueue, _Mapping]] = ..., start_offset: _Optional[int] = ..., end_offset: _Optional[int] = ..., sub_expression: _Optional[str] = ..., pull_batch_size: _Optional[int] = ..., max_rows_per_batch: _Optional[int] = ..., fail_on_data_loss: _Optional[bool] = ..., restore_retry_topic_of: _Optional[str] = ..., shared_memory: _Optional[bool] = ..., broker_unavailable_timeout_ms: _Optional[int] = ..., expression_type: _Optional[str] = ...) -> None: ...

class ArrowChunk(_message.Message):
    __slots__ = ("ipc", "shm_path")
    IPC_FIELD_NUMBER: _ClassVar[int]
    SHM_PATH_FIELD_NUMBER: _ClassVar[int]
    ipc: bytes
    shm_path: str
    def __init__(self, ipc: _Optional[bytes] = ..., shm_path: _Optional[str] = ...) -> None: ...

class CommitOffsetsRequest(_message.Message):
    __slots__ = ("cluster", "consumer_group", "offsets")
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    cluster: Cluster
    consumer_group: str
    offsets: _containers.RepeatedCompositeFieldContainer[QueueOffset]
    def __init__(self, cluster: _Optional[_Union[Cluster, _Mapping]] = ..., consumer_group: _Optional[str] = ..., offsets: _Optional[_Iterable[_Union[QueueOffset, _Mapping]]] = ...) -> None: ...

class CommitOffsetsResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class OutMessage(_message.Message):
    __slots__ = ("topic", "body", "tags", "keys", "properties", "sharding_key", "delay_level")
    class PropertiesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    BODY_FIELD_NUMBER: _ClassVar[int]
    TAGS_FIELD_NUMBER: _ClassVar[int]
    KEYS_FIELD_NUMBER: _ClassVar[int]
    PROPERTIES_FIELD_NUMBER: _ClassVar[int]
    SHARDING_KEY_FIELD_NUMBER: _ClassVar[int]
    DELAY_LEVEL_FIELD_NUMBER: _ClassVar[int]
    topic: str
    body: bytes
    tags: str
    keys: str
    properties: _containers.ScalarMap[str, str]
    sharding_key: str
    delay_level: int
    def __init__(self, topic: _Optional[str] = ..., body: _Optional[bytes] = ..., tags: _Optional[str] = ..., keys: _Optional[str] = ..., properties: _Optional[_Mapping[str, str]] = ..., sharding_key: _Optional[str] = ..., delay_level: _Optional[int] = ...) -> None: ...

class SendRequest(_message.Message):
    __slots__ = ("cluster", "producer_group", "messages", "transaction_tag", "broker_unavailable_timeout_ms", "compression")
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_GROUP_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    TRANSACTION_TAG_FIELD_NUMBER: _ClassVar[int]
    BROKER_UNAVAILABLE_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    COMPRESSION_FIELD_NUMBER: _ClassVar[int]
    cluster: Cluster
    producer_group: str
    messages: _containers.RepeatedCompositeFieldContainer[OutMessage]
    transaction_tag: str
    broker_unavailable_timeout_ms: int
    compression: Compression
    def __init__(self, cluster: _Optional[_Union[Cluster, _Mapping]] = ..., producer_group: _Optional[str] = ..., messages: _Optional[_Iterable[_Union[OutMessage, _Mapping]]] = ..., transaction_tag: _Optional[str] = ..., broker_unavailable_timeout_ms: _Optional[int] = ..., compression: _Optional[_Union[Compression, _Mapping]] = ...) -> None: ...

class Compression(_message.Message):
    __slots__ = ("codec", "over_bytes")
    CODEC_FIELD_NUMBER: _ClassVar[int]
    OVER_BYTES_FIELD_NUMBER: _ClassVar[int]
    codec: str
    over_bytes: int
    def __init__(self, codec: _Optional[str] = ..., over_bytes: _Optional[int] = ...) -> None: ...

class SendResult(_message.Message):
    __slots__ = ("status", "msg_id", "offset_msg_id", "queue", "queue_offset")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    MSG_ID_FIELD_NUMBER: _ClassVar[int]
    OFFSET_MSG_ID_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    QUEUE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    status: str
    msg_id: str
    offset_msg_id: str
    queue: MessageQueue
    queue_offset: int
    def __init__(self, status: _Optional[str] = ..., msg_id: _Optional[str] = ..., offset_msg_id: _Optional[str] = ..., queue: _Optional[_Union[MessageQueue, _Mapping]] = ..., queue_offset: _Optional[int] = ...) -> None: ...

class SendResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[SendResult]
    def __init__(self, results: _Optional[_Iterable[_Union[SendResult, _Mapping]]] = ...) -> None: ...

class SendBackItem(_message.Message):
    __slots__ = ("broker_name", "commit_log_offset", "offset_msg_id", "origin_msg_id", "origin_topic", "delay_level", "max_reconsume_times")
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    COMMIT_LOG_OFFSET_FIELD_NUMBER: _ClassVar[int]
    OFFSET_MSG_ID_FIELD_NUMBER: _ClassVar[int]
    ORIGIN_MSG_ID_FIELD_NUMBER: _ClassVar[int]
    ORIGIN_TOPIC_FIELD_NUMBER: _ClassVar[int]
    DELAY_LEVEL_FIELD_NUMBER: _ClassVar[int]
    MAX_RECONSUME_TIMES_FIELD_NUMBER: _ClassVar[int]
    broker_name: str
    commit_log_offset: int
    offset_msg_id: str
    origin_msg_id: str
    origin_topic: str
    delay_level: int
    max_reconsume_times: int
    def __init__(self, broker_name: _Optional[str] = ..., commit_log_offset: _Optional[int] = ..., offset_msg_id: _Optional[str] = ..., origin_msg_id: _Optional[str] = ..., origin_topic: _Optional[str] = ..., delay_level: _Optional[int] = ..., max_reconsume_times: _Optional[int] = ...) -> None: ...

class SendBackRequest(_message.Message):
    __slots__ = ("cluster", "consumer_group", "items")
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    cluster: Cluster
    consumer_group: str
    items: _containers.RepeatedCompositeFieldContainer[SendBackItem]
    def __init__(self, cluster: _Optional[_Union[Cluster, _Mapping]] = ..., consumer_group: _Optional[str] = ..., items: _Optional[_Iterable[_Union[SendBackItem, _Mapping]]] = ...) -> None: ...

class SendBackResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class Transaction(_message.Message):
    __slots__ = ("log_topic", "transactional_id", "batch_id", "epoch")
    LOG_TOPIC_FIELD_NUMBER: _ClassVar[int]
    TRANSACTIONAL_ID_FIELD_NUMBER: _ClassVar[int]
    BATCH_ID_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    log_topic: str
    transactional_id: str
    batch_id: int
    epoch: str
    def __init__(self, log_topic: _Optional[str] = ..., transactional_id: _Optional[str] = ..., batch_id: _Optional[int] = ..., epoch: _Optional[str] = ...) -> None: ...

class TaskAttempt(_message.Message):
    __slots__ = ("partition", "attempt")
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    partition: int
    attempt: int
    def __init__(self, partition: _Optional[int] = ..., attempt: _Optional[int] = ...) -> None: ...

class HalfMessages(_message.Message):
    __slots__ = ("queue", "commit_log_offsets", "tran_state_table_offsets", "msg_ids")
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    COMMIT_LOG_OFFSETS_FIELD_NUMBER: _ClassVar[int]
    TRAN_STATE_TABLE_OFFSETS_FIELD_NUMBER: _ClassVar[int]
    MSG_IDS_FIELD_NUMBER: _ClassVar[int]
    queue: MessageQueue
    commit_log_offsets: _containers.RepeatedScalarFieldContainer[int]
    tran_state_table_offsets: _containers.RepeatedScalarFieldContainer[int]
    msg_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, queue: _Optional[_Union[MessageQueue, _Mapping]] = ..., commit_log_offsets: _Optional[_Iterable[int]] = ..., tran_state_table_offsets: _Optional[_Iterable[int]] = ..., msg_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class CommitTransactionRequest(_message.Message):
    __slots__ = ("cluster", "producer_group", "transaction", "tasks", "messages", "ordered")
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_GROUP_FIELD_NUMBER: _ClassVar[int]
    TRANSACTION_FIELD_NUMBER: _ClassVar[int]
    TASKS_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    ORDERED_FIELD_NUMBER: _ClassVar[int]
    cluster: Cluster
    producer_group: str
    transaction: Transaction
    tasks: _containers.RepeatedCompositeFieldContainer[TaskAttempt]
    messages: _containers.RepeatedCompositeFieldContainer[HalfMessages]
    ordered: bool
    def __init__(self, cluster: _Optional[_Union[Cluster, _Mapping]] = ..., producer_group: _Optional[str] = ..., transaction: _Optional[_Union[Transaction, _Mapping]] = ..., tasks: _Optional[_Iterable[_Union[TaskAttempt, _Mapping]]] = ..., messages: _Optional[_Iterable[_Union[HalfMessages, _Mapping]]] = ..., ordered: _Optional[bool] = ...) -> None: ...

class CommitTransactionResponse(_message.Message):
    __slots__ = ("decided_epoch", "committed", "rolled_back", "recovered")
    DECIDED_EPOCH_FIELD_NUMBER: _ClassVar[int]
    COMMITTED_FIELD_NUMBER: _ClassVar[int]
    ROLLED_BACK_FIELD_NUMBER: _ClassVar[int]
    RECOVERED_FIELD_NUMBER: _ClassVar[int]
    decided_epoch: str
    committed: int
    rolled_back: int
    recovered: int
    def __init__(self, decided_epoch: _Optional[str] = ..., committed: _Optional[int] = ..., rolled_back: _Optional[int] = ..., recovered: _Optional[int] = ...) -> None: ...

class AbortTransactionRequest(_message.Message):
    __slots__ = ("cluster", "producer_group", "transaction", "messages")
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_GROUP_FIELD_NUMBER: _ClassVar[int]
    TRANSACTION_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    cluster: Cluster
    producer_group: str
    transaction: Transaction
    messages: _containers.RepeatedCompositeFieldContainer[HalfMessages]
    def __init__(self, cluster: _Optional[_Union[Cluster, _Mapping]] = ..., producer_group: _Optional[str] = ..., transaction: _Optional[_Union[Transaction, _Mapping]] = ..., messages: _Optional[_Iterable[_Union[HalfMessages, _Mapping]]] = ...) -> None: ...

class AbortTransactionResponse(_message.Message):
    __slots__ = ("rolled_back", "decided")
    ROLLED_BACK_FIELD_NUMBER: _ClassVar[int]
    DECIDED_FIELD_NUMBER: _ClassVar[int]
    rolled_back: int
    decided: bool
    def __init__(self, rolled_back: _Optional[int] = ..., decided: _Optional[bool] = ...) -> None: ...
