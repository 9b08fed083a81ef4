"""Queue locks for orderly consumers (``RebalanceLockManager``).

Table: group -> message queue -> (client id, last update). A lock is expired once
``now - last update > 60 s``. LOCK_BATCH_MQ grants, per queue: a free queue, a queue the
caller already holds (renewal: the timestamp is refreshed) and an expired one (handed
over); a queue held by another live client is left out. UNLOCK_BATCH_MQ removes only
the caller's entries. Time comes from the injected clock.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Iterable

from rocketmq_spark.embedded.clock import Clock
from rocketmq_spark.remoting.route import MessageQueue

LOCK_MAX_LIVE_MS = 60_000


@dataclass
class _Entry:
    client_id: str
    last_update: int


class RebalanceLockManager:
    def __init__(self, clock: Clock, max_live_ms: int = LOCK_MAX_LIVE_MS) -> None:
        self.clock = clock
        self.max_live_ms = max_live_ms
        self._lock = threading.Lock()
        self._table: dict[str, dict[MessageQueue, _Entry]] = {}

    def _expired(self, entry: _Entry, now: int) -> bool:
        return now - entry.last_update > self.max_live_ms

    def try_lock_batch(self, group: str, mqs: Iterable[MessageQueue], client_id: str) -> list[MessageQueue]:
        """Lock what can be locked for ``client_id``; returns the queues it now holds."""
        granted: list[MessageQueue] = []
        with self._lock:
            now = self.clock.now_ms()
            table = self._table.setdefault(group, {})
            for mq in mqs:
                entry = table.get(mq)
                if entry is None:
                    table[mq] = _Entry(client_id, now)
                elif entry.client_id == client_id or self._expired(entry, now):
                    entry.client_id, entry.last_update = client_id, now
                else:
                    continue
                granted.append(mq)
        return granted

    def unlock_batch(self, group: str, mqs: Iterable[MessageQueue], client_id: str) -> None:
        with self._lock:
            table = self._table.get(group, {})
            for mq in mqs:
                entry = table.get(mq)
                if entry is not None and entry.client_id == client_id:
                    del table[mq]

    def holder(self, group: str, mq: MessageQueue) -> str | None:
        """The client holding an unexpired lock on ``mq``, or None."""
        with self._lock:
            entry = self._table.get(group, {}).get(mq)
            if entry is None or self._expired(entry, self.clock.now_ms()):
                return None
            return entry.client_id

    def group_has_live_lock(self, group: str) -> bool:
        with self._lock:
            now = self.clock.now_ms()
            return any(not self._expired(e, now) for e in self._table.get(group, {}).values())
