"""Counters behind GET_BROKER_RUNTIME_INFO and the consumeTps of GET_CONSUME_STATS.

Puts: messages, bytes, failures and how long each store write took (a histogram with
Apache's buckets, the maximum and recent samples for the 99th/99.9th percentiles). Pulls:
requests that found messages or not, messages transferred, the longest store read, and
messages got per (group, topic).
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict, deque

# Apache's putMessageDistributeTime buckets: (upper bound in ms, label); the last is open.
PUT_BUCKETS: tuple[tuple[float, str], ...] = (
    (0, "<=0ms"), (10, "0~10ms"), (50, "10~50ms"), (100, "50~100ms"), (200, "100~200ms"), (500, "200~500ms"),
    (1000, "500ms~1s"), (2000, "1~2s"), (3000, "2~3s"), (4000, "3~4s"), (5000, "4~5s"), (10000, "5~10s"),
    (float("inf"), "10s~"))
LATENCY_SAMPLES = 10_000


class RateWindow:
    """Events per second over the last ``window`` seconds, counted in one-second buckets:
    memory stays at ``window`` buckets however many events arrive (a pull each, thousands
    a second)."""

    def __init__(self, window: float = 60.0) -> None:
        self.window = window
        self._buckets: deque[list[int]] = deque()      # [second, events], oldest first

    def add(self, n: int, now: float) -> None:
        second = int(now)
        if self._buckets and self._buckets[-1][0] == second:
            self._buckets[-1][1] += n
            return
        self._buckets.append([second, n])
        self._trim(now)

    def _trim(self, now: float) -> None:
        # a bucket goes once all of its second is older than the window
        while self._buckets and self._buckets[0][0] + 1 <= now - self.window:
            self._buckets.popleft()

    def rate(self, now: float) -> float:
        self._trim(now)
        return sum(n for _, n in self._buckets) / self.window


class BrokerStats:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.put_total = 0
        self.get_total = 0
        self.put_failed = 0
        self.put_bytes = 0
        self.put_time_max_ms = 0
        self.get_time_max_ms = 0
        self.put_distribution = [0] * len(PUT_BUCKETS)
        self._put_latencies: deque[float] = deque(maxlen=LATENCY_SAMPLES)
        self._put = RateWindow()
        self._get = RateWindow()
        self._found = RateWindow()
        self._miss = RateWindow()
        self._group_get: dict[tuple[str, str], RateWindow] = defaultdict(RateWindow)

    def on_put(self, count: int, size: int, elapsed_ms: float = 0.0) -> None:
        with self._lock:
            self.put_total += count
            self.put_bytes += size
            self._put.add(count, time.monotonic())
            self.put_time_max_ms = max(self.put_time_max_ms, int(elapsed_ms))
            self._put_latencies.append(elapsed_ms)
            whole_ms = int(elapsed_ms)  # Apache measures in whole milliseconds
            self.put_distribution[next(i for i, (top, _) in enumerate(PUT_BUCKETS) if whole_ms <= top)] += 1

    def on_pull(self, group: str, topic: str, count: int, elapsed_ms: float) -> None:
        """One pull's store read: the messages it got (0: none found) and how long it took."""
        now = time.monotonic()
        with self._lock:
            (self._found if count > 0 else self._miss).add(1, now)
            self.get_time_max_ms = max(self.get_time_max_ms, int(elapsed_ms))
            if count > 0:
                self.get_total += count
                self._get.add(count, now)
                self._group_get[(group, topic)].add(count, now)

    def put_tps(self) -> float:
        with self._lock:
            return self._put.rate(time.monotonic())

    def get_tps(self) -> float:
        """Messages transferred per second."""
        with self._lock:
            return self._get.rate(time.monotonic())

    def found_tps(self) -> float:
        with self._lock:
            return self._found.rate(time.monotonic())

    def miss_tps(self) -> float:
        with self._lock:
            return self._miss.rate(time.monotonic())

    def group_get_tps(self, group: str, topic: str) -> float:
        with self._lock:
            window = self._group_get.get((group, topic))
            return window.rate(time.monotonic()) if window else 0.0

    def put_distribution_text(self) -> str:
        """``[<=0ms]:N [0~10ms]:N ... [10s~]:N `` as Apache writes it."""
        with self._lock:
            return "".join(f"[{label}]:{n} " for (_, label), n in zip(PUT_BUCKETS, self.put_distribution))

    def put_latency(self, quantile: float) -> float:
        """The put time (ms) below which ``quantile`` of the recent puts stayed."""
        with self._lock:
            samples = sorted(self._put_latencies)
        if not samples:
            return 0.0
        return samples[min(len(samples) - 1, int(quantile * len(samples)))]
