"""Sharding key -> queue: the same key always lands on the same queue (and so stays in order).

One function for every sender (sidecar Send, CLI produce, jobs), so a key maps to the same
queue whoever sends it. CRC32 is stable across processes (``hash()`` is not)."""

from __future__ import annotations

import zlib
from typing import Sequence, TypeVar

Q = TypeVar("Q")


def select_queue(key: str, queues: Sequence[Q]) -> Q:
    if not queues:
        raise ValueError("no queue to select from")
    return queues[zlib.crc32(key.encode("utf-8")) % len(queues)]
