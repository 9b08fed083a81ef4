"""Counters behind GET_BROKER_RUNTIME_INFO and the consumeTps of GET_CONSUME_STATS."""

from __future__ import annotations

import threading
import time
from collections import defaultdict, deque


class RateWindow:
    """Events per second over the last ``window`` seconds."""

    def __init__(self, window: float = 60.0) -> None:
        self.window = window
        self._events: deque[tuple[float, int]] = deque()

    def add(self, n: int, now: float) -> None:
        self._events.append((now, n))
        self._trim(now)

    def _trim(self, now: float) -> None:
        while self._events and self._events[0][0] < now - self.window:
            self._events.popleft()

    def rate(self, now: float) -> float:
        self._trim(now)
        return sum(n for _, n in self._events) / self.window


class BrokerStats:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.put_total = 0
        self.get_total = 0
        self.put_failed = 0
        self.put_bytes = 0
        self._put = RateWindow()
        self._get = RateWindow()
        self._group_get: dict[tuple[str, str], RateWindow] = defaultdict(RateWindow)

    def on_put(self, count: int, size: int) -> None:
        with self._lock:
            self.put_total += count
            self.put_bytes += size
            self._put.add(count, time.monotonic())

    def on_get(self, group: str, topic: str, count: int) -> None:
        if count <= 0:
            return
        now = time.monotonic()
        with self._lock:
            self.get_total += count
            self._get.add(count, now)
            self._group_get[(group, topic)].add(count, now)

    def put_tps(self) -> float:
        with self._lock:
            return self._put.rate(time.monotonic())

    def get_tps(self) -> float:
        with self._lock:
            return self._get.rate(time.monotonic())

    def group_get_tps(self, group: str, topic: str) -> float:
        with self._lock:
            window = self._group_get.get((group, topic))
            return window.rate(time.monotonic()) if window else 0.0
