"""Delay levels (``ScheduleMessageService``): SCHEDULE_TOPIC_XXXX -> the real topic.

How this works. A message with ``DELAY`` = L > 0 is stored in ``SCHEDULE_TOPIC_XXXX``
queue L - 1 with ``REAL_TOPIC``/``REAL_QID`` (see ``Broker.put``); the store gives its
consume-queue entry the delivery time as tag code. One timer thread keeps a heap of
(due time, level) and waits on a condition until the earliest is due (never a polling
sleep); new schedule entries push their due time and wake it. When a level is due, its
entries are delivered in order from the level's progress offset: each becomes a new
message in ``REAL_TOPIC``/``REAL_QID`` with the same body, flags, born fields, reconsume
times and properties (``DELAY``, ``WAIT``, ``REAL_TOPIC``, ``REAL_QID`` stay, as in
4.9.8). Progress per level is saved to ``config/delayOffset.json`` once the delivered
copies are durable, so a crash delivers a message at least once, never zero times.
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
from rocketmq_spark.remoting.codes import DELAY_LEVELS_MS, SCHEDULE_TOPIC
from rocketmq_spark.remoting.message import (PROP_REAL_QID, PROP_REAL_TOPIC, MessageExt,
                                             decode_message)

log = logging.getLogger(__name__)

Deliver = Callable[[MessageExt], PutResult]


class ScheduleService(ServiceThread):
    def __init__(self, store: MessageStore, deliver: Deliver, path: Path, *, clock: Clock,
                 delay_levels_ms: tuple[int, ...] = DELAY_LEVELS_MS, name: str = "schedule") -> None:
        self.store = store
        self.deliver = deliver
        self.path = Path(path)
        self.clock = clock
        self.delay_levels_ms = delay_levels_ms
        self.name = name
        super().__init__(name, join_timeout=10)
        self._offsets: dict[int, int] = {}
        self._heap: list[tuple[int, int]] = []

    @property
    def levels(self) -> int:
        return len(self.delay_levels_ms)

    def load(self) -> None:
        saved = read_json(self.path, {}) or {}
        self._offsets = {int(k): int(v) for k, v in (saved.get("offsetTable") or {}).items()}

    def progress(self) -> dict[int, tuple[int, int]]:
        """level -> (delivered offset, max offset) for levels that were used."""
        out = {}
        for level in range(1, self.levels + 1):
            top = self.store.max_offset(SCHEDULE_TOPIC, level - 1)
            if top:
                out[level] = (self._offsets.get(level, 0), top)
        return out

    def start(self) -> None:
        with self._cond:
            for level in range(1, self.levels + 1):
                if self.store.max_offset(SCHEDULE_TOPIC, level - 1) > self._offsets.get(level, 0):
                    heapq.heappush(self._heap, (0, level))
        self.start_thread()

    def stop(self) -> None:
        self.stop_thread()

    def notify_arrival(self, topic: str, queue_id: int, max_offset: int, tag_codes: list[int] | tuple) -> None:
        """Store listener: a schedule queue grew; its tag codes are delivery times."""
        if topic != SCHEDULE_TOPIC or not tag_codes:
            return
        with self._cond:
            heapq.heappush(self._heap, (min(tag_codes), queue_id + 1))
            self._cond.notify()

    def _run(self) -> None:
        while (due := self._take_due(self._heap, self.clock.now_ms)) is not None:
            for level in sorted({level for _, level in due}):
                try:
                    self._deliver_level(level)
                except Exception:
                    log.exception("%s: delivering level %d failed; retrying in 1 s", self.name, level)
                    with self._cond:
                        heapq.heappush(self._heap, (self.clock.now_ms() + 1000, level))

    def _deliver_level(self, level: int) -> None:
        qid = level - 1
        offset = self._offsets.get(level, 0)
        start = offset
        last_end = 0
        while offset < self.store.max_offset(SCHEDULE_TOPIC, qid) and not self._stopping:
            entry = self.store.entry(SCHEDULE_TOPIC, qid, offset)
            if entry is None:  # below the min offset: the segment is gone
                offset += 1
                continue
            due = entry[2]
            if due > self.clock.now_ms():
                with self._cond:
                    heapq.heappush(self._heap, (due, level))
                break
            raw = self.store.read_message(SCHEDULE_TOPIC, qid, offset)
            copy = self._copy(raw) if raw is not None else None
            if copy is not None:
                last_end = self.deliver(copy).end_offset
            offset += 1
        if offset != start:
            if last_end:
                done = threading.Event()
                self.store.when_durable(last_end, lambda ok: done.set())
                done.wait(30)
            self._offsets[level] = offset
            write_json(self.path, {"offsetTable": {str(k): v for k, v in sorted(self._offsets.items())}})

    def _copy(self, raw: bytes) -> MessageExt | None:
        try:
            msg, _ = decode_message(raw)
        except RemoteProtocolError as exc:
            log.error("%s: unreadable schedule message: %s", self.name, exc)
            return None
        props = dict(msg.properties)
        topic = props.get(PROP_REAL_TOPIC)
        try:
            qid = int(props.get(PROP_REAL_QID, "0"))
        except ValueError:
            qid = 0
        if not topic:
            log.error("%s: schedule message at %d has no REAL_TOPIC; dropped", self.name, msg.commit_log_offset)
            return None
        return MessageExt(topic=topic, body=msg.body, queue_id=qid, flag=msg.flag, sys_flag=msg.sys_flag,
                          born_timestamp=msg.born_timestamp, born_host=msg.born_host,
                          reconsume_times=msg.reconsume_times, properties=props)
