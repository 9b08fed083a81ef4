"""Consumer offsets (``ConsumerOffsetManager``): ``topic@group`` -> queue id -> offset.

How this works. An offset is "the next one to consume"; commits overwrite, with no range
check (4.9.8 stores 1000 on a 3-message queue). The table is saved to
``config/consumerOffset.json`` atomically by a persister thread: every change wakes it,
it writes a snapshot of the whole table, and then runs the callbacks of the commits the
snapshot covers (group commit). UPDATE_CONSUMER_OFFSET answers from such a callback, so
an answered commit survives ``kill -9``.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Callable, Mapping

from rocketmq_spark.embedded.persist import read_json, write_json
from rocketmq_spark.embedded.service_thread import ServiceThread

log = logging.getLogger(__name__)


def table_key(topic: str, group: str) -> str:
    return f"{topic}@{group}"


class ConsumerOffsetManager(ServiceThread):
    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        super().__init__(f"offsets-{self.path.parent.parent.name}")
        self._table: dict[str, dict[int, int]] = {}
        self._version = 0
        self._saved = 0
        self._waiters: list[tuple[int, Callable[[], None]]] = []

    def load(self) -> None:
        saved = read_json(self.path, {}) or {}
        with self._cond:
            self._table = {key: {int(q): int(o) for q, o in queues.items()}
                           for key, queues in (saved.get("offsetTable") or {}).items()}

    # ------------------------------------------------------------ queries

    def query(self, group: str, topic: str, queue_id: int) -> int:
        """The committed offset, or -1 when the group never committed this queue."""
        return self._table.get(table_key(topic, group), {}).get(queue_id, -1)

    def topics_of(self, group: str) -> set[str]:
        suffix = "@" + group
        return {key[:-len(suffix)] for key in list(self._table) if key.endswith(suffix)}

    def offsets_of(self, group: str, topic: str) -> dict[int, int]:
        return dict(self._table.get(table_key(topic, group), {}))

    # ------------------------------------------------------------ commits

    def commit(self, group: str, topic: str, queue_id: int, offset: int,
               on_durable: Callable[[], None] | None = None) -> None:
        with self._cond:
            self._table.setdefault(table_key(topic, group), {})[queue_id] = offset
            self._version += 1
            if on_durable is not None:
                self._waiters.append((self._version, on_durable))
            self._cond.notify()
        if self._thread is None and on_durable is not None:
            self._persist()

    def replace_all(self, table: Mapping[str, Mapping[Any, Any]]) -> None:
        """A slave takes its master's offsets whole (Apache's SlaveSynchronize)."""
        new = {key: {int(q): int(o) for q, o in queues.items()} for key, queues in table.items()}
        with self._cond:
            if new == self._table:
                return
            self._table = new
            self._version += 1
            self._cond.notify()

    def snapshot_json(self) -> dict[str, Any]:
        with self._cond:
            return {"offsetTable": {key: {str(q): o for q, o in queues.items()}
                                    for key, queues in self._table.items()}}

    def start(self) -> None:
        self.start_thread()

    def close(self) -> None:
        self.stop_thread()
        self._persist()

    def _run(self) -> None:
        while True:
            with self._cond:
                while self._version == self._saved and not self._stopping:
                    self._cond.wait()
                if self._version == self._saved and self._stopping:
                    return
            if not self._persist():
                with self._cond:  # disk trouble: retry later, not in a tight loop
                    self._cond.wait(1.0)

    def _persist(self) -> bool:
        with self._cond:
            version = self._version
            snapshot = {key: {str(q): o for q, o in queues.items()} for key, queues in self._table.items()}
        try:
            write_json(self.path, {"offsetTable": snapshot})
        except OSError:
            log.exception("offsets: could not save %s", self.path)
            return False
        with self._cond:
            self._saved = max(self._saved, version)
            ready = [cb for v, cb in self._waiters if v <= self._saved]
            self._waiters = [(v, cb) for v, cb in self._waiters if v > self._saved]
        for cb in ready:
            try:
                cb()
            except Exception:
                log.exception("offsets: commit callback failed")
        return True
