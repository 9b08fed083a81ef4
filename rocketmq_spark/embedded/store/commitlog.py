"""The commit log: every stored message, appended in segment files.

How this works. Records are the stored-message layout of ``remoting.message`` written one
after another; a record's byte position in the whole log is its commit-log (physical)
offset, and the commit log writes that offset into the record's PHYSICALOFFSET field
itself. The log is split into segment files named by the offset of their first byte (20
digits, as Apache's store names them). A record never spans two segments: when it does
not fit in the current one, a new segment starts where the log ends, so offsets have no
gaps. Writes go to the file at once (``os.pwrite``, visible to readers and to a restart
after ``kill -9``); a flusher thread fsyncs in batches (group commit) and then runs the
callbacks of every writer waiting for durability. ``recover`` reads every segment, checks
every record (size, magic, own offset, body CRC, layout) and truncates the log at the
first one that is torn or invalid.
"""

from __future__ import annotations

import bisect
import logging
import os
import struct
import threading
import time
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from rocketmq_spark.embedded.persist import fsync_dir
from rocketmq_spark.embedded.service_thread import ServiceThread
from rocketmq_spark.remoting.codes import MessageSysFlag
from rocketmq_spark.remoting.message import MAGIC_V1, MAGIC_V2, decode_properties

log = logging.getLogger(__name__)

DEFAULT_SEGMENT_SIZE = 64 * 1024 * 1024
NAME_DIGITS = 20
_HEAD = struct.Struct(">iiiiiqqiq")  # size, magic, crc, queueId, flag, queueOffset, phys, sysFlag, born
_PHYS_POS = 28
_Q = struct.Struct(">q")
_I = struct.Struct(">i")
_H = struct.Struct(">h")

DurableCallback = Callable[[bool], None]


class BadRecord(ValueError):
    """The bytes at a position are not a whole, valid stored record."""


@dataclass(frozen=True, slots=True)
class RecordInfo:
    """What recovery needs from one record to rebuild the consume queues."""

    phys: int
    size: int
    topic: str
    queue_id: int
    queue_offset: int
    store_timestamp: int
    tags: str | None
    sys_flag: int = 0
    keys: str | None = None        # the KEYS and UNIQ_KEY properties (the message index)
    uniq_key: str | None = None


def parse_record(buf: bytes | memoryview, pos: int, base: int) -> RecordInfo:
    """Check and summarise the record at ``pos`` of a segment starting at offset ``base``."""
    n = len(buf)
    if pos + _HEAD.size > n:
        raise BadRecord(f"{n - pos} trailing bytes, shorter than a record header")
    size, magic, crc, queue_id, _flag, queue_offset, phys, sys_flag, _born = _HEAD.unpack_from(buf, pos)
    if magic not in (MAGIC_V1, MAGIC_V2):
        raise BadRecord(f"bad magic code 0x{magic & 0xFFFFFFFF:08X}")
    end = pos + size
    if size < _HEAD.size or end > n:
        raise BadRecord(f"record size {size} runs past the end of the segment")
    if phys != base + pos:
        raise BadRecord(f"record says it is at offset {phys}, found at {base + pos}")
    try:
        p = pos + _HEAD.size + (20 if sys_flag & MessageSysFlag.BORNHOST_V6 else 8)
        (store_ts,) = _Q.unpack_from(buf, p)
        p += 8 + (20 if sys_flag & MessageSysFlag.STOREHOST_V6 else 8) + 12
        (body_len,) = _I.unpack_from(buf, p)
        p += 4
        if body_len < 0 or p + body_len > end:
            raise BadRecord(f"body length {body_len} does not fit the record")
        if zlib.crc32(buf[p:p + body_len]) & 0x7FFFFFFF != crc:
            raise BadRecord("body CRC mismatch")
        p += body_len
        if magic == MAGIC_V2:
            (topic_len,) = _H.unpack_from(buf, p)
            p += 2
        else:
            topic_len = buf[p]
            p += 1
        topic = bytes(buf[p:p + topic_len]).decode("utf-8")
        p += topic_len
        (props_len,) = _H.unpack_from(buf, p)
        p += 2
        if props_len < 0 or p + props_len != end:
            raise BadRecord("properties length does not match the record size")
        props = bytes(buf[p:end]).decode("utf-8")
    except (struct.error, IndexError, UnicodeDecodeError) as exc:
        raise BadRecord(f"malformed record: {exc}") from None
    # decoded only when a property the store needs is there (most records: TAGS at most)
    named = decode_properties(props) if ("TAGS\x01" in props or "KEYS\x01" in props
                                         or "UNIQ_KEY\x01" in props) else {}
    return RecordInfo(phys, size, topic, queue_id, queue_offset, store_ts, named.get("TAGS"), sys_flag,
                      named.get("KEYS"), named.get("UNIQ_KEY"))


class _Segment:
    __slots__ = ("start", "path", "fd", "size")

    def __init__(self, start: int, path: Path, fd: int, size: int) -> None:
        self.start, self.path, self.fd, self.size = start, path, fd, size

    @property
    def end(self) -> int:
        return self.start + self.size


