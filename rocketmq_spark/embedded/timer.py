"""Timer messages (5.x ``TimerMessageStore``): rmq_sys_wheel_timer -> the real topic.

How this works. ``Broker.put`` turns a single send that asks for a time ahead
(``TIMER_DELIVER_MS`` / ``TIMER_DELAY_MS`` / ``TIMER_DELAY_SEC``, read by
``remoting.timer``) into a message of ``rmq_sys_wheel_timer`` queue 0 with
``TIMER_OUT_MS`` (the time rounded down to the second), ``REAL_TOPIC`` and ``REAL_QID``:
the send's answer names that queue's offset, as a 5.x broker's does. This service keeps a
heap of (due time, wheel offset) and one thread that waits on a condition until the
earliest is due (woken by new entries, and by a ``FakeClock`` being moved). A message is
due one precision step (1 s) after its ``TIMER_OUT_MS``, which is when Apache 5.5.0
delivers it: never before the time asked for, at most a second after. At its time it
becomes a new message in the real queue with the same body, flags, born fields and
properties plus ``TIMER_ENQUEUE_MS`` (the second the wheel stored it in), ``TIMER_DEQUEUE_MS``
(now); WAIT, REAL_TOPIC and REAL_QID stay, as 5.5.0 keeps them (measured).

Progress survives a restart: ``config/timerCheckpoint.json`` holds the wheel offset below
which every entry was delivered, and the delivered offsets above it (entries are due out
of order). It is written once the delivered copies are durable, so after a crash a message
is delivered at least once, never zero times; at start the wheel is read again from that
offset.
"""

from __future__ import annotations

import heapq
import logging
import threading
from pathlib import Path
from typing import Callable

from rocketmq_spark.embedded.clock import Clock
from rocketmq_spark.embedded.persist import read_json, write_json
from rocketmq_spark.embedded.service_thread import ServiceThread
from rocketmq_spark.embedded.store import MessageStore, PutResult
from rocketmq_spark.errors import RemoteProtocolError
from rocketmq_spark.remoting.message import PROP_REAL_QID, PROP_REAL_TOPIC, MessageExt, decode_message
from rocketmq_spark.remoting.timer import (PROP_TIMER_DEQUEUE_MS, PROP_TIMER_ENQUEUE_MS,
                                           PROP_TIMER_OUT_MS, TIMER_PRECISION_MS, TIMER_TOPIC)

log = logging.getLogger(__name__)

Deliver = Callable[[MessageExt], PutResult]
WHEEL_QUEUE = 0


