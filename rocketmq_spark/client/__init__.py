"""What RocketMQ's MQClientInstance does for one process: routes, send, pull, offsets, locks."""

from rocketmq_spark.client.config import ClientConfig
from rocketmq_spark.client.mqclient import MQClient

__all__ = ["ClientConfig", "MQClient"]
