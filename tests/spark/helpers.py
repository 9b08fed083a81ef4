"""Producing test messages and running AvailableNow queries, shared by the e2e tests."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any, Callable

from rocketmq_spark.remoting.route import MessageQueue
from rocketmq_spark.structs import Message
from tests.waiting import await_finished, wait_until  # noqa: F401 - wait_until: used by the tests


@dataclass(frozen=True)
class Sent:
    queue: MessageQueue
    offset: int
    body: bytes
    tags: str | None
    keys: str | None


def body_for(i: int, salt: str = "") -> bytes:
    """Distinct bodies with every byte value somewhere, and now and then a big one (the
    client compresses big bodies; the source must hand back the original bytes)."""
    head = f"{salt}#{i}:".encode()
    if i % 37 == 5:
        return head + os.urandom(6000)
    return head + bytes([(i * 7 + k) % 256 for k in range(i % 50)]) + b"\x00\xff"


def create_topic(mq: Any, topic: str, queues: int, *, every_master: bool = False) -> list[MessageQueue]:
    """``topic`` with ``queues`` queues on the cluster's first master (the tests' offset
    arithmetic counts on exactly that many), or on every master with ``every_master``; its
    queues, sorted, once the NameServer routes all of them."""
    masters = sorted(mq.cluster_brokers())
    on = masters if every_master else masters[:1]
    mq.create_topic(topic, queues=queues, brokers=on)
    want = queues * len(on)

    def routed() -> list[MessageQueue] | None:
        try:
            got = sorted(mq.publish_queues(topic, refresh=True))
        except Exception:  # noqa: BLE001 - not routed yet
            return None
        return got if len(got) == want else None

    return wait_until(routed, 30, f"the route of {topic} with {want} queues")


def produce(mq: Any, queues: list[MessageQueue], count: int, *, salt: str = "",
            tags: Callable[[int], str | None] = lambda i: None) -> list[Sent]:
    """``count`` messages round robin over ``queues``; what was stored where."""
    out = []
    for i in range(count):
        q = queues[i % len(queues)]
        body, tag = body_for(i, salt), tags(i)
        keys = f"key-{salt}-{i}"
        r = mq.send(Message(q.topic, body, tags=tag, keys=keys), queue=q)
        assert r.status == "SEND_OK", r
        out.append(Sent(r.queue, r.queue_offset, body, tag, keys))
    return out


def run_available_now(df: Any, *, checkpoint: str, sink: str = "memory", path: str | None = None,
                      name: str | None = None, timeout: float = 120.0) -> Any:
    """Run ``df`` with Trigger.AvailableNow to completion; the finished query."""
    w = df.writeStream.option("checkpointLocation", checkpoint).trigger(availableNow=True)
    if sink == "memory":
        w = w.format("memory").queryName(name)
    elif sink == "parquet":
        w = w.format("parquet").option("path", path)
    else:
        w = w.format(sink)
    return await_finished(w.start(), timeout)


def rows_per_batch(q: Any) -> list[int]:
    return [p["numInputRows"] for p in q.recentProgress if p["numInputRows"] or p["sources"]]


def end_offsets(q: Any) -> dict:
    import json

    last = [p for p in q.recentProgress if p["sources"] and p["sources"][0]["endOffset"]]
    end = last[-1]["sources"][0]["endOffset"]
    if not isinstance(end, str):
        return end
    try:
        return json.loads(end)
    except ValueError:    # pyspark 4.0/4.1's progress shows a dict offset as Python's str() of it
        import ast

        return ast.literal_eval(end)


def after_available_now(end: Any, start: Any) -> Any:
    """The group's offsets on the broker after a Trigger.AvailableNow run from ``start`` to
    ``end``. Spark never commits a run's last batch: pyspark 4.2+ asks for the next end with
    it as the start, which commits it; before 4.2 Spark's fallback runs one batch and the
    broker keeps where it began (docs/user-guide.md, Spark releases)."""
    from rocketmq_spark.spark import features

    return end if features.ADMISSION_CONTROL else start


def after_last_store(mq, queues):
    """A timestamp (ms) later than every message stored so far, once the clock passed it."""
    stamps = []
    for q in queues:
        res = mq.pull(q, mq.max_offset(q) - 1, group="spark-tests", max_nums=1)
        stamps.append(res.messages[0].store_timestamp)
    stamp = max(stamps) + 1
    return stamp if time.time() * 1000 > stamp + 1 else None
