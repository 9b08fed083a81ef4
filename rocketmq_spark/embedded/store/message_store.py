"""The message store of one broker: commit log + consume queues, put and get.

How this works. ``put`` takes messages (``MessageExt`` values without offsets), and under
one lock gives each the next queue offset of its (topic, queue), a store timestamp (never
going backwards), encodes the record, appends it to the commit log and its entry to the
consume queue; it then tells the arrival listeners (long polling, the delay timer) which
queues grew. A message is readable as soon as ``put`` returns; it is durable once the
commit log's flusher has fsynced past ``PutResult.end_offset`` (``when_durable``).
``get`` implements the store side of a pull: the status table of Apache's
``DefaultMessageStore.getMessage`` (FOUND, NO_MATCHED_MESSAGE, OFFSET_OVERFLOW_ONE, ...),
tag filtering on the consume-queue tag codes and the in-memory batch limits.
``open`` recovers: the commit log is scanned (torn tail truncated) and every consume
queue is rebuilt from it, repaired on disk where it disagrees.

Entries of ``SCHEDULE_TOPIC_XXXX`` carry the delivery time in their tag code (as in
Apache), so the delay timer needs no message reads to know what is due.

A message whose sysFlag says transaction PREPARED or ROLLBACK goes to the commit log only,
with queue offset 0, and never into a consume queue (Apache's dispatcher skips them): a
send with sysFlag 4 but no TRAN_MSG property is answered and then invisible, as in 4.9.8.
Half messages are stored with those bits cleared, in RMQ_SYS_TRANS_HALF_TOPIC.
"""

from __future__ import annotations

import bisect
import fcntl
import logging
import os
import threading
from array import array
from collections import deque
from dataclasses import dataclass, field, replace
from enum import Enum
from pathlib import Path
from typing import Callable, Iterable, Sequence

from rocketmq_spark.embedded.clock import Clock
from rocketmq_spark.embedded.store.commitlog import (DEFAULT_SEGMENT_SIZE, CommitLog,
                                                     DurableCallback, RecordInfo, parse_record)
from rocketmq_spark.embedded.store.consumequeue import ConsumeQueue
from rocketmq_spark.embedded.store.index import MAX_QUERY_NUM, KeyIndex, index_keys
from rocketmq_spark.remoting.codes import DELAY_LEVELS_MS, SCHEDULE_TOPIC, MessageSysFlag
from rocketmq_spark.remoting.message import (PROP_KEYS, PROP_UNIQ_KEY, HostPort, MessageExt, encode_message,
                                             encode_properties, offset_msg_id, tags_code)

log = logging.getLogger(__name__)

MAX_MESSAGE_SIZE = 4 * 1024 * 1024       # maxMessageSize
MAX_PROPERTIES_SIZE = 32767
MAX_TRANSFER_COUNT = 32                  # maxTransferCountOnMessageInMemory (default)
MAX_TRANSFER_BYTES = 256 * 1024          # maxTransferBytesOnMessageInMemory
MAX_FILTER_BYTES = 16000                 # maxFilterMessageSize (bytes of consume queue)

ArrivalListener = Callable[[str, int, int, Sequence[int]], None]
# Transaction types kept out of the consume queues (CommitLogDispatcherBuildConsumeQueue).
NOT_INDEXED = frozenset({MessageSysFlag.TRANSACTION_PREPARED_TYPE, MessageSysFlag.TRANSACTION_ROLLBACK_TYPE})


def indexed(sys_flag: int) -> bool:
    """Whether a record with ``sys_flag`` gets a consume-queue entry."""
    return (sys_flag & MessageSysFlag.TRANSACTION_MASK) not in NOT_INDEXED


def _ANY(_code: int) -> bool:
    return True


class GetStatus(Enum):
    FOUND = "FOUND"
    NO_MATCHED_MESSAGE = "NO_MATCHED_MESSAGE"
    MESSAGE_WAS_REMOVING = "MESSAGE_WAS_REMOVING"
    OFFSET_FOUND_NULL = "OFFSET_FOUND_NULL"
    OFFSET_OVERFLOW_BADLY = "OFFSET_OVERFLOW_BADLY"
    OFFSET_OVERFLOW_ONE = "OFFSET_OVERFLOW_ONE"
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"
    NO_MATCHED_LOGIC_QUEUE = "NO_MATCHED_LOGIC_QUEUE"
    NO_MESSAGE_IN_QUEUE = "NO_MESSAGE_IN_QUEUE"


