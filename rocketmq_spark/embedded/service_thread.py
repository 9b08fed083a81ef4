"""The background threads of the embedded broker (offset saver, commit-log flusher, long
polling, delayed and timer delivery) share one shape: a daemon thread whose ``_run`` waits on
one condition until there is work or ``_stopping`` is set. Delayed and timer delivery wait
for the earliest due time of a heap (``_take_due``)."""

from __future__ import annotations

import heapq
import threading
from typing import Callable, TypeVar

T = TypeVar("T")


class ServiceThread:
    """``start_thread()`` runs ``self._run`` on a daemon thread named ``thread_name``;
    ``stop_thread()`` sets ``_stopping``, wakes every waiter of ``_cond`` and joins the
    thread (for at most ``join_timeout`` seconds; None waits for it)."""

    def __init__(self, thread_name: str, *, join_timeout: float | None = None) -> None:
        self.thread_name = thread_name
        self._join_timeout = join_timeout
        self._cond = threading.Condition()
        self._stopping = False
        self._thread: threading.Thread | None = None

    def start_thread(self) -> None:
        self._thread = threading.Thread(target=self._run, name=self.thread_name, daemon=True)
        self._thread.start()

    def stop_thread(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(self._join_timeout)
            self._thread = None

    def _run(self) -> None:
        raise NotImplementedError

    def _take_due(self, heap: list[tuple[int, T]], now_ms: Callable[[], int]) -> list[tuple[int, T]] | None:
        """Wait until the first entry of ``heap`` (a heapq of (due time in ms, item), guarded
        by ``_cond``) is due, then pop every entry due by then, earliest first; None once
        stopping. Waits at most an hour at a time (a clock set forward is noticed)."""
        with self._cond:
            while True:
                if self._stopping:
                    return None
                now = now_ms()
                if heap and heap[0][0] <= now:
                    break
                self._cond.wait(min((heap[0][0] - now) / 1000, 3600.0) if heap else None)
            due = []
            while heap and heap[0][0] <= now:
                due.append(heapq.heappop(heap))
            return due
