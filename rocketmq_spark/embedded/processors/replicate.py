"""REPLICATE_COMMIT_LOG, the master's side of replication (``embedded.replication`` is the
slave's): whole records of the commit log from the offset where the slave's log ends.

How this works. The request carries extFields ``offset`` and ``maxBytes``; the answer's
body holds whole records from ``offset`` (``CommitLog.read_records``), its extFields the
master's ``minOffset``/``maxOffset`` and the ``offset`` the body starts at. While the
master has nothing past ``offset`` it holds the request up to ``HOLD_MS`` (on the reader
thread of the slave's own connection: no other client waits for it), so a slave is behind
by a round trip, not by a poll interval. The code is this project's own: Apache's HA
speaks a raw protocol on a port of its own.
"""

from __future__ import annotations

import threading
from typing import Callable

from rocketmq_spark.embedded.processors.base import BrokerContext, Call, Refuse
from rocketmq_spark.remoting.codes import ResponseCode
from rocketmq_spark.remoting.command import RemotingCommand

REPLICATE_COMMIT_LOG = 30001       # not a code Apache's brokers know
MAX_BYTES = 4 * 1024 * 1024        # commit log sent per answer at most (one record more if larger)
HOLD_MS = 1000                     # how long a request waits while there is nothing new


class CommitLogWaiters:
    """Masters park replication requests here until their commit log grows."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._closed = False

    def notify(self, *_: object) -> None:           # a store arrival listener
        with self._cond:
            self._cond.notify_all()

    def close(self) -> None:
        """The broker stops: held requests are answered now."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def wait_beyond(self, end: Callable[[], int], offset: int, timeout: float) -> None:
        with self._cond:
            self._cond.wait_for(lambda: self._closed or end() > offset, timeout)


def handle_replicate(broker: BrokerContext, call: Call) -> RemotingCommand:
    """A slave's REPLICATE_COMMIT_LOG: extFields ``offset`` (where its log ends) and
    ``maxBytes``; the body holds whole records from ``offset``, extFields the master's
    ``minOffset``/``maxOffset``. A slave whose log ends past the master's is refused: its
    log holds what this one never had."""
    try:
        offset = int(call.ext["offset"])
        max_bytes = max(1, min(int(call.ext.get("maxBytes", MAX_BYTES)), MAX_BYTES))
    except (KeyError, ValueError):
        raise Refuse(ResponseCode.SYSTEM_ERROR, "REPLICATE_COMMIT_LOG needs an integer offset") from None
    if broker.is_slave:
        raise Refuse(ResponseCode.SYSTEM_ERROR, f"{broker.name} is a slave; replicate from its master")
    clog = broker.store.commitlog
    if offset > clog.max_offset:
        raise Refuse(ResponseCode.SYSTEM_ERROR, f"the slave's commit log ends at {offset}, past this "
                                                f"master's end {clog.max_offset}")
    if offset == clog.max_offset:
        broker.replication_waiters.wait_beyond(lambda: clog.max_offset, offset, HOLD_MS / 1000)
    start = clog.min_offset if offset == 0 else offset    # a new slave starts where the master does
    body = clog.read_records(start, max_bytes)
    return call.answer(ResponseCode.SUCCESS, ext={"offset": str(start), "minOffset": str(clog.min_offset),
                                                 "maxOffset": str(clog.max_offset)}, body=body)
