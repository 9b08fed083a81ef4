"""What RocketMQ's MQClientInstance does for one process: routes, send, pull, offsets, locks."""

from rocketmq_spark.client.admin import TopicOffset
from rocketmq_spark.client.config import ClientConfig
from rocketmq_spark.client.mqclient import DEFAULT_PRODUCER_GROUP, MQClient

__all__ = ["ClientConfig", "DEFAULT_PRODUCER_GROUP", "MQClient", "TopicOffset"]
