"""Which queue a message goes to: by its sharding key, else each queue in turn.

A sharding key always lands on the same queue (and so stays in order). One rule for every
sender (the sidecar's Send, so the sink; the CLI; the jobs), and the rule of Java's
``SelectMessageQueueByHash``: ``queues[abs(key.hashCode()) % len(queues)]`` over the topic's
sorted send queues, so a key goes to the queue a Java producer sends it to.

Messages without a key take turns (``ROUND_ROBIN``): one counter per topic for the whole
process, started at a random queue as Java's producer starts its ``sendWhichQueue``, so
the many short sends of a long-lived sidecar (a sink's Send call carries 256 rows) spread
over every queue instead of each starting again at the first."""

from __future__ import annotations

import itertools
import random
import threading
from typing import Iterator, Sequence, TypeVar

from rocketmq_spark.remoting.message import java_string_hash

Q = TypeVar("Q")


def select_queue(key: str, queues: Sequence[Q]) -> Q:
    if not queues:
        raise ValueError("no queue to select from")
    return queues[abs(java_string_hash(key)) % len(queues)]


class RoundRobin:
    """Turns per topic, shared by every sender of the process: ``take(topic)`` is the next
    turn (a queue is ``queues[turn % len(queues)]``), counting from a random start."""

    def __init__(self, seed: int | None = None) -> None:
        self._rng = random.Random(seed)
        self._turns: dict[str, Iterator[int]] = {}
        self._lock = threading.Lock()

    def take(self, topic: str) -> int:
        with self._lock:
            turns = self._turns.get(topic)
            if turns is None:
                turns = self._turns[topic] = itertools.count(self._rng.randrange(1 << 30))
            return next(turns)

    def select(self, topic: str, queues: Sequence[Q]) -> Q:
        if not queues:
            raise ValueError("no queue to select from")
        return queues[self.take(topic) % len(queues)]


ROUND_ROBIN = RoundRobin()