class TimerService(ServiceThread):
    def __init__(self, store: MessageStore, deliver: Deliver, path: Path, *, clock: Clock,
                 precision_ms: int = TIMER_PRECISION_MS, name: str = "timer") -> None:
        self.store = store
        self.deliver = deliver
        self.path = Path(path)
        self.clock = clock
        self.precision_ms = precision_ms
        super().__init__(name, join_timeout=10)
        self._done_below = 0                 # every wheel entry below this offset is delivered
        self._delivered: set[int] = set()    # delivered entries at or above it
        self._heap: list[tuple[int, int]] = []
        self._queued: set[int] = set()       # offsets in the heap

    # ------------------------------------------------------------ life cycle

    def load(self) -> None:
        saved = read_json(self.path, {}) or {}
        self._done_below = int(saved.get("doneBelow") or 0)
        self._delivered = {int(o) for o in saved.get("delivered") or ()}

    def start(self) -> None:
        self._enqueue(self._done_below, self.store.max_offset(TIMER_TOPIC, WHEEL_QUEUE))
        add_listener = getattr(self.clock, "add_listener", None)
        if add_listener is not None:         # a FakeClock: wake when a test moves it
            add_listener(self._wake)
        self.start_thread()

    def stop(self) -> None:
        remove_listener = getattr(self.clock, "remove_listener", None)
        if remove_listener is not None:
            remove_listener(self._wake)
        self.stop_thread()

    def _wake(self) -> None:
        with self._cond:
            self._cond.notify_all()

    # ------------------------------------------------------------ what is waiting

    def pending(self) -> int:
        """Wheel entries not delivered yet."""
        with self._cond:
            return len(self._queued)

    def overdue(self) -> int:
        """Entries whose time has come but are not delivered yet (``timerReadBehind``)."""
        now = self.clock.now_ms()
        with self._cond:
            return sum(1 for due, _ in self._heap if due <= now)

    def notify_arrival(self, topic: str, queue_id: int, max_offset: int, tag_codes: list[int] | tuple) -> None:
        """Store listener: the wheel grew by ``len(tag_codes)`` entries."""
        if topic == TIMER_TOPIC and tag_codes:
            self._enqueue(max_offset - len(tag_codes), max_offset)

    def _enqueue(self, start: int, end: int) -> None:
        entries = []
        for offset in range(start, end):
            if offset in self._delivered:
                continue
            raw = self.store.read_message(TIMER_TOPIC, WHEEL_QUEUE, offset)
            if raw is None:                  # below the min offset: the segment is gone
                continue
            try:
                msg, _ = decode_message(raw)
                out = int(msg.properties.get(PROP_TIMER_OUT_MS, "0"))
            except (RemoteProtocolError, ValueError) as exc:
                log.error("%s: unreadable wheel entry %d: %s", self.thread_name, offset, exc)
                out = 0
            entries.append((out + self.precision_ms, offset))
        if entries:
            with self._cond:
                for entry in entries:
                    if entry[1] not in self._queued:
                        self._queued.add(entry[1])
                        heapq.heappush(self._heap, entry)
                self._cond.notify()

    # ------------------------------------------------------------ delivering

    def _run(self) -> None:
        while (due := self._take_due(self._heap, self.clock.now_ms)) is not None:
            try:
                self._deliver([offset for _, offset in due])
            except Exception:
                log.exception("%s: delivering %d timer messages failed; retrying in 1 s", self.thread_name, len(due))
                with self._cond:
                    for _, offset in due:
                        if offset not in self._delivered:
                            heapq.heappush(self._heap, (self.clock.now_ms() + 1000, offset))

    def _deliver(self, offsets: list[int]) -> None:
        last_end = 0
        for offset in offsets:
            raw = self.store.read_message(TIMER_TOPIC, WHEEL_QUEUE, offset)
            copy = self._copy(raw, offset) if raw is not None else None
            if copy is not None:
                last_end = self.deliver(copy).end_offset
        if last_end:
            done = threading.Event()
            self.store.when_durable(last_end, lambda ok: done.set())
            done.wait(30)
        with self._cond:
            for offset in offsets:
                self._queued.discard(offset)
                self._delivered.add(offset)
            while self._done_below in self._delivered:
                self._delivered.discard(self._done_below)
                self._done_below += 1
            state = {"doneBelow": self._done_below, "delivered": sorted(self._delivered)}
        write_json(self.path, state)

    def _copy(self, raw: bytes, offset: int) -> MessageExt | None:
        try:
            msg, _ = decode_message(raw)
        except RemoteProtocolError as exc:
            log.error("%s: unreadable wheel entry %d: %s", self.thread_name, offset, exc)
            return None
        props = dict(msg.properties)
        topic = props.get(PROP_REAL_TOPIC)
        try:
            qid = int(props.get(PROP_REAL_QID, "0"))
        except ValueError:
            qid = 0
        if not topic:
            log.error("%s: wheel entry %d has no REAL_TOPIC; dropped", self.thread_name, offset)
            return None
        # 5.5.0 names the second the wheel took it in (a multiple of the precision)
        props[PROP_TIMER_ENQUEUE_MS] = str(msg.store_timestamp // self.precision_ms * self.precision_ms)
        props[PROP_TIMER_DEQUEUE_MS] = str(self.clock.now_ms())
        return MessageExt(topic=topic, body=msg.body, queue_id=qid, flag=msg.flag, sys_flag=msg.sys_flag,
                          born_timestamp=msg.born_timestamp, born_host=msg.born_host,
                          reconsume_times=msg.reconsume_times, properties=props)
