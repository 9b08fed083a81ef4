"""The embedded broker's storage: commit log, consume queues, the message store."""

from rocketmq_spark.embedded.store.commitlog import CommitLog, RecordInfo
from rocketmq_spark.embedded.store.consumequeue import ConsumeQueue
from rocketmq_spark.embedded.store.message_store import (GetResult, GetStatus, MessageStore, PutResult,
                                                         Stored, StoreError)

__all__ = ["CommitLog", "ConsumeQueue", "GetResult", "GetStatus", "MessageStore", "PutResult",
           "RecordInfo", "StoreError", "Stored"]
