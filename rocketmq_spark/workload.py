"""A sample workload: orders with keys and tags, one sharding key per customer.

Used by ``rocketmq-spark produce --generate`` and the example jobs. Deterministic for a
given seed so runs can be compared."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from typing import Iterator

from rocketmq_spark.structs import Message

TAGS = ("created", "paid", "shipped")


@dataclass(frozen=True)
class Order:
    order_id: str
    customer: str
    status: str
    amount_cents: int
    seq: int

    def to_message(self, topic: str) -> tuple[Message, str]:
        body = json.dumps({"order_id": self.order_id, "customer": self.customer,
                           "status": self.status, "amount_cents": self.amount_cents,
                           "seq": self.seq}, separators=(",", ":")).encode()
        return Message(topic=topic, body=body, tags=self.status, keys=self.order_id), self.customer


def orders(count: int, *, customers: int = 16, seed: int = 7, start: int = 0) -> Iterator[Order]:
    """``count`` order events; each order goes created -> paid -> shipped, per customer in order."""
    rng = random.Random(seed)
    n = start
    while n < start + count:
        customer = f"customer-{rng.randrange(customers):03d}"
        order_id = f"order-{n:08d}"
        amount = rng.randrange(100, 100_000)
        for status in TAGS:
            if n >= start + count:
                return
            yield Order(order_id, customer, status, amount, n)
            n += 1