def _pwrite_all(fd: int, data: bytes | bytearray, pos: int) -> None:
    view = memoryview(data)
    while view:
        n = os.pwrite(fd, view, pos)
        view, pos = view[n:], pos + n


class CommitLog(ServiceThread):
    def __init__(self, directory: Path, *, segment_size: int = DEFAULT_SEGMENT_SIZE,
                 flush_interval: float = 0.5) -> None:
        if segment_size < 4096:
            raise ValueError(f"segment_size {segment_size} is below 4096 bytes")
        self.directory = Path(directory)
        super().__init__(f"flush-{self.directory.parent.name}")
        self.segment_size = segment_size
        self.flush_interval = flush_interval
        # (starts, segments) replaced as a whole so readers never see the two out of step.
        self._index: tuple[list[int], list[_Segment]] = ([], [])
        self._retired: list[_Segment] = []
        self._written = 0
        self._flushed = 0
        self._dirty: dict[int, _Segment] = {}
        self._dir_dirty = False
        self._waiters: list[tuple[int, DurableCallback]] = []
        self._last_flush = time.monotonic()

    # ------------------------------------------------------------ recovery

    def recover(self, on_record: Callable[[RecordInfo], None]) -> None:
        """Open the segments, validate every record in order, truncate a torn tail."""
        self.directory.mkdir(parents=True, exist_ok=True)
        paths = sorted(p for p in self.directory.iterdir()
                       if len(p.name) == NAME_DIGITS and p.name.isdigit())
        segments: list[_Segment] = []
        expected: int | None = None
        for i, path in enumerate(paths):
            start = int(path.name)
            if expected is not None and start != expected:
                log.error("commit log: segment %s does not start where the previous one ends "
                          "(%d); it and later segments are set aside", path.name, expected)
                self._set_aside(paths[i:])
                break
            data = path.read_bytes()
            pos, bad = 0, None
            while pos < len(data):
                try:
                    info = parse_record(data, pos, start)
                except BadRecord as exc:
                    bad = exc
                    break
                on_record(info)
                pos += info.size
            last = i == len(paths) - 1
            if bad is not None:
                log.warning("commit log: %s at offset %d (segment %s); truncating %d bytes",
                            bad, start + pos, path.name, len(data) - pos)
                os.truncate(path, pos)
            if pos == 0 and not last and bad is None:
                path.unlink()  # an empty segment left by a crash right after a roll
                continue
            fd = os.open(path, os.O_RDWR)
            segments.append(_Segment(start, path, fd, pos))
            expected = start + pos
            if bad is not None:
                if not last:
                    self._set_aside(paths[i + 1:])
                break
        if not segments:
            segments.append(self._open_new(0))
        else:
            os.fsync(segments[-1].fd)
        self._index = ([s.start for s in segments], segments)
        self._written = self._flushed = segments[-1].end
        fsync_dir(self.directory)

    def _set_aside(self, paths: list[Path]) -> None:
        for p in paths:
            p.rename(p.with_name(p.name + ".corrupt"))

    def _open_new(self, start: int) -> _Segment:
        path = self.directory / f"{start:0{NAME_DIGITS}d}"
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        return _Segment(start, path, fd, 0)

    # ------------------------------------------------------------ writing

    @property
    def min_offset(self) -> int:
        return self._index[1][0].start

    @property
    def max_offset(self) -> int:
        return self._index[1][-1].end

    @property
    def flushed_offset(self) -> int:
        """Everything before this offset is fsynced."""
        with self._cond:
            return self._flushed

    def append(self, record: bytearray) -> int:
        """Write ``record`` at the end of the log (rolling to a new segment if needed),
        after putting its own offset into PHYSICALOFFSET. Callers serialise appends."""
        starts, segments = self._index
        seg = segments[-1]
        rolled = False
        if seg.size and seg.size + len(record) > self.segment_size:
            seg = self._open_new(seg.end)
            self._index = (starts + [seg.start], segments + [seg])
            rolled = True
        phys = seg.end
        _Q.pack_into(record, _PHYS_POS, phys)
        _pwrite_all(seg.fd, record, seg.size)
        seg.size += len(record)
        with self._cond:
            was_clean = self._written == self._flushed
            self._written = seg.end
            self._dirty[seg.start] = seg
            self._dir_dirty |= rolled
            if was_clean:
                self._cond.notify()
        return phys

    def when_durable(self, end: int, callback: DurableCallback) -> None:
        """Run ``callback(ok)`` once everything before ``end`` is fsynced."""
        with self._cond:
            if self._flushed < end:
                self._waiters.append((end, callback))
                self._cond.notify()
                return
        callback(True)

    def flush(self) -> None:
        """fsync everything written so far, now, on the caller's thread."""
        done = threading.Event()
        self.when_durable(self._written, lambda ok: done.set())
        if self._thread is None:
            self._flush_once()
        done.wait()

    # ------------------------------------------------------------ reading

    def read(self, phys: int, size: int) -> bytes | None:
        starts, segments = self._index
        i = bisect.bisect_right(starts, phys) - 1
        if i < 0 or size <= 0:
            return None
        seg = segments[i]
        if phys + size > seg.end:
            return None
        try:
            data = os.pread(seg.fd, size, phys - seg.start)
        except OSError:
            return None
        return data if len(data) == size else None

    def read_records(self, phys: int, max_bytes: int) -> bytes:
        """Whole records from ``phys`` on, one segment's worth at most, about ``max_bytes``
        (at least one record when there is one): what a slave is sent to copy."""
        starts, segments = self._index
        i = bisect.bisect_right(starts, phys) - 1
        if i < 0 or phys < segments[0].start:
            return b""
        seg = segments[i]
        data = os.pread(seg.fd, min(max_bytes, seg.end - phys), phys - seg.start) if phys < seg.end else b""
        pos = 0
        while pos + 4 <= len(data):
            (size,) = _I.unpack_from(data, pos)
            if size <= 0 or pos + size > len(data):
                break
            pos += size
        if pos == 0 and len(data) >= 4:   # one record longer than max_bytes: send it whole
            (size,) = _I.unpack_from(data, 0)
            record = self.read(phys, size) if size > 0 else None
            return record or b""
        return data[:pos]

    def start_at(self, offset: int) -> None:
        """An empty log starts at ``offset`` instead of 0 (a new slave of a master whose
        older segments are gone)."""
        starts, segments = self._index
        if len(segments) != 1 or segments[0].size or segments[0].start == offset:
            raise ValueError(f"the commit log is not empty (it ends at {self.max_offset})")
        old = segments[0]
        os.close(old.fd)
        old.path.unlink()
        seg = self._open_new(offset)
        self._index = ([seg.start], [seg])
        with self._cond:
            self._written = self._flushed = offset
        fsync_dir(self.directory)

    def read_record_at(self, phys: int) -> bytes | None:
        """The whole record that starts exactly at ``phys``, or None."""
        head = self.read(phys, _HEAD.size)
        if head is None:
            return None
        size, magic = struct.unpack_from(">ii", head, 0)
        (own,) = _Q.unpack_from(head, _PHYS_POS)
        if magic not in (MAGIC_V1, MAGIC_V2) or size < _HEAD.size or own != phys:
            return None
        return self.read(phys, size)

    # ------------------------------------------------------------ retention

    def delete_segments_before(self, offset: int) -> int:
        """Delete whole segments that end at or before ``offset`` (never the last one).
        Returns the new min offset. (Retention; used by tests to move min offsets.)"""
        starts, segments = self._index
        keep = [s for s in segments[:-1] if s.end > offset] + [segments[-1]]
        gone = [s for s in segments if s not in keep]
        if gone:
            self._index = ([s.start for s in keep], keep)
            for s in gone:
                with self._cond:
                    self._dirty.pop(s.start, None)
                # The fd stays open until close(): a concurrent read must not find its
                # number reused by another file.
                self._retired.append(s)
                s.path.unlink()
            fsync_dir(self.directory)
        return self.min_offset

    # ------------------------------------------------------------ flushing

    def start(self) -> None:
        self.start_thread()

    def close(self) -> None:
        flusher = self._thread is not None
        self.stop_thread()              # the flusher flushes what is left before it ends
        if not flusher:
            self._flush_once()
        for seg in self._index[1] + self._retired:
            os.close(seg.fd)
        self._index, self._retired = ([], []), []

    def _should_flush(self) -> float | None:
        """0 to flush now, seconds to wait, or None to wait for news (caller holds the lock)."""
        if self._written <= self._flushed:
            return None
        if self._waiters or self._stopping:
            return 0
        return max(0.0, self._last_flush + self.flush_interval - time.monotonic())

    def _run(self) -> None:
        while True:
            with self._cond:
                while True:
                    wait = self._should_flush()
                    if wait == 0:
                        break
                    if wait is None and self._stopping:
                        ready = self._take_ready(self._flushed)
                        break
                    self._cond.wait(wait)
            if wait is None:
                self._run_callbacks(ready, True)
                return
            self._flush_once()

    def _flush_once(self) -> None:
        with self._cond:
            target = self._written
            segments = list(self._dirty.values())
            self._dirty.clear()
            sync_dir, self._dir_dirty = self._dir_dirty, False
        ok = True
        try:
            for seg in segments:
                os.fsync(seg.fd)
            if sync_dir:
                fsync_dir(self.directory)
        except OSError:
            log.exception("commit log: fsync failed")
            ok = False
        with self._cond:
            if ok:
                self._flushed = max(self._flushed, target)
            self._last_flush = time.monotonic()
            ready = self._take_ready(target)
        self._run_callbacks(ready, ok)

    def _take_ready(self, limit: int) -> list[DurableCallback]:
        ready = [cb for end, cb in self._waiters if end <= limit]
        self._waiters = [(end, cb) for end, cb in self._waiters if end > limit]
        return ready

    @staticmethod
    def _run_callbacks(ready: list[DurableCallback], ok: bool) -> None:
        for cb in ready:
            try:
                cb(ok)
            except Exception:  # a callback must not stop the flusher
                log.exception("commit log: durability callback failed")