@dataclass(frozen=True)
class GetResult:
    status: GetStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    body: bytes = field(default=b"", repr=False)   # the found records, one after the other
    count: int = 0                                  # how many records ``body`` holds


@dataclass(frozen=True)
class Stored:
    """Where one message went."""

    topic: str
    queue_id: int
    queue_offset: int
    commit_log_offset: int
    size: int
    msg_id: str


@dataclass(frozen=True)
class PutResult:
    stored: tuple[Stored, ...]
    end_offset: int
    store_timestamp: int


class StoreError(Exception):
    def __init__(self, code: int, remark: str) -> None:
        super().__init__(remark)
        self.code = code
        self.remark = remark


@dataclass
class _Rebuild:
    first: int
    entries: list[tuple[int, int, int]] = field(default_factory=list)
    times: array = field(default_factory=lambda: array("q"))


class MessageStore:
    def __init__(self, root: Path, store_host: HostPort, *, clock: Clock,
                 segment_size: int = DEFAULT_SEGMENT_SIZE, flush_interval: float = 0.5,
                 delay_levels_ms: Sequence[int] = DELAY_LEVELS_MS,
                 max_transfer_count: int = MAX_TRANSFER_COUNT, dispatch_lag_ms: int = 0) -> None:
        if max_transfer_count < 1:
            raise ValueError(f"max_transfer_count must be at least 1, not {max_transfer_count}")
        self.root = Path(root)
        self.max_transfer_count = max_transfer_count    # messages a pull returns at most
        if dispatch_lag_ms < 0:
            raise ValueError(f"dispatch_lag_ms must be at least 0, not {dispatch_lag_ms}")
        # Readers see a consume-queue entry only this long after its store time: Apache's
        # broker answers a send once the record is in the commit log and builds the consume
        # queue from it on another thread, so a pull right after a send can miss the record.
        self.dispatch_lag_ms = dispatch_lag_ms
        self._undispatched: deque[tuple[int, int]] = deque()   # (store time, commit-log end) of puts
        self._dispatched = 0
        self.store_host = store_host
        self.clock = clock
        self.delay_levels_ms = tuple(delay_levels_ms)
        self.commitlog = CommitLog(self.root / "commitlog", segment_size=segment_size,
                                   flush_interval=flush_interval)
        self.cq_root = self.root / "consumequeue"
        self._queues: dict[tuple[str, int], ConsumeQueue] = {}
        self._lock = threading.Lock()
        self._last_ts = 0
        self._listeners: list[ArrivalListener] = []
        self._lock_fd: int | None = None
        self.index = KeyIndex()

    # ------------------------------------------------------------ life cycle

    def open(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self._lock_fd = os.open(self.root / "lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._lock_fd)
            self._lock_fd = None
            raise RuntimeError(f"store directory {self.root} is in use by another broker") from None
        self._recover()
        self.commitlog.start()

    def close(self) -> None:
        self.commitlog.close()
        for cq in self._queues.values():
            cq.close()
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def _recover(self) -> None:
        rebuilt: dict[tuple[str, int], _Rebuild] = {}
        last_ts = 0

        def on_record(info: RecordInfo) -> None:
            nonlocal last_ts
            last_ts = max(last_ts, info.store_timestamp)
            self._index(info.topic, info.sys_flag, info.uniq_key, info.keys, info.phys, info.store_timestamp)
            if not indexed(info.sys_flag):
                return
            key = (info.topic, info.queue_id)
            r = rebuilt.get(key)
            if r is None:
                r = rebuilt[key] = _Rebuild(info.queue_offset)
            elif info.queue_offset != r.first + len(r.entries):
                log.warning("store: %s queue %d: record at %d has queue offset %d, expected %d",
                            info.topic, info.queue_id, info.phys, info.queue_offset,
                            r.first + len(r.entries))
            r.entries.append((info.phys, info.size,
                              self._tag_code(info.topic, info.queue_id, info.tags, info.store_timestamp)))
            r.times.append(info.store_timestamp)

        self.commitlog.recover(on_record)
        self._last_ts = last_ts
        keys = set(rebuilt)
        if self.cq_root.is_dir():
            for tdir in self.cq_root.iterdir():
                for qdir in tdir.iterdir() if tdir.is_dir() else ():
                    if qdir.name.isdigit():
                        keys.add((tdir.name, int(qdir.name)))
        clog_min = self.commitlog.min_offset
        for key in sorted(keys):
            cq = ConsumeQueue(self.cq_root, *key)
            on_disk = cq.read_file()
            r = rebuilt.get(key)
            if r is not None:
                prefix = on_disk[:r.first]
                prefix += [(-1, 0, 0)] * (r.first - len(prefix))
                entries, times = prefix + r.entries, array("q", [0] * r.first) + r.times
            else:  # nothing in the commit log: keep entries of deleted segments only
                entries = [e for e in on_disk if e[0] < clog_min]
                times = array("q", [0] * len(entries))
            if cq.install(entries, times):
                log.warning("store: rebuilt consume queue %s/%d from the commit log (%d entries)",
                            key[0], key[1], len(entries))
            self._queues[key] = cq

    # ------------------------------------------------------------ writing

    def _index(self, topic: str, sys_flag: int, uniq_key: str | None, keys: str | None,
               phys: int, store_ts: int) -> None:
        filed = index_keys(sys_flag, uniq_key, keys)
        if filed:
            self.index.add(topic, filed, phys, store_ts)

    def add_listener(self, listener: ArrivalListener) -> None:
        self._listeners.append(listener)

    def _tag_code(self, topic: str, queue_id: int, tags: str | None, store_ts: int) -> int:
        if topic == SCHEDULE_TOPIC:
            level = min(max(queue_id, 0), len(self.delay_levels_ms) - 1)
            return store_ts + self.delay_levels_ms[level]
        return tags_code(tags)

    def _queue(self, topic: str, queue_id: int) -> ConsumeQueue:
        key = (topic, queue_id)
        cq = self._queues.get(key)
        if cq is None:
            cq = self._queues[key] = ConsumeQueue(self.cq_root, topic, queue_id)
        return cq

    def put(self, messages: Sequence[MessageExt]) -> PutResult:
        """Store ``messages`` (offsets and store fields are filled in here) in one go."""
        check_sizes(messages)
        stored: list[Stored] = []
        grown: dict[tuple[str, int], list[int]] = {}
        with self._lock:
            now = self._last_ts = max(self.clock.now_ms(), self._last_ts)
            for m in messages:
                if not indexed(m.sys_flag):  # commit log only, queue offset 0
                    record = bytearray(encode_message(replace(
                        m, queue_offset=0, commit_log_offset=0, store_timestamp=now, store_host=self.store_host)))
                    phys = self.commitlog.append(record)
                    self._index(m.topic, m.sys_flag, m.properties.get(PROP_UNIQ_KEY),
                                m.properties.get(PROP_KEYS), phys, now)
                    stored.append(Stored(m.topic, m.queue_id, 0, phys, len(record),
                                         offset_msg_id(self.store_host, phys)))
                    continue
                cq = self._queue(m.topic, m.queue_id)
                record = bytearray(encode_message(replace(
                    m, queue_offset=cq.max_offset, commit_log_offset=0, store_timestamp=now,
                    store_host=self.store_host)))
                phys = self.commitlog.append(record)
                self._index(m.topic, m.sys_flag, m.properties.get(PROP_UNIQ_KEY),
                            m.properties.get(PROP_KEYS), phys, now)
                tag = self._tag_code(m.topic, m.queue_id, m.properties.get("TAGS"), now)
                qoff = cq.append(phys, len(record), tag, now)
                stored.append(Stored(m.topic, m.queue_id, qoff, phys, len(record),
                                     offset_msg_id(self.store_host, phys)))
                grown.setdefault((m.topic, m.queue_id), []).append(tag)
            end = self.commitlog.max_offset
            if self.dispatch_lag_ms:
                self._undispatched.append((now, end))
        self._tell_arrivals(grown)
        return PutResult(tuple(stored), end, now)

    def put_replicated(self, data: bytes, base: int) -> int:
        """Append records copied from a master's commit log at ``base`` (which must be
        where this log ends) and dispatch them to the consume queues as recovery does;
        returns the new end. Offsets are the master's: each record keeps the queue offset
        and commit-log offset it was stored with."""
        records: list[RecordInfo] = []
        pos = 0
        while pos < len(data):
            info = parse_record(data, pos, base)       # BadRecord if the copy is damaged
            records.append(info)
            pos += info.size
        grown: dict[tuple[str, int], list[int]] = {}
        with self._lock:
            if self.commitlog.max_offset != base:
                if self.commitlog.max_offset == 0 and self.commitlog.min_offset == 0 and base > 0:
                    self.commitlog.start_at(base)
                else:
                    raise ValueError(f"copy starts at {base}, the commit log ends at {self.commitlog.max_offset}")
            for info in records:
                start = info.phys - base
                self.commitlog.append(bytearray(data[start:start + info.size]))
                self._last_ts = max(self._last_ts, info.store_timestamp)
                self._index(info.topic, info.sys_flag, info.uniq_key, info.keys, info.phys,
                            info.store_timestamp)
                if not indexed(info.sys_flag):
                    continue
                cq = self._queue(info.topic, info.queue_id)
                if info.queue_offset < cq.max_offset:
                    continue                             # already dispatched (never expected)
                if info.queue_offset > cq.max_offset:   # the master's queue began later
                    log.warning("store: %s queue %d: copied record has queue offset %d, this queue ends "
                                "at %d", info.topic, info.queue_id, info.queue_offset, cq.max_offset)
                    if cq.max_offset == 0:
                        cq.install([(-1, 0, 0)] * info.queue_offset, array("q", [0] * info.queue_offset))
                tag = self._tag_code(info.topic, info.queue_id, info.tags, info.store_timestamp)
                cq.append(info.phys, info.size, tag, info.store_timestamp)
                grown.setdefault((info.topic, info.queue_id), []).append(tag)
            end = self.commitlog.max_offset
        self._tell_arrivals(grown)
        return end

    def _tell_arrivals(self, grown: dict[tuple[str, int], list[int]]) -> None:
        """The arrival listeners (long polling, the delay timer, ...): which queues grew,
        to what max offset, with the new entries' tag codes. Called outside the lock."""
        for (topic, qid), tags in grown.items():
            max_offset = self._queues[(topic, qid)].max_offset
            for listener in self._listeners:
                try:
                    listener(topic, qid, max_offset, tags)
                except Exception:
                    log.exception("store: arrival listener failed")

    def when_durable(self, end_offset: int, callback: DurableCallback) -> None:
        self.commitlog.when_durable(end_offset, callback)

    # ------------------------------------------------------------ reading

    def queue_keys(self) -> list[tuple[str, int]]:
        return list(self._queues)

    def min_offset(self, topic: str, queue_id: int) -> int:
        cq = self._queues.get((topic, queue_id))
        return cq.first_valid(self.commitlog.min_offset) if cq else 0

    def max_offset(self, topic: str, queue_id: int) -> int:
        cq = self._queues.get((topic, queue_id))
        return self._visible_max(cq) if cq else 0

    def dispatched_offset(self) -> int:
        """How far into the commit log readers see (the commit log's end without a lag)."""
        if not self.dispatch_lag_ms:
            return self.commitlog.max_offset
        with self._lock:
            due = self.clock.now_ms() - self.dispatch_lag_ms
            while self._undispatched and self._undispatched[0][0] <= due:
                self._dispatched = self._undispatched.popleft()[1]
            return self._dispatched if self._undispatched else self.commitlog.max_offset

    def _visible_max(self, cq: ConsumeQueue) -> int:
        """The consume queue's max offset as readers see it (``dispatch_lag_ms``)."""
        if not self.dispatch_lag_ms:
            return cq.max_offset
        return bisect.bisect_right(cq.times, self.clock.now_ms() - self.dispatch_lag_ms)

    def entry(self, topic: str, queue_id: int, offset: int) -> tuple[int, int, int] | None:
        """(commit-log offset, size, tag code) of a queue offset, or None."""
        cq = self._queues.get((topic, queue_id))
        if cq is None or not 0 <= offset < cq.max_offset:
            return None
        return cq.phys[offset], cq.sizes[offset], cq.tags[offset]

    def store_time(self, topic: str, queue_id: int, offset: int) -> int:
        """Store time of the message at ``offset``, -1 when there is none."""
        cq = self._queues.get((topic, queue_id))
        if cq is None or not self.min_offset(topic, queue_id) <= offset < cq.max_offset:
            return -1
        return cq.times[offset]

    def earliest_time(self, topic: str, queue_id: int) -> int:
        return self.store_time(topic, queue_id, self.min_offset(topic, queue_id))

    def search_offset(self, topic: str, queue_id: int, timestamp: int) -> int:
        cq = self._queues.get((topic, queue_id))
        if cq is None:
            return 0
        return cq.search_nearest(timestamp, self.min_offset(topic, queue_id), cq.max_offset)

    def read_message(self, topic: str, queue_id: int, offset: int) -> bytes | None:
        e = self.entry(topic, queue_id, offset)
        return self.commitlog.read(e[0], e[1]) if e else None

    def message_at(self, commit_log_offset: int) -> bytes | None:
        """The record that starts at ``commit_log_offset`` (VIEW_MESSAGE_BY_ID, send-back)."""
        return self.commitlog.read_record_at(commit_log_offset)

    def query(self, topic: str, key: str, max_num: int, begin_ms: int, end_ms: int) -> list[bytes]:
        """QUERY_MESSAGE: the newest ``max_num`` (at most ``MAX_QUERY_NUM``) records filed
        under ``topic#key`` stored in ``[begin_ms, end_ms]``, oldest first (the order a live
        5.5.0 answers in); records of deleted commit-log segments are gone from the answer."""
        out: list[bytes] = []
        limit = min(max_num, MAX_QUERY_NUM)
        for phys in self.index.find(topic, key):
            if len(out) >= limit:
                break
            record = self.commitlog.read_record_at(phys) if phys >= self.commitlog.min_offset else None
            if record is not None and begin_ms <= parse_record(record, 0, phys).store_timestamp <= end_ms:
                out.append(record)
        return out[::-1]

    def get(self, topic: str, queue_id: int, offset: int, max_nums: int,
            accept: Callable[[int], bool] | None = None,
            match: Callable[[bytes], bool] | None = None) -> GetResult:
        """The store half of a pull (``DefaultMessageStore.getMessage``). ``accept`` takes
        tag codes (the consume queue's filter); ``match`` takes the stored record of an
        entry ``accept`` took (Apache's ``isMatchedByCommitLog``: a SQL92 selector on the
        properties); entries either refuses are skipped, and the next begin offset moves
        past them."""
        if match is not None and accept is None:
            accept = _ANY
        cq = self._queues.get((topic, queue_id))
        if cq is None:  # Apache creates a queue on first look: an empty one
            return GetResult(GetStatus.NO_MESSAGE_IN_QUEUE, 0, 0, 0)
        lo, hi = self.min_offset(topic, queue_id), self._visible_max(cq)
        if hi == 0:
            return GetResult(GetStatus.NO_MESSAGE_IN_QUEUE, 0, lo, hi)
        if offset < lo:
            return GetResult(GetStatus.OFFSET_TOO_SMALL, lo, lo, hi)
        if offset == hi:
            return GetResult(GetStatus.OFFSET_OVERFLOW_ONE, offset, lo, hi)
        if offset > hi:
            return GetResult(GetStatus.OFFSET_OVERFLOW_BADLY, hi, lo, hi)
        if accept is None:                 # no filter: the next entries, up to the limits
            last = min(hi, offset + min(max_nums, self.max_transfer_count))
            total = sum(cq.sizes[offset:last])
            if total <= MAX_TRANSFER_BYTES and cq.phys[last - 1] + cq.sizes[last - 1] - cq.phys[offset] == total:
                # one stretch of the commit log (records never overlap): one read, as is
                body = self.commitlog.read(cq.phys[offset], total)
                if body is not None:
                    return GetResult(GetStatus.FOUND, last, lo, hi, body, last - offset)
            picked = list(range(offset, last))
            if total > MAX_TRANSFER_BYTES:
                picked = self._within_bytes(cq, picked)
            i = picked[-1] + 1
        else:
            picked, i = self._scan(cq, offset, hi, max_nums, self.max_transfer_count, accept,
                                   None if match is None else self._matcher(cq, match))
        if not picked:
            return GetResult(GetStatus.NO_MATCHED_MESSAGE, i, lo, hi)
        pieces, count = self._read_runs(cq, picked)
        if count < len(picked):            # a record is gone (retention): stop before it
            i = picked[count]
            if not count:
                return GetResult(GetStatus.MESSAGE_WAS_REMOVING, i, lo, hi)
        return GetResult(GetStatus.FOUND, i, lo, hi, b"".join(pieces), count)

    @staticmethod
    def _within_bytes(cq: ConsumeQueue, picked: list[int]) -> list[int]:
        """The first entries of ``picked`` within MAX_TRANSFER_BYTES (at least one)."""
        total = 0
        for n, at in enumerate(picked):
            total += cq.sizes[at]
            if n and total > MAX_TRANSFER_BYTES:
                return picked[:n]
        return picked

    def _matcher(self, cq: ConsumeQueue, match: Callable[[bytes], bool]) -> Callable[[int], bool]:
        """Whether the record at a queue position passes ``match`` (a record gone: not)."""
        def matched(i: int) -> bool:
            record = self.commitlog.read(cq.phys[i], cq.sizes[i])
            return record is not None and match(record)
        return matched

    @staticmethod
    def _scan(cq: ConsumeQueue, offset: int, hi: int, max_nums: int, max_count: int,
              accept: Callable[[int], bool],
              matched: Callable[[int], bool] | None = None) -> tuple[list[int], int]:
        """Entries from ``offset`` whose tag code ``accept`` takes, within the limits, and
        the position after the last entry looked at."""
        picked: list[int] = []
        total = 0
        scan_limit = offset + max(MAX_FILTER_BYTES // 20, max_nums)   # Apache's, from the asked count
        count_limit = min(max_nums, max_count)
        i = offset
        while i < hi and i < scan_limit:
            size = cq.sizes[i]
            if picked and (len(picked) >= count_limit or total + size > MAX_TRANSFER_BYTES):
                break
            if accept(cq.tags[i]) and (matched is None or matched(i)):
                picked.append(i)
                total += size
            i += 1
        return picked, i

    def _read_runs(self, cq: ConsumeQueue, picked: list[int]) -> tuple[list[bytes], int]:
        """The records at queue positions ``picked``, in pieces (one per run of records
        that follow each other in the commit log, read with one call), and how many they
        hold; stops at the first one not readable."""
        pieces: list[bytes] = []
        count = j = 0
        while j < len(picked):
            start = end = cq.phys[picked[j]]
            k = j
            while k < len(picked) and cq.phys[picked[k]] == end:
                end += cq.sizes[picked[k]]
                k += 1
            run = self.commitlog.read(start, end - start)
            if run is None:                 # e.g. across a segment end: record by record
                for n in picked[j:k]:
                    data = self.commitlog.read(cq.phys[n], cq.sizes[n])
                    if data is None:
                        return pieces, count
                    pieces.append(data)
                    count += 1
            else:
                pieces.append(run)
                count += k - j
            j = k
        return pieces, count

    # ------------------------------------------------------------ retention

    def delete_segments_before(self, commit_log_offset: int) -> int:
        """Drop commit-log segments that end at or before the offset; queue min offsets
        move past the messages they held. Returns the commit log's new min offset."""
        with self._lock:
            return self.commitlog.delete_segments_before(commit_log_offset)


MESSAGE_ILLEGAL_REMARK = ("the message is illegal, maybe msg body or properties length not matched. "
            "msg body length limit 4194304B, msg properties length limit 32KB.")


_INT32 = range(-(1 << 31), 1 << 31)
_INT64 = range(-(1 << 63), 1 << 63)


def check_sizes(messages: Iterable[MessageExt]) -> None:
    """Refuse bodies over 4 MiB and properties over 32 KiB (MESSAGE_ILLEGAL, 13), and
    field values the record layout cannot hold (checked before anything is written, so
    a batch is stored whole or not at all)."""
    for m in messages:
        for name in ("queue_id", "flag", "sys_flag", "reconsume_times"):
            if getattr(m, name) not in _INT32:
                raise StoreError(1, f"{name} {getattr(m, name)} does not fit the stored record")
        if m.born_timestamp not in _INT64:
            raise StoreError(1, f"born_timestamp {m.born_timestamp} does not fit the stored record")
        if len(m.body) > MAX_MESSAGE_SIZE or \
                len(encode_properties(m.properties).encode("utf-8")) > MAX_PROPERTIES_SIZE:
            raise StoreError(13, MESSAGE_ILLEGAL_REMARK)
