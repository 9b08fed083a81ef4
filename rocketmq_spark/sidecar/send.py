"""Sending a list of messages: sharding keys pick queues, runs to one queue go as batches.

A ``sharding_key`` picks its queue among the topic's send queues with
``sharding.select_queue`` (the rule of Java's SelectMessageQueueByHash), so one key always
lands on one queue while the route is stable and its messages keep their order; a topic
without a route yet is sent to on TBW102's brokers, which create it (as without a key).
Messages without a key take turns over the queues, a batch at a time, with the turns of the
whole process (``sharding.ROUND_ROBIN``): successive calls go on where the last one
stopped. Consecutive messages bound for the same queue (or, without a key, the same topic)
are sent with SEND_BATCH_MESSAGE in runs of up to ``max_batch_messages`` /
``max_batch_bytes``; delayed messages and %RETRY%/%DLQ% topics are sent one by one (the
broker refuses them in batches). Results come back in request order.

``send_halves`` sends messages as half messages (exactly-once writes): one request each
(brokers take no transactional batches), up to ``HALF_DEPTH`` in flight, every message
carrying the transaction's tag; queues are chosen as above. A half message a busy broker
refused goes again after a pause (``client.busy``).
"""

from __future__ import annotations

import logging
from collections import deque
from dataclasses import replace
from typing import Any, Protocol, Sequence

from rocketmq_spark.client.busy import send_again
from rocketmq_spark.client.pipeline import NotSent, PipelineFailed, SendPipeline
from rocketmq_spark.client.pipeline import Sender as Sender
from rocketmq_spark.errors import RequestTimeout, RocketMQError
from rocketmq_spark.remoting.codes import TransactionState
from rocketmq_spark.remoting.compression import DEFAULT_COMPRESSION, Compression
from rocketmq_spark.remoting.message import PROP_SHARDING_KEY
from rocketmq_spark.remoting.route import MessageQueue
from rocketmq_spark.sharding import ROUND_ROBIN, RoundRobin, select_queue
from rocketmq_spark.sidecar.model import Outgoing
from rocketmq_spark.structs import HalfMessage, Message, SendResult

log = logging.getLogger(__name__)

MAX_BATCH_MESSAGES = 256
MAX_BATCH_BYTES = 1 << 20


HALF_DEPTH = 64
SEND_DEPTH = 8
# A half message without an answer in time is sent again (to its queue) this many times: a
# copy the broker did store is never committed (the batch's decision names the copy whose
# answer came) and is rolled back at its check-back.
HALF_TIMEOUT_RETRIES = 2


def explode(result: SendResult, n: int) -> list[SendResult]:
    """Per-message results of a batch send (ids joined by ',', consecutive offsets)."""
    ids = result.msg_id.split(",")
    offs = result.offset_msg_id.split(",")
    return [replace(result, msg_id=ids[i] if len(ids) == n else result.msg_id,
                    offset_msg_id=offs[i] if len(offs) == n else result.offset_msg_id,
                    queue_offset=result.queue_offset + i) for i in range(n)]


def send_all(client: Sender, items: Sequence[Outgoing], producer_group: str, *,
             max_batch_messages: int = MAX_BATCH_MESSAGES, max_batch_bytes: int = MAX_BATCH_BYTES,
             depth: int = SEND_DEPTH, unreachable_timeout: float = 0.0,
             compression: Compression = DEFAULT_COMPRESSION) -> list[SendResult]:
    """Every message acknowledged, results in request order; PipelineFailed (a RocketMQError
    naming the broker's code) when any request failed. ``unreachable_timeout``: how long a
    keyed message waits for a broker that cannot be reached (``SendPipeline``)."""
    results: list[SendResult | None] = [None] * len(items)

    def record(refs: Sequence[Any], result: SendResult) -> None:
        for i, one in zip(refs, explode(result, len(refs))):
            results[i] = one

    pipe = SendPipeline(client, producer_group=producer_group, batch_size=max_batch_messages,
                        batch_bytes=max_batch_bytes, depth=depth, on_result=record,
                        unreachable_timeout=unreachable_timeout, compression=compression)
    for i, item in enumerate(items):
        msg = item.message
        if item.sharding_key:
            msg = replace(msg, properties={**msg.properties, PROP_SHARDING_KEY: item.sharding_key})
        pipe.add(msg, item.sharding_key, i)
    try:
        pipe.close()
    except PipelineFailed as exc:
        raise exc.cause() from None
    return [r for r in results if r is not None]


