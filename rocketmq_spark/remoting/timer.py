"""Timer messages (RocketMQ 5.x): the properties, the delivery time they ask for (no I/O).

How this works. A 5.x producer asks for delivery at a time with one of three properties:
``TIMER_DELIVER_MS`` (ms since the epoch), ``TIMER_DELAY_MS`` or ``TIMER_DELAY_SEC`` (from
when the broker stores it). A 5.x broker (``HookUtils.transformTimerMessage``) reads them
in that order of precedence, seconds first, then ms, then the time; a value that is not
a number, or a time more than ``timerMaxDelaySec`` (3 days) ahead, is MESSAGE_ILLEGAL; a
time in the past is stored at once as a normal message. A time ahead is rounded down to
the timer's precision (1 s; a time on the second moves one second earlier), kept as
``TIMER_OUT_MS``, and the message waits in ``rmq_sys_wheel_timer`` queue 0 with
``REAL_TOPIC``/``REAL_QID``. At its time a new message with the same body and properties,
plus ``TIMER_ENQUEUE_MS`` and ``TIMER_DEQUEUE_MS``, is written to the real queue. A
message with a delay level (``DELAY`` > 0) is a delay-level message: the broker drops its
timer properties. Only single sends are timed: the hook reads the batch's own properties,
not its items'.

4.x brokers know none of this and store such a message at once. A broker with timers says
so in GET_BROKER_RUNTIME_INFO (``timerReadBehind`` and the other ``timer*`` keys), which
is how a client tells them apart before it sends (``has_timers``).
"""

from __future__ import annotations

import re
from typing import Mapping

__all__ = ["TIMER_TOPIC", "PROP_TIMER_DELIVER_MS", "PROP_TIMER_DELAY_MS", "PROP_TIMER_DELAY_SEC",
           "PROP_TIMER_OUT_MS", "PROP_TIMER_ENQUEUE_MS", "PROP_TIMER_DEQUEUE_MS", "TIMER_PROPERTIES",
           "TIMER_REQUESTS", "TIMER_MAX_DELAY_SEC", "TIMER_PRECISION_MS", "TIMER_RUNTIME_KEYS",
           "TimerIllegal", "is_timed", "deliver_ms", "wheel_time", "has_timers", "illegal_remark"]

TIMER_TOPIC = "rmq_sys_wheel_timer"
PROP_TIMER_DELIVER_MS = "TIMER_DELIVER_MS"
PROP_TIMER_DELAY_MS = "TIMER_DELAY_MS"
PROP_TIMER_DELAY_SEC = "TIMER_DELAY_SEC"
PROP_TIMER_OUT_MS = "TIMER_OUT_MS"
PROP_TIMER_ENQUEUE_MS = "TIMER_ENQUEUE_MS"
PROP_TIMER_DEQUEUE_MS = "TIMER_DEQUEUE_MS"
PROP_TIMER_ROLL_TIMES = "TIMER_ROLL_TIMES"
PROP_TIMER_DEL_UNIQKEY = "TIMER_DEL_UNIQKEY"

# What a producer sets to ask for a time, in the broker's order of precedence.
TIMER_REQUESTS = (PROP_TIMER_DELAY_SEC, PROP_TIMER_DELAY_MS, PROP_TIMER_DELIVER_MS)
# Every property the timer reads or writes (reserved: not user properties).
TIMER_PROPERTIES = frozenset(TIMER_REQUESTS) | frozenset({
    PROP_TIMER_OUT_MS, PROP_TIMER_ENQUEUE_MS, PROP_TIMER_DEQUEUE_MS, PROP_TIMER_ROLL_TIMES,
    PROP_TIMER_DEL_UNIQKEY})

_LONG = re.compile(r"[+-]?[0-9]{1,19}\Z")
TIMER_MAX_DELAY_SEC = 3 * 24 * 3600          # timerMaxDelaySec
TIMER_PRECISION_MS = 1000                    # timerPrecisionMs
# GET_BROKER_RUNTIME_INFO keys of a broker with a timer store (5.x BrokerController).
TIMER_RUNTIME_KEYS = ("timerReadBehind", "timerOffsetBehind", "timerCongestNum",
                      "timerEnqueueTps", "timerDequeueTps")


class TimerIllegal(ValueError):
    """What a 5.x broker answers MESSAGE_ILLEGAL (13) to (``illegal_remark``)."""


def illegal_remark(max_delay_sec: int = TIMER_MAX_DELAY_SEC) -> str:
    """The remark of a 5.x broker's MESSAGE_ILLEGAL for a timer message (its wording)."""
    return (f"timer message illegal, the delay time should not be bigger than the max delay "
            f"{max_delay_sec * 1000}ms; or if set del msg, the delay time should be bigger than "
            f"the current time")


def is_timed(props: Mapping[str, str]) -> bool:
    """Whether ``props`` ask for a timer (and are not already a timer's delivered copy)."""
    return PROP_TIMER_OUT_MS not in props and any(p in props for p in TIMER_REQUESTS)


def deliver_ms(props: Mapping[str, str], now_ms: int) -> int:
    """The time a timer message asks for, by the broker's precedence; TimerIllegal for a
    value that is not a (Java long) number."""
    for name in TIMER_REQUESTS:
        raw = props.get(name)
        if raw is None:
            continue
        if not _LONG.match(raw):       # Long.parseLong: no spaces, no '_'
            raise TimerIllegal(f"{name} {raw!r} is not a number")
        value = int(raw)
        if name == PROP_TIMER_DELAY_SEC:
            return now_ms + value * 1000
        if name == PROP_TIMER_DELAY_MS:
            return now_ms + value
        return value
    raise TimerIllegal("no timer property")


def wheel_time(deliver: int, now_ms: int, *, max_delay_sec: int = TIMER_MAX_DELAY_SEC,
               precision_ms: int = TIMER_PRECISION_MS) -> int | None:
    """The ``TIMER_OUT_MS`` a broker keeps for ``deliver``: None for a time not ahead of
    ``now_ms`` (stored at once), TimerIllegal beyond ``max_delay_sec``; else rounded down
    to the precision (a time on the boundary one tick earlier, as Apache does)."""
    if deliver <= now_ms:
        return None
    if deliver - now_ms > max_delay_sec * 1000:
        raise TimerIllegal(f"{deliver} is more than {max_delay_sec} s ahead")
    if deliver % precision_ms == 0:
        return deliver - precision_ms
    return deliver // precision_ms * precision_ms


def has_timers(runtime_info: Mapping[str, str]) -> bool:
    """Whether a broker's GET_BROKER_RUNTIME_INFO table says it has a timer store."""
    return TIMER_RUNTIME_KEYS[0] in runtime_info
