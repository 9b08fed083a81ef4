"""Sharding key -> queue: the same key always lands on the same queue (and so stays in order).

One rule for every sender (the sidecar's Send, so the sink; the CLI; the jobs), and the rule
of Java's ``SelectMessageQueueByHash``: ``queues[abs(key.hashCode()) % len(queues)]`` over
the topic's sorted send queues, so a key goes to the queue a Java producer sends it to."""

from __future__ import annotations

from typing import Sequence, TypeVar

from rocketmq_spark.remoting.message import java_string_hash

Q = TypeVar("Q")


def select_queue(key: str, queues: Sequence[Q]) -> Q:
    if not queues:
        raise ValueError("no queue to select from")
    return queues[abs(java_string_hash(key)) % len(queues)]
