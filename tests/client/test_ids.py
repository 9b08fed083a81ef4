"""UNIQ_KEY generation: Java's layout, uniqueness across threads, month rollover."""

from __future__ import annotations

import os
import struct
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime

import pytest

from rocketmq_spark.client.ids import UniqIdGenerator
from rocketmq_spark.client.transport import local_ipv4


def _month_start_ms(ms: int) -> int:
    d = datetime.fromtimestamp(ms / 1000).replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    return int(d.timestamp() * 1000)


def test_layout_is_ip_pid_random_ms_in_month_counter() -> None:
    now = int(datetime(2026, 3, 15, 12, 0, 0).timestamp() * 1000)
    gen = UniqIdGenerator(ip=bytes([10, 1, 2, 3]), pid=0x12345, clock_ms=lambda: now)
    a, b = gen.next_id(), gen.next_id()
    raw = bytes.fromhex(a)
    assert len(a) == 32 and a == a.upper()
    assert raw[:4] == bytes([10, 1, 2, 3])
    assert raw[4:6] == struct.pack(">H", 0x2345)
    ms, counter = struct.unpack(">IH", raw[10:])
    assert ms == now - _month_start_ms(now) == 14 * 86_400_000 + 12 * 3_600_000
    assert counter == 1
    assert bytes.fromhex(b)[:14] == raw[:14] and struct.unpack(">H", bytes.fromhex(b)[14:])[0] == 2
    assert gen.prefix == a[:20]


def test_month_rollover_restarts_the_time_part() -> None:
    t = {"now": int(datetime(2026, 1, 31, 23, 59, 59).timestamp() * 1000)}
    gen = UniqIdGenerator(ip=bytes(4), pid=1, clock_ms=lambda: t["now"])
    before = struct.unpack(">I", bytes.fromhex(gen.next_id())[10:14])[0]
    t["now"] += 2000   # 1 s into February
    after = struct.unpack(">I", bytes.fromhex(gen.next_id())[10:14])[0]
    assert before > 30 * 86_400_000 and after == 1000


def test_counter_wraps_at_16_bits() -> None:
    gen = UniqIdGenerator(ip=bytes(4), pid=1, clock_ms=lambda: 1_700_000_000_000)
    ids = [gen.next_id() for _ in range(65537)]
    assert struct.unpack(">H", bytes.fromhex(ids[-1])[14:])[0] == 1
    assert len(set(ids[:65536])) == 65536


def test_unique_across_threads() -> None:
    gen = UniqIdGenerator()
    with ThreadPoolExecutor(8) as pool:
        ids = [i for chunk in pool.map(lambda _: [gen.next_id() for _ in range(2000)], range(8))
               for i in chunk]
    assert len(set(ids)) == len(ids) == 16000
    assert bytes.fromhex(ids[0])[4:6] == struct.pack(">H", os.getpid() & 0xFFFF)


def test_local_ipv4_is_four_bytes() -> None:
    assert len(local_ipv4()) == 4


def test_bad_ip_is_refused() -> None:
    with pytest.raises(ValueError, match="4-byte"):
        UniqIdGenerator(ip=b"\x00" * 16)
