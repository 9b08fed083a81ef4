"""Long polling (``PullRequestHoldService``): pulls that found nothing wait for messages.

How this works. A pull with the SUSPEND flag that finds no new message is parked here
per (topic, queue id) with a deadline instead of being answered. The store tells the
service about every queue that grew (``notify_arrival``, with the tag codes of the new
entries); a parked pull whose offset is now below the queue's max offset and whose
filter accepts one of the new tag codes is woken at once. A service thread waits on a
condition for the next arrival or the earliest deadline (never a polling sleep) and
re-executes woken and expired pulls, which then answer whatever they find,
PULL_NOT_FOUND included. Apache re-checks parked pulls every 5 s, so its timeouts run
up to 5 s late; here a pull is answered at its deadline.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Sequence

from rocketmq_spark.embedded.service_thread import ServiceThread

log = logging.getLogger(__name__)

MAX_WAIT = 3600.0  # seconds; a longer hold just waits again (and stays below TIMEOUT_MAX)
MAX_HOLD_MS = 24 * 3600 * 1000  # a pull is held at most a day, whatever it asks for


@dataclass(eq=False)
class HeldPull:
    """A parked pull. ``execute`` answers it (called once, on the service thread)."""

    topic: str
    queue_id: int
    offset: int
    deadline: float  # time.monotonic()
    accept: Callable[[int], bool] | None
    execute: Callable[[], None]
    connection_id: int = 0
    done: bool = field(default=False, init=False)


class PullHoldService(ServiceThread):
    def __init__(self, max_offset: Callable[[str, int], int], name: str = "long-poll") -> None:
        super().__init__(name, join_timeout=5)
        self._max_offset = max_offset
        self.name = name
        self._held: dict[tuple[str, int], list[HeldPull]] = {}
        self._deadlines: list[tuple[float, int, HeldPull]] = []
        self._arrivals: deque[tuple[str, int, int, Sequence[int]]] = deque()
        self._ready: list[HeldPull] = []
        self._seq = itertools.count()

    def start(self) -> None:
        self.start_thread()

    def stop(self) -> None:
        self.stop_thread()

    def held_count(self) -> int:
        with self._cond:
            return sum(1 for pulls in self._held.values() for p in pulls if not p.done)

    def hold(self, pull: HeldPull) -> None:
        with self._cond:
            self._held.setdefault((pull.topic, pull.queue_id), []).append(pull)
            heapq.heappush(self._deadlines, (pull.deadline, next(self._seq), pull))
            # A message stored between the pull's read and now would not wake it.
            if self._max_offset(pull.topic, pull.queue_id) > pull.offset:
                self._take(pull)
            self._cond.notify()

    def notify_arrival(self, topic: str, queue_id: int, max_offset: int, tag_codes: Sequence[int]) -> None:
        with self._cond:
            if (topic, queue_id) in self._held:
                self._arrivals.append((topic, queue_id, max_offset, tag_codes))
                self._cond.notify()

    def drop_connection(self, connection_id: int) -> None:
        """Forget the pulls of a closed connection."""
        with self._cond:
            for key, pulls in list(self._held.items()):
                for p in pulls:
                    if p.connection_id == connection_id:
                        p.done = True
                self._prune(key)

    # ------------------------------------------------------------ service thread

    def _take(self, pull: HeldPull) -> None:
        """Move ``pull`` to the ready list (caller holds the lock)."""
        if not pull.done:
            pull.done = True
            self._ready.append(pull)
            self._prune((pull.topic, pull.queue_id))

    def _prune(self, key: tuple[str, int]) -> None:
        pulls = [p for p in self._held.get(key, ()) if not p.done]
        if pulls:
            self._held[key] = pulls
        else:
            self._held.pop(key, None)

    def _collect(self) -> None:
        while self._arrivals:
            topic, qid, max_offset, codes = self._arrivals.popleft()
            for p in list(self._held.get((topic, qid), ())):
                if max_offset > p.offset and (p.accept is None or any(p.accept(c) for c in codes)):
                    self._take(p)
        now = time.monotonic()
        while self._deadlines and (self._deadlines[0][2].done or self._deadlines[0][0] <= now):
            _, _, p = heapq.heappop(self._deadlines)
            self._take(p)

    def _next_ready(self) -> list[HeldPull] | None:
        """Wait for pulls to answer; None once stopping."""
        with self._cond:
            while True:
                if self._stopping:
                    return None
                self._collect()
                if self._ready:
                    ready, self._ready = self._ready, []
                    return ready
                timeout = self._deadlines[0][0] - time.monotonic() if self._deadlines else None
                self._cond.wait(None if timeout is None else min(timeout, MAX_WAIT))

    def _run(self) -> None:
        while True:
            try:
                ready = self._next_ready()
            except Exception:  # keep serving the other held pulls
                log.exception("%s: bookkeeping failed", self.name)
                with self._cond:
                    self._cond.wait(1.0)
                continue
            if ready is None:
                return
            for pull in ready:
                try:
                    pull.execute()
                except Exception:
                    log.exception("%s: re-executing a held pull failed", self.name)
