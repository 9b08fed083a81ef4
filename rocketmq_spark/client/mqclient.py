"""MQClient: every broker/NameServer operation the project needs, over one Transport.

THIS FILE IS THE CONTRACT other layers code against. Signatures are fixed; bodies are
being implemented. Errors: BrokerError(code, remark, retriable) for non-success answers,
TransportError/RequestTimeout for I/O.
"""

from __future__ import annotations

from typing import Iterable, Sequence

from rocketmq_spark.client.config import ClientConfig
from rocketmq_spark.remoting.bodies import ConsumeStats, ConsumerData
from rocketmq_spark.remoting.message import MessageExt
from rocketmq_spark.remoting.route import MessageQueue, TopicRouteData
from rocketmq_spark.structs import Message, PullResult, SendResult

DEFAULT_PRODUCER_GROUP = "rocketmq_spark_producer"


class MQClient:
    def __init__(self, config: ClientConfig) -> None:
        self.config = config

    def close(self) -> None: ...

    # --- routes (NameServer, with failover across config.name_servers; cached route_ttl)
    def route(self, topic: str, *, refresh: bool = False) -> TopicRouteData: ...
    def subscribe_queues(self, topic: str, *, refresh: bool = False) -> list[MessageQueue]: ...
    def publish_queues(self, topic: str, *, refresh: bool = False) -> list[MessageQueue]: ...
    def master_addr(self, topic: str, broker_name: str) -> str: ...
    def topic_list(self) -> list[str]: ...
    def cluster_brokers(self) -> dict[str, str]: ...   # broker name -> master address

    # --- send (SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE); queue=None: round robin over publish queues
    def send(self, message: Message, *, queue: MessageQueue | None = None,
             producer_group: str = DEFAULT_PRODUCER_GROUP, timeout: float | None = None) -> SendResult: ...
    def send_batch(self, messages: Sequence[Message], *, queue: MessageQueue | None = None,
                   producer_group: str = DEFAULT_PRODUCER_GROUP) -> SendResult: ...
    def send_oneway(self, message: Message, *, queue: MessageQueue | None = None,
                    producer_group: str = DEFAULT_PRODUCER_GROUP) -> None: ...

    # --- pull (SUBSCRIPTION flag always; SUSPEND when suspend_ms > 0; COMMIT_OFFSET when
    #     commit_offset is not None). Messages are exact-tag re-filtered client side.
    def pull(self, queue: MessageQueue, offset: int, *, group: str, max_nums: int = 32,
             expression: str = "*", commit_offset: int | None = None, suspend_ms: int = 0,
             timeout: float | None = None) -> PullResult: ...

    # --- offsets (master of the queue's broker)
    def query_consumer_offset(self, group: str, queue: MessageQueue) -> int | None: ...
    def update_consumer_offset(self, group: str, queue: MessageQueue, offset: int, *,
                               oneway: bool = False) -> None: ...
    def max_offset(self, queue: MessageQueue) -> int: ...
    def min_offset(self, queue: MessageQueue) -> int: ...
    def search_offset(self, queue: MessageQueue, timestamp_ms: int) -> int: ...
    def earliest_store_time(self, queue: MessageQueue) -> int: ...
    def consume_stats(self, group: str, topic: str | None = None) -> ConsumeStats: ...   # merged over brokers

    # --- locks (grouped per broker, LOCK_BATCH_MQ / UNLOCK_BATCH_MQ to each master)
    def lock_batch(self, group: str, client_id: str, queues: Iterable[MessageQueue]) -> frozenset[MessageQueue]: ...
    def unlock_batch(self, group: str, client_id: str, queues: Iterable[MessageQueue]) -> None: ...

    # --- membership
    def heartbeat(self, *, client_id: str | None = None, consumers: Sequence[ConsumerData] = (),
                  producer_groups: Sequence[str] = ()) -> None: ...   # to every master known
    def unregister(self, *, client_id: str | None = None, producer_group: str | None = None,
                   consumer_group: str | None = None) -> None: ...
    def consumer_list(self, group: str, topic: str) -> tuple[str, ...]: ...

    # --- retry
    def send_back(self, message: MessageExt, *, group: str, delay_level: int = 0,
                  broker_name: str | None = None, max_reconsume_times: int = 16) -> None: ...

    # --- admin
    def create_topic(self, topic: str, *, queues: int = 4, perm: int = 6,
                     brokers: Sequence[str] | None = None) -> None: ...  # every master if None
