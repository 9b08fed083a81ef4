"""Which address of a broker name a read goes to: the master, or a slave when it must.

RocketMQ's consumers read a queue from the broker its last pull answer suggested
(``suggestWhichBrokerId``: a master that is behind on disk hands reads to its slave, a
slave hands them back), and take any address of the broker name when that one is not in
the route (``findBrokerAddressInSubscribe``): a NameServer drops a master whose connection
closed, so while a master is away its slaves serve the reads. Slaves hold the same queues
at the same offsets (the commit log is replicated whole), so a range read partly from the
master and partly from a slave yields the rows either would.

This module adds one thing the Java client leaves to its 30-second route refresh: an
address that just refused or dropped a read is passed over for ``DOWN_FOR`` seconds while
another address of the name is known, so a read goes on at once instead of waiting for the
NameServer to notice.
"""

from __future__ import annotations

import threading
import time
from typing import Callable, Mapping

from rocketmq_spark.remoting.route import MASTER_ID

DOWN_FOR = 10.0          # seconds an address that failed a read is passed over


class Unreachable:
    """Addresses that failed a read lately (thread-safe)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, down_for: float = DOWN_FOR) -> None:
        self._clock, self._down_for = clock, down_for
        self._until: dict[str, float] = {}
        self._lock = threading.Lock()

    def mark(self, address: str) -> None:
        with self._lock:
            self._until[address] = self._clock() + self._down_for

    def clear(self, address: str) -> None:
        with self._lock:
            self._until.pop(address, None)

    def down(self, address: str) -> bool:
        with self._lock:
            until = self._until.get(address)
            if until is None:
                return False
            if self._clock() >= until:
                del self._until[address]
                return False
            return True


def choose(addrs: Mapping[int, str], suggested: int, down: Callable[[str], bool]) -> tuple[int, str] | None:
    """(broker id, address) to read from among ``addrs`` (broker id -> address of one broker
    name): the suggested id, else the master, else the lowest slave id, skipping addresses
    that are ``down`` while another is up; None when ``addrs`` is empty."""
    order = [suggested, MASTER_ID] + sorted(i for i in addrs if i not in (suggested, MASTER_ID))
    known = [(i, addrs[i]) for i in dict.fromkeys(order) if i in addrs]
    for broker_id, addr in known:
        if not down(addr):
            return broker_id, addr
    return known[0] if known else None
