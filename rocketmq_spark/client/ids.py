"""Client message ids (the UNIQ_KEY property), laid out like the Java producer's.

16 bytes as 32 uppercase hex digits: client IPv4 (4) | pid, low 16 bits (2) | a random
number fixed per generator (4; Java uses its class loader's hash) | milliseconds since
the start of the current month, local time (4) | a 16-bit counter (2). The first 10 bytes
are fixed per process, so ids of one producer share a 20-digit prefix.
"""

from __future__ import annotations

import os
import random
import struct
import threading
import time
from datetime import datetime
from typing import Callable

from rocketmq_spark.client.transport import local_ipv4


def _month_start_ms(now_ms: int) -> tuple[int, int]:
    """(start of the month holding now_ms, start of the next one), both local time, in ms."""
    now = datetime.fromtimestamp(now_ms / 1000)
    start = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    nxt = start.replace(year=start.year + 1, month=1) if start.month == 12 \
        else start.replace(month=start.month + 1)
    return int(start.timestamp() * 1000), int(nxt.timestamp() * 1000)


class UniqIdGenerator:
    """Thread-safe generator of UNIQ_KEY values."""

    def __init__(self, *, ip: bytes | None = None, pid: int | None = None,
                 clock_ms: Callable[[], int] | None = None) -> None:
        ip = local_ipv4() if ip is None else ip
        if len(ip) != 4:
            raise ValueError(f"client id needs a 4-byte IPv4 address, got {len(ip)} bytes")
        pid = os.getpid() if pid is None else pid
        self._prefix = ip + struct.pack(">H", pid & 0xFFFF) + struct.pack(">I", random.getrandbits(32))
        self._clock_ms = clock_ms or (lambda: int(time.time() * 1000))
        self._lock = threading.Lock()
        self._counter = 0
        self._month_start, self._next_month = _month_start_ms(self._clock_ms())

    @property
    def prefix(self) -> str:
        return self._prefix.hex().upper()

    def next_id(self) -> str:
        with self._lock:
            now = self._clock_ms()
            if now >= self._next_month or now < self._month_start:
                self._month_start, self._next_month = _month_start_ms(now)
            self._counter = (self._counter + 1) & 0xFFFF
            tail = struct.pack(">IH", (now - self._month_start) & 0xFFFFFFFF, self._counter)
        return (self._prefix + tail).hex().upper()
