"""One consume queue: the index of one (topic, queue id) into the commit log.

How this works. Entry ``i`` describes the message with queue offset ``i``: 20 bytes,
commit-log offset (8), record size (4), tag hash code (8), the layout of Apache's
ConsumeQueue. The file ``consumequeue/<topic>/<queueId>/00000000000000000000`` holds the
entries back to back; a copy lives in memory (typed arrays) together with each message's
store timestamp, which is what SEARCH_OFFSET_BY_TIMESTAMP and GET_EARLIEST_MSG_STORETIME
read. The file is derived data: it is written but not fsynced, because recovery rebuilds
it from the commit log (``install`` rewrites it when it disagrees).
"""

from __future__ import annotations

import bisect
import os
import struct
from array import array
from pathlib import Path
from typing import Iterable

from rocketmq_spark.embedded.persist import write_atomic

ENTRY = struct.Struct(">qiq")  # commit-log offset, size, tag code
FILE_NAME = "0" * 20


class ConsumeQueue:
    def __init__(self, root: Path, topic: str, queue_id: int) -> None:
        self.topic = topic
        self.queue_id = queue_id
        self.directory = Path(root) / topic / str(queue_id)
        self.path = self.directory / FILE_NAME
        self.phys = array("q")
        self.sizes = array("i")
        self.tags = array("q")
        self.times = array("q")
        self._fd: int | None = None

    # ------------------------------------------------------------ file

    def read_file(self) -> list[tuple[int, int, int]]:
        """The entries on disk (a torn last entry is ignored)."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return []
        n = len(data) // ENTRY.size
        return [ENTRY.unpack_from(data, i * ENTRY.size) for i in range(n)]

    def install(self, entries: Iterable[tuple[int, int, int]], times: Iterable[int]) -> bool:
        """Take ``entries`` as the queue's content; rewrite the file if it differs.
        Returns True when the file was repaired."""
        entries = list(entries)
        phys, sizes, tags = array("q"), array("i"), array("q")
        blob = bytearray()
        for p, s, t in entries:
            phys.append(p)
            sizes.append(s)
            tags.append(t)
            blob += ENTRY.pack(p, s, t)
        self.sizes, self.tags, self.times, self.phys = sizes, tags, array("q", times), phys
        try:
            current = self.path.read_bytes()
        except FileNotFoundError:
            current = None
        if current == bytes(blob) or (current is None and not blob):
            return False
        write_atomic(self.path, bytes(blob), durable=False)
        return True

    def _open(self) -> int:
        if self._fd is None:
            self.directory.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        return self._fd

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    # ------------------------------------------------------------ entries

    def append(self, phys: int, size: int, tag: int, store_ts: int) -> int:
        """Add the entry of the next queue offset; returns that offset. Readers take
        ``len(phys)`` as the max offset, so ``phys`` grows last."""
        index = len(self.phys)
        os.pwrite(self._open(), ENTRY.pack(phys, size, tag), index * ENTRY.size)
        self.sizes.append(size)
        self.tags.append(tag)
        self.times.append(store_ts)
        self.phys.append(phys)
        return index

    @property
    def max_offset(self) -> int:
        return len(self.phys)

    def first_valid(self, commit_log_min: int) -> int:
        """The smallest queue offset whose message is still in the commit log."""
        return bisect.bisect_left(self.phys, commit_log_min)

    def search_nearest(self, timestamp: int, lo: int, hi: int) -> int:
        """Apache 4.9.8's rule: the offset whose store time is nearest to ``timestamp``
        (a tie goes to the earlier one); before the first -> lo, after the last -> hi - 1."""
        if hi <= lo:
            return lo
        times = self.times
        i = bisect.bisect_left(times, timestamp, lo, hi)
        if i < hi and times[i] == timestamp:
            return i
        if i == lo:
            return lo
        if i == hi:
            return hi - 1
        left, right = i - 1, i
        return right if timestamp - times[left] > times[right] - timestamp else left
