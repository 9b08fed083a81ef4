"""Frozen domain values shared by the client, the sidecar and the Spark layer.

Offsets follow one convention everywhere: an offset is the *next* queue offset to read,
and a range is half-open ``[start, end)``.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from enum import Enum
from typing import Mapping

from rocketmq_spark.remoting.message import MessageExt
from rocketmq_spark.remoting.route import MessageQueue

__all__ = ["Message", "MessageExt", "MessageQueue", "SendResult", "PullStatus", "PullResult",
           "QueueOffsets", "HalfMessage"]


@dataclass(frozen=True)
class Message:
    """A message to send. ``properties`` are user properties; tags/keys have their own fields."""

    topic: str
    body: bytes
    tags: str | None = None
    keys: str | None = None
    properties: Mapping[str, str] = field(default_factory=dict)
    flag: int = 0
    delay_level: int = 0


@dataclass(frozen=True)
class SendResult:
    status: str            # SEND_OK, FLUSH_DISK_TIMEOUT, SLAVE_NOT_AVAILABLE, FLUSH_SLAVE_TIMEOUT
    msg_id: str            # the UNIQ_KEY(s) we generated, joined by "," for a batch
    offset_msg_id: str     # the broker's offset message id(s)
    queue: MessageQueue
    queue_offset: int      # offset of the (first) message


@dataclass(frozen=True)
class HalfMessage:
    """A transactional (half) message the broker holds until END_TRANSACTION: what a commit
    or a rollback names. ``queue`` is where a commit delivers it (the half message itself
    sits in RMQ_SYS_TRANS_HALF_TOPIC on ``queue``'s broker)."""

    queue: MessageQueue
    commit_log_offset: int          # of the half message, on queue.broker_name
    tran_state_table_offset: int    # its offset in the half topic's queue
    msg_id: str                     # its UNIQ_KEY

    @classmethod
    def of(cls, result: "SendResult") -> "HalfMessage":
        """The half message a transactional send stored (its answer's offsets)."""
        from rocketmq_spark.remoting.message import parse_offset_msg_id

        _host, offset = parse_offset_msg_id(result.offset_msg_id)
        return cls(result.queue, offset, result.queue_offset, result.msg_id)


class PullStatus(Enum):
    FOUND = 0
    NO_NEW_MSG = 19
    NO_MATCHED_MSG = 20
    OFFSET_ILLEGAL = 21


@dataclass(frozen=True)
class PullResult:
    status: PullStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    messages: tuple[MessageExt, ...] = ()
    suggest_which_broker_id: int = 0
    # the FOUND body as received, when the caller asked for it undecoded (``decode=False``):
    # then ``messages`` stays empty and the broker's tag-hash filter is all that was applied
    raw_body: bytes = field(default=b"", repr=False)


@dataclass(frozen=True)
class WalkedBodies:
    """Pull bodies as a compiled run of pulls read them, and where each of their records
    starts: ``starts`` holds the positions in ``data`` as native int32, in the rows' order.
    The answers were read straight into ``data`` and stay where they arrived, so frame
    headers (and bodies of later offsets) may lie between the records; the run noted the
    starts while the bytes were in cache, so the decoder does not walk them again."""

    data: bytes = field(repr=False)
    starts: bytes = field(repr=False)

    @property
    def records(self) -> int:
        return len(self.starts) // 4

    def joined(self) -> bytes:
        """The records one after the other, as the bodies were sent (for a decoder that
        walks bodies itself: the per-message one, and damaged data's errors)."""
        data, pieces = memoryview(self.data), []
        begin = stop = 0
        for (at,) in struct.iter_unpack("=i", self.starts):
            if at != stop:                  # not right after the record before: a new piece
                pieces.append(data[begin:stop])
                begin = at
            stop = at + int.from_bytes(data[at:at + 4], "big")
        pieces.append(data[begin:stop])
        return b"".join(pieces)


@dataclass(frozen=True)
class QueueOffsets:
    queue: MessageQueue
    min_offset: int
    max_offset: int
    committed: int | None = None   # None: the group never committed this queue
