"""Clocks for the embedded cluster: wall time in milliseconds, injectable.

Store timestamps, lock expiry and client expiry read ``clock.now_ms()``; tests pass a
``FakeClock`` to expire locks or clients, or to give messages exact store times,
without sleeping. Timed waits (long polling, the delay timer) still wait in real time;
the transaction check service listens to a ``FakeClock`` (``add_listener``) and runs
its rounds when a test moves the clock past them.
"""

from __future__ import annotations

import threading
import time
from typing import Callable, Protocol


class Clock(Protocol):
    def now_ms(self) -> int: ...


class SystemClock:
    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000


class FakeClock:
    """A clock that moves only when told to (thread-safe)."""

    def __init__(self, start_ms: int = 1_700_000_000_000) -> None:
        self._now = start_ms
        self._lock = threading.Lock()
        self._listeners: list[Callable[[], None]] = []

    def now_ms(self) -> int:
        with self._lock:
            return self._now

    def advance(self, ms: int) -> int:
        with self._lock:
            self._now += ms
            now = self._now
        self._moved()
        return now

    def set(self, ms: int) -> None:
        with self._lock:
            self._now = ms
        self._moved()

    def add_listener(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` (in the mover's thread) each time the clock is moved."""
        with self._lock:
            self._listeners.append(callback)

    def remove_listener(self, callback: Callable[[], None]) -> None:
        with self._lock:
            if callback in self._listeners:
                self._listeners.remove(callback)

    def _moved(self) -> None:
        with self._lock:
            listeners = list(self._listeners)
        for callback in listeners:
            callback()