class HalfSender(Protocol):
    def send_queues(self, topic: str, *, keyed: bool = False) -> list[MessageQueue]: ...
    def send_async(self, message: Message, *, queue: MessageQueue, producer_group: str = ...,
                   transactional: bool = False, timeout: float | None = None,
                   compression: Compression | None = None) -> Any: ...
    def end_transaction(self, half: HalfMessage, state: int, *, producer_group: str,
                        oneway: bool = False) -> Any: ...


def send_halves(client: HalfSender, items: Sequence[Outgoing], producer_group: str, tag: str, *,
                tag_property: str, depth: int = HALF_DEPTH,
                rotation: RoundRobin = ROUND_ROBIN, unreachable_timeout: float = 0.0,
                compression: Compression = DEFAULT_COMPRESSION) -> list[SendResult]:
    """Each message as a half message tagged ``tag``; results (the half messages' offsets)
    in request order. A half message whose broker is busy, or cannot be reached (nothing
    sent; for up to ``unreachable_timeout`` seconds), goes again to its queue. The first
    failure raises once the requests in flight are answered, after the half messages
    already stored are rolled back (best effort: any left over are rolled back when the
    broker checks them back)."""
    queues: dict[str, list[MessageQueue]] = {}
    keyed: dict[str, list[MessageQueue]] = {}
    pending: deque[Any] = deque()
    results: list[SendResult] = []
    failure: Exception | None = None

    def submit(msg: Message, queue: MessageQueue) -> Any:
        try:
            return client.send_async(msg, queue=queue, producer_group=producer_group, transactional=True,
                                     compression=compression)
        except RocketMQError as exc:       # could not go out: the error is its answer
            return NotSent(exc)

    def answer(call: Any, msg: Message, queue: MessageQueue) -> SendResult:
        try:
            return call.result()
        except RocketMQError as first:
            exc = first

        def again() -> SendResult:
            return submit(msg, queue).result()
        for n in range(HALF_TIMEOUT_RETRIES):
            if not isinstance(exc, RequestTimeout):
                break
            log.info("half message to %s: %s; sending it again (%d of %d)", queue, exc, n + 1,
                     HALF_TIMEOUT_RETRIES)
            try:
                return again()
            except RocketMQError as later:
                exc = later
        # busy or unreachable: nothing stored, the same half message again, later
        return send_again(again, exc, queue=queue, unreachable_timeout=unreachable_timeout,
                          route=getattr(client, "route", None))

    def settle() -> None:
        nonlocal failure
        call, msg, queue = pending.popleft()
        try:
            results.append(answer(call, msg, queue))
        except Exception as exc:  # noqa: BLE001 - the first one is raised below
            failure = failure or exc

    for item in items:
        msg = item.message
        if item.sharding_key:
            if msg.topic not in keyed:
                keyed[msg.topic] = client.send_queues(msg.topic, keyed=True)
            queue = select_queue(item.sharding_key, keyed[msg.topic])
            props = {**msg.properties, PROP_SHARDING_KEY: item.sharding_key, tag_property: tag}
        else:
            if msg.topic not in queues:
                queues[msg.topic] = client.send_queues(msg.topic)
            queue = rotation.select(msg.topic, queues[msg.topic])
            props = {**msg.properties, tag_property: tag}
        if len(pending) >= depth:
            settle()
        if failure is not None:
            break
        msg = replace(msg, properties=props)
        pending.append((submit(msg, queue), msg, queue))
    while pending:
        settle()
    if failure is not None:
        for r in results:
            try:
                client.end_transaction(HalfMessage.of(r), TransactionState.ROLLBACK,
                                       producer_group=producer_group, oneway=True)
            except Exception as exc:  # noqa: BLE001 - best effort, see above
                log.info("rolling back half message %s failed: %s", r.msg_id, exc)
                break
        raise failure
    return results
