"""A broker that is busy: wait, then send the same request again.

Apache brokers shed load before they store anything: a send that waited in the broker's
send queue longer than ``waitTimeMillsInSendQueue`` (200 ms) is answered SYSTEM_BUSY
(``[TIMEOUT_CLEAN_QUEUE]broker busy, start flow control for a while``), as are requests
refused while the page cache is locked (``[PCBUSY_CLEAN_QUEUE]``) or the pool is full
(``[REJECTREQUEST]system busy``). Nothing was stored, so the request can go again as it was
(to the same queue: a keyed message keeps its place in its key's order), after a pause that
grows while the broker stays busy. Java's producer retries these too. A loaded 2-core
machine running Apache's broker beside Spark answers this way within seconds.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Callable, TypeVar

from rocketmq_spark.errors import BrokerError, BrokerUnavailable, ConnectError, RocketMQError
from rocketmq_spark.remoting.codes import ResponseCode

log = logging.getLogger(__name__)

T = TypeVar("T")

BUSY_CODES = frozenset({ResponseCode.SYSTEM_BUSY})
BUSY_TIMEOUT = 60.0        # seconds a request may keep finding its broker busy
FIRST_PAUSE, MAX_PAUSE = 0.05, 1.0


def unreachable(exc: BaseException) -> bool:
    """Nothing was sent or stored because the broker could not be reached: no connection,
    or no master address known (the NameServer dropped a master that went away)."""
    return isinstance(exc, ConnectError) or (
        isinstance(exc, BrokerError) and exc.code == ResponseCode.SERVICE_NOT_AVAILABLE)


def while_unreachable(attempt: Callable[[], T], first: RocketMQError, *, timeout: float, what: str,
                      refresh: Callable[[], None] = lambda: None,
                      sleep: Callable[[float], None] = time.sleep,
                      clock: Callable[[], float] = time.monotonic) -> T:
    """``attempt()`` again, after growing pauses (``refresh()`` before each: a new route
    may name a new master), for as long as its broker cannot be reached (``unreachable``),
    at most ``timeout`` seconds after ``first``; then ``BrokerUnavailable`` naming ``what``
    (the queue and the option that sets the timeout). Any other error is raised."""
    deadline = clock() + timeout
    pause, last = 0.1, first
    while True:
        if not unreachable(last):
            raise last
        if clock() + pause > deadline:
            raise BrokerUnavailable(f"{what}: no answer for {timeout:g} s: {last}") from last
        log.info("%s: %s; trying again in %.1f s", what, last, pause)
        sleep(pause)
        pause = min(pause * 2, 2.0)
        try:
            refresh()
        except RocketMQError as exc:
            log.info("%s: refreshing the route: %s", what, exc)
        try:
            return attempt()
        except RocketMQError as exc:
            last = exc


def send_again(again: Callable[[], T], exc: RocketMQError, *, queue: Any, unreachable_timeout: float,
               route: Callable[..., Any] | None = None) -> T:
    """A request to ``queue`` whose answer was ``exc``, sent ``again()``: while its broker
    is busy (``while_busy``), and, with ``unreachable_timeout`` > 0, while its broker cannot
    be reached (``while_unreachable``, asking ``route(topic, refresh=True)`` for a new master
    before each attempt); ``exc`` itself otherwise."""
    if is_busy(exc):
        return while_busy(again, exc)
    if unreachable_timeout > 0 and unreachable(exc):
        return while_unreachable(
            lambda: while_busy(again), exc, timeout=unreachable_timeout,
            what=(f"queue {queue.topic}/{queue.broker_name}/{queue.queue_id} of broker {queue.broker_name} "
                  f"(option 'brokerUnavailableTimeoutMs' is {int(unreachable_timeout * 1000)})"),
            refresh=(lambda: route(queue.topic, refresh=True)) if route is not None else (lambda: None))
    raise exc


def is_busy(exc: BaseException) -> bool:
    return isinstance(exc, BrokerError) and exc.code in BUSY_CODES


def while_busy(attempt: Callable[[], T], first: BaseException | None = None, *,
               timeout: float = BUSY_TIMEOUT, sleep: Callable[[float], None] = time.sleep,
               clock: Callable[[], float] = time.monotonic) -> T:
    """``attempt()``, again after a pause for as long as the broker answers busy (at most
    ``timeout`` seconds); ``first``: the busy answer an earlier attempt already got. Any
    other error, or a busy one past the timeout, is raised."""
    deadline = clock() + timeout
    pause = FIRST_PAUSE
    last = first
    while True:
        if last is not None:
            if not is_busy(last) or clock() + pause > deadline:
                raise last
            log.info("broker busy (%s); sending again in %.2f s", last, pause)
            sleep(pause)
            pause = min(pause * 2, MAX_PAUSE)
        try:
            return attempt()
        except BrokerError as exc:
            last = exc
