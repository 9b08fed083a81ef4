"""Pull bodies straight into Arrow columns, without a Python object per message.

A pull body is a run of stored records (``remoting/message.py`` has the layout). Only the
walk from one record to the next is a Python loop (one ``unpack_from`` per record); every
fixed field is then gathered for all records at once with numpy; bodies, topics and
properties are cut out of the received bytes as Arrow view arrays (numpy writes the views,
Arrow's C++ copies the bytes), and the property map is split with numpy over all texts at
once. The result is the same ``SOURCE_SCHEMA`` batch ``arrow.messages_to_batch`` builds
from decoded messages (``tests/sidecar/test_columnar.py`` checks that with hypothesis).

The fast path covers the records every current broker stores for clients: magic V1, IPv4
hosts, uncompressed bodies, well-formed properties with distinct names. A body with anything
else (an IPv6 host, a compressed body, a topic longer than 127 bytes, odd properties, a
damaged record) goes through the per-message decoder instead, which also gives damaged data
its precise error. The compiled decoder (``_fastcolumnar.c``) also takes compressed bodies:
it inflates each with the codec the per-message decoder uses (``compression.INFLATE``,
handed to it at import) and decodes the rest of the record itself; a body its codec does not
inflate goes the per-message way, which names the codec's error.

For the shared-memory files (``shm``), ``BodyBatcher(encoded=True)`` goes one step further
where it can: the compiled decoder keeps the window's rows and writes them as a finished
Arrow IPC message (``Encoded``, ``encode_parts``), so no pyarrow object is made in the
sidecar for a batch and the file is written in one call. A tag filter, restoring retry
topics, text that is not UTF-8 (refused there with its error) and anything the decoder
declines go the pyarrow way above. The message's metadata is pyarrow's own for this schema
(``message_layout``), with the numbers of each batch written in.

Which rows are kept (``Window``): queue offsets in ``[start, end)``, each offset once and
increasing (a broker answering a pull with messages before the asked offset cannot
duplicate rows), and, for a tag subscription, exactly the subscribed tags (the broker
filters by tag hash only).
"""

from __future__ import annotations

import logging
import os
import struct
from dataclasses import dataclass, field
from typing import Iterable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rocketmq_spark.errors import RemoteProtocolError
from rocketmq_spark.remoting.codes import MessageSysFlag, retry_topic
from rocketmq_spark.remoting.compression import INFLATE
from rocketmq_spark.remoting.message import (
    MAGIC_V1, NAME_VALUE_SEP, PROP_KEYS, PROP_RETRY_TOPIC, PROP_TAGS, PROP_UNIQ_KEY, PROPERTY_SEP,
    decode_messages)
from rocketmq_spark.sidecar.arrow import SOURCE_SCHEMA, TIMESTAMP, messages_to_batch
from rocketmq_spark.structs import WalkedBodies

try:     # the compiled decoder (_fastcolumnar.c), built by pip install; numpy's is the reference
    from rocketmq_spark.sidecar import _fastcolumnar as _compiled
except ImportError:  # pragma: no cover - a build without a C compiler
    _compiled = None
if os.environ.get("ROCKETMQ_SPARK_PURE_PYTHON") == "1":
    _compiled = None

log = logging.getLogger(__name__)

_SIZE = struct.Struct(">i")
_SLOW_FLAGS = MessageSysFlag.BORNHOST_V6 | MessageSysFlag.STOREHOST_V6 | MessageSysFlag.COMPRESSED
_PROPERTIES = SOURCE_SCHEMA.field("properties").type

# Byte positions inside a record with IPv4 hosts (magic V1).
_MAGIC, _QUEUE_ID, _QUEUE_OFFSET, _PHYS, _SYS_FLAG = 4, 12, 20, 28, 36
_BORN_TS, _BORN_HOST, _STORE_TS, _STORE_HOST, _RECONSUME, _BODY_LEN, _BODY = 40, 48, 56, 64, 72, 84, 88
_MIN_RECORD = _BODY + 1 + 2          # empty body, empty topic, empty properties

_INLINE = np.arange(12)
_PROPERTY_SEP, _NAME_VALUE_SEP = ord(PROPERTY_SEP), ord(NAME_VALUE_SEP)


_HEX2 = np.frombuffer(b"".join(f"{i:02X}".encode() for i in range(256)), np.uint8).reshape(256, 2)
_HEX4 = np.concatenate([np.repeat(_HEX2, 256, axis=0), np.tile(_HEX2, (256, 1))], axis=1)  # of a uint16


@dataclass(frozen=True)
class Window:
    """The rows a range keeps: offsets in ``[start, end)``, and ``tags`` when not empty."""

    start: int
    end: int
    tags: frozenset[str] = frozenset()
    broker: str = ""
    restore_retry_topic_of: str | None = None


class _Fallback(Exception):
    """The body needs the per-message decoder."""


# ------------------------------------------------------------------ record walk

def record_starts(data: bytes | bytearray | memoryview, base: int = 0,
                  into: list[int] | None = None) -> list[int]:
    """Start positions (plus ``base``) of the records of a pull body, appended to ``into``
    when given; raises on a size that does not fit."""
    if _compiled is not None:
        try:
            found = _compiled.record_starts(data, base)
        except ValueError as exc:
            raise RemoteProtocolError(str(exc)) from None
        if into is None:
            return found
        into.extend(found)
        return into
    return _record_starts(data, base, into)


def count_records(data: bytes) -> int:
    """How many records a pull body holds; raises on a size that does not fit."""
    if _compiled is not None:
        try:
            return _compiled.count_records(data)
        except ValueError as exc:
            raise RemoteProtocolError(str(exc)) from None
    return len(_record_starts(data))


def _record_starts(data: bytes | bytearray | memoryview, base: int = 0,
                   into: list[int] | None = None) -> list[int]:
    starts: list[int] = [] if into is None else into
    append = starts.append
    pos, n, unpack = 0, len(data), _SIZE.unpack_from
    while pos < n:
        if pos + 4 > n:
            raise RemoteProtocolError("stored message truncated in its header")
        (size,) = unpack(data, pos)
        if size < 4 or pos + size > n:
            raise RemoteProtocolError(f"stored message size {size} does not fit the data")
        append(base + pos)
        pos += size
    return starts


# ------------------------------------------------------------------ numpy gathers

def _be(buf: np.ndarray, at: np.ndarray, dtype: str) -> np.ndarray:
    """Big-endian integers of ``dtype`` ('>i4', '>i8', '>u8', '>i2', 'i1') at ``at``."""
    width = np.dtype(dtype).itemsize
    raw = buf[at[:, None] + np.arange(width)] if width > 1 else buf[at][:, None]
    return raw.view(dtype).ravel().astype(np.dtype(dtype).newbyteorder("="))


@dataclass(frozen=True)
class _Bytes:
    """One buffer to cut ranges out of: as Arrow, as numpy, and as numpy rows of the bytes
    that follow each position (views of one zero-padded copy, nothing gathered yet)."""

    data: pa.Buffer
    buf: np.ndarray
    ahead: np.ndarray                     # ahead[i] == the 12 bytes from i (zero-padded)
    head: np.ndarray                      # head[i] == the _BODY bytes from i (zero-padded)

    @classmethod
    def of(cls, data: pa.Buffer) -> "_Bytes":
        buf = np.frombuffer(data, np.uint8)
        padded = np.concatenate([buf, np.zeros(_BODY, np.uint8)])
        window = np.lib.stride_tricks.sliding_window_view
        return cls(data, buf, window(padded, 12), window(padded, _BODY))


def _views(src: _Bytes, starts: np.ndarray, lengths: np.ndarray, kind: pa.DataType) -> pa.Array:
    """The byte ranges ``[starts, starts+lengths)`` of ``src`` as a binary or string array:
    an Arrow view array over the buffer (16 bytes a row, written with numpy; up to 12
    bytes kept inline), cast to the contiguous type in Arrow's C++ (a numpy gather of
    every byte costs about 25 times as much)."""
    n = len(starts)
    if int(lengths.sum()) >= 2**31 or len(src.buf) >= 2**31:
        raise _Fallback()                  # int32 offsets (views' and the result's)
    raw = np.empty((n, 16), np.uint8)
    raw[:, 4:] = src.ahead[starts] * (_INLINE < lengths[:, None])
    words = raw.view(np.int32)             # length, prefix (or inline bytes), buffer, offset
    words[:, 0] = lengths
    long = lengths > 12
    words[:, 2] = np.where(long, 0, words[:, 2])
    words[:, 3] = np.where(long, starts, words[:, 3])
    view = pa.binary_view() if kind == pa.binary() else pa.string_view()
    return pa.Array.from_buffers(view, n, [None, pa.py_buffer(raw), src.data]).cast(kind)


def _strings(src: _Bytes, starts: np.ndarray, lengths: np.ndarray) -> pa.Array:
    arr = _views(src, starts, lengths, pa.string())
    try:
        arr.validate(full=True)             # UTF-8
    except pa.ArrowInvalid:
        raise _Fallback() from None
    return arr


def _host_strings(packed: np.ndarray) -> pa.Array:
    """'a.b.c.d:port' for ip+port packed big-endian in a uint64 (hosts repeat: format each once)."""
    uniques, inverse = np.unique(packed, return_inverse=True)
    text = [f"{u >> 56}.{(u >> 48) & 255}.{(u >> 40) & 255}.{(u >> 32) & 255}:{_signed32(u & 0xFFFFFFFF)}"
            for u in (int(x) for x in uniques)]
    return pa.array(text, pa.string()).take(pa.array(inverse.astype(np.int32).ravel()))


def _signed32(v: int) -> int:
    return v - (1 << 32) if v >= 1 << 31 else v


def _field(head: np.ndarray, at: int, dtype: str) -> np.ndarray:
    """The big-endian integers of ``dtype`` at byte ``at`` of each record's fixed part."""
    width = np.dtype(dtype).itemsize
    return np.ascontiguousarray(head[:, at:at + width]).view(dtype).ravel().astype(
        np.dtype(dtype).newbyteorder("="))


def _offset_msg_ids(head: np.ndarray) -> pa.Array:
    """Hex of store host (8 bytes) + commit log offset (8 bytes), upper case, 32 chars each."""
    n = len(head)
    raw = np.concatenate([head[:, _STORE_HOST:_STORE_HOST + 8], head[:, _PHYS:_PHYS + 8]], axis=1)
    text = _HEX4[raw.view(">u2")].reshape(n, 32)
    offsets = np.arange(0, 32 * n + 1, 32, dtype=np.int32)
    return pa.StringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(np.ascontiguousarray(text)))


# ------------------------------------------------------------------ properties

def _property_map(text: pa.Array) -> pa.MapArray:
    """'k\\x01v\\x02k\\x01v' strings -> map<string, string>, keeping what
    ``decode_properties`` keeps: the pieces between PROPERTY_SEPs that have a NAME_VALUE_SEP
    with a name before it and a value after it (the value may hold more NAME_VALUE_SEPs)."""
    n = len(text)
    offsets = np.frombuffer(text.buffers()[1], np.int32, n + 1, text.offset * 4).astype(np.int64)
    src = _Bytes.of(text.buffers()[2] or pa.py_buffer(b""))
    buf = src.buf
    seps = np.flatnonzero(buf == _PROPERTY_SEP)
    # Pieces run from a text's start or a PROPERTY_SEP to the next PROPERTY_SEP or the
    # text's end. They do not overlap, so the sorted starts and the sorted ends pair up.
    lo = np.sort(np.concatenate([offsets[:-1], seps + 1]))
    hi = np.sort(np.concatenate([seps, offsets[1:]]))
    marks = np.flatnonzero(buf == _NAME_VALUE_SEP)
    k = np.searchsorted(marks, lo)
    mark = marks[np.minimum(k, len(marks) - 1)] if len(marks) else np.zeros(len(lo), np.int64)
    ok = (k < len(marks)) & (mark > lo) & (mark + 1 < hi)
    lo, hi, mark = lo[ok], hi[ok], mark[ok]
    parent = np.searchsorted(offsets, lo, side="right") - 1
    names = _views(src, lo, mark - lo, pa.string())
    values = _views(src, mark + 1, hi - mark - 1, pa.string())
    if len(names) and _has_duplicate_names(names, parent, n):
        raise _Fallback()                   # a dict keeps the last value of a name
    map_offsets = np.zeros(n + 1, np.int32)
    np.cumsum(np.bincount(parent, minlength=n), out=map_offsets[1:])
    return pa.MapArray.from_arrays(pa.array(map_offsets), names, values, type=_PROPERTIES)


def _has_duplicate_names(names: pa.Array, parent: np.ndarray, n: int) -> bool:
    """Whether some message repeats a property name (never from RocketMQ's clients)."""
    codes = np.asarray(pc.dictionary_encode(names).indices).astype(np.int64)
    kinds = int(codes.max()) + 1
    pair = parent.astype(np.int64) * kinds + codes
    if n * kinds <= 1 << 24:
        return bool(np.bincount(pair).max() > 1)
    return len(np.unique(pair)) != len(pair)


# ------------------------------------------------------------------ decode

def _var(kind: pa.DataType, rows: int, parts: tuple[bytes, bytes, bytes | None]) -> pa.Array:
    offsets, data, valid = parts
    validity = None
    if valid is not None:
        validity = pa.py_buffer(np.packbits(np.frombuffer(valid, np.uint8), bitorder="little"))
    return pa.Array.from_buffers(kind, rows, [validity, pa.py_buffer(offsets), pa.py_buffer(data)],
                                 null_count=-1 if valid is not None else 0)


def _repeated(text: str, rows: int) -> pa.Array:
    """A string column of ``rows`` times ``text`` (the broker's name), built from its two
    buffers: a compute ``take`` of one value cost 25 ns a row."""
    raw = text.encode()
    offsets = np.arange(rows + 1, dtype=np.int32) * np.int32(len(raw))
    return pa.Array.from_buffers(pa.string(), rows, [None, pa.py_buffer(offsets), pa.py_buffer(raw * rows)],
                                 null_count=0)


# ``pa.array`` and ``pa.scalar`` of anything import pandas to look for its types: 0.3 s of
# CPU and tens of MB the sidecar needs nowhere. What this module builds at import (these
# keys, the encoder's template) it builds from buffers instead (``_repeated``, ``_var``).
# Built once: building a MapLookupOptions costs about 50 us.
_LOOKUP = {name: pc.MapLookupOptions(_repeated(name, 1)[0], "first")
           for name in (PROP_TAGS, PROP_KEYS, PROP_UNIQ_KEY, PROP_RETRY_TOPIC)}


def _checked(arr: pa.Array) -> pa.Array:
    """``arr`` (a string array the decoder built) once its text is known to be UTF-8: plain
    ASCII, the usual case, is checked with one vectorised pass; anything else by Arrow."""
    text = arr.buffers()[2]
    if text is None or np.frombuffer(text, np.uint8).max(initial=0) < 0x80:
        return arr
    try:
        arr.validate(full=True)             # UTF-8
    except pa.ArrowInvalid:
        raise _Fallback() from None
    return arr


def _decode_compiled(data: bytes, starts_list: list[int],
                     window: Window) -> tuple[pa.RecordBatch, np.ndarray, pa.Array]:
    """``_decode_fast`` done by _fastcolumnar.c in one pass: the same batch."""
    assert _compiled is not None
    return _compiled_batch(_compiled.decode(data, starts_list), window)


def _compiled_batch(out: tuple | None, window: Window) -> tuple[pa.RecordBatch, np.ndarray, pa.Array]:
    """The batch of what _fastcolumnar's decode returned (None: ``_Fallback``)."""
    if out is None:
        raise _Fallback()
    n, entries, (qid, qoff, born, store, recon, map_off), cols = out
    topic, body, msg_id, off_id, tags, keys, born_host, store_host, names, values = cols
    string = pa.string()
    properties = pa.MapArray.from_arrays(
        pa.Array.from_buffers(pa.int32(), n + 1, [None, pa.py_buffer(map_off)]),
        _checked(_var(string, entries, names)), _checked(_var(string, entries, values)), type=_PROPERTIES)
    offsets = np.frombuffer(qoff, np.int64)
    topics = _checked(_var(string, n, topic))
    if window.restore_retry_topic_of:
        original = pc.map_lookup(properties, options=_LOOKUP[PROP_RETRY_TOPIC])
        is_retry = pc.and_(pc.equal(topics, retry_topic(window.restore_retry_topic_of)), pc.is_valid(original))
        topics = pc.if_else(is_retry, original, topics)
    tag_col = _var(string, n, tags)
    columns = [
        topics,
        _repeated(window.broker, n),
        pa.Array.from_buffers(pa.int32(), n, [None, pa.py_buffer(qid)]),
        pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(qoff)]),
        _var(string, n, msg_id),
        _var(string, n, off_id),
        tag_col,
        _var(string, n, keys),
        _var(pa.binary(), n, body),
        properties,
        pa.Array.from_buffers(TIMESTAMP, n, [None, pa.py_buffer(born)]),
        pa.Array.from_buffers(TIMESTAMP, n, [None, pa.py_buffer(store)]),
        _var(string, n, born_host),
        _var(string, n, store_host),
        pa.Array.from_buffers(pa.int32(), n, [None, pa.py_buffer(recon)]),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=SOURCE_SCHEMA), offsets, tag_col


def _decode_fast(data: bytes, starts_list: list[int],
                 window: Window) -> tuple[pa.RecordBatch, np.ndarray, pa.Array]:
    """(every record as a row, their queue offsets, their tags); raises ``_Fallback`` where
    the fast path does not apply."""
    whole = _Bytes.of(pa.py_buffer(data))
    buf = whole.buf
    starts = np.asarray(starts_list, np.int64)
    head = whole.head[starts]                 # each record's fixed part, one row each
    sizes = _field(head, 0, ">i4").astype(np.int64)
    if (sizes < _MIN_RECORD).any() or (_field(head, _MAGIC, ">i4") != MAGIC_V1).any():
        raise _Fallback()
    if (_field(head, _SYS_FLAG, ">i4") & _SLOW_FLAGS).any():
        raise _Fallback()
    ends = starts + sizes
    body_len = _field(head, _BODY_LEN, ">i4").astype(np.int64)
    body_at = starts + _BODY
    topic_len_at = body_at + body_len
    if (body_len < 0).any() or (topic_len_at + 3 > ends).any():
        raise _Fallback()
    topic_len = _be(buf, topic_len_at, "i1").astype(np.int64)
    props_len_at = topic_len_at + 1 + topic_len
    if (topic_len < 0).any() or (props_len_at + 2 > ends).any():
        raise _Fallback()
    props_len = _be(buf, props_len_at, ">i2").astype(np.int64)
    if (props_len < 0).any() or (props_len_at + 2 + props_len != ends).any():
        raise _Fallback()

    offsets = _field(head, _QUEUE_OFFSET, ">i8")
    properties = _property_map(_strings(whole, props_len_at + 2, props_len))
    topic = _strings(whole, topic_len_at + 1, topic_len)
    if window.restore_retry_topic_of:
        original = pc.map_lookup(properties, options=_LOOKUP[PROP_RETRY_TOPIC])
        is_retry = pc.and_(pc.equal(topic, retry_topic(window.restore_retry_topic_of)), pc.is_valid(original))
        topic = pc.if_else(is_retry, original, topic)
    tags = pc.map_lookup(properties, options=_LOOKUP[PROP_TAGS])
    offset_ids = _offset_msg_ids(head)
    n = len(starts)
    columns = [
        topic,
        _repeated(window.broker, n),
        pa.array(_field(head, _QUEUE_ID, ">i4")),
        pa.array(offsets),
        pc.coalesce(pc.map_lookup(properties, options=_LOOKUP[PROP_UNIQ_KEY]), offset_ids),
        offset_ids,
        tags,
        pc.map_lookup(properties, options=_LOOKUP[PROP_KEYS]),
        _views(whole, body_at, body_len, pa.binary()),
        properties,
        pa.array(_field(head, _BORN_TS, ">i8") * 1000).view(TIMESTAMP),
        pa.array(_field(head, _STORE_TS, ">i8") * 1000).view(TIMESTAMP),
        _host_strings(_field(head, _BORN_HOST, ">u8")),
        _host_strings(_field(head, _STORE_HOST, ">u8")),
        pa.array(_field(head, _RECONSUME, ">i4")),
    ]
    batch = pa.RecordBatch.from_arrays(columns, schema=SOURCE_SCHEMA)
    return batch, offsets, tags


def _keep(offsets: np.ndarray, tags: pa.Array | None, window: Window, last: int) -> np.ndarray:
    """The row mask of ``Window`` given the highest offset delivered before (``last``)."""
    before = np.maximum.accumulate(np.concatenate([[last], offsets[:-1]])) if len(offsets) else offsets
    keep = (offsets >= window.start) & (offsets < window.end) & (offsets > before)
    if window.tags and tags is not None:
        keep &= np.asarray(pc.is_in(tags, value_set=pa.array(sorted(window.tags))).fill_null(False))
    return keep


def decode_body(data: bytes, window: Window, last: int = -1,
                starts: list[int] | None = None) -> tuple[pa.RecordBatch, int]:
    """The kept rows of a pull body (or of several concatenated) and the new ``last``:
    the highest offset delivered so far. ``starts``: the record positions, when known."""
    if starts is None:
        starts = record_starts(data)
    if not starts:
        return _empty(), last
    try:
        if _compiled is not None:
            batch, offsets, tags = _decode_compiled(data, starts, window)
        else:
            batch, offsets, tags = _decode_fast(data, starts, window)
    except _Fallback:
        batch, offsets, tags = _decode_slow(data, window)
    return _kept(batch, offsets, tags, window, last)


def decode_parts(parts: list[bytes | WalkedBodies], window: Window, last: int = -1) -> tuple[pa.RecordBatch, int]:
    """``decode_body`` of the concatenation of ``parts`` (whole pull bodies, or runs of them
    with their record starts); the compiled decoder reads them where they are, without
    joining them first, and does not walk the records of a ``WalkedBodies`` again."""
    if _compiled is None:
        return decode_body(_joined(parts), window, last)
    data = [p.data if isinstance(p, WalkedBodies) else p for p in parts]
    try:
        out = _compiled.decode_parts(data, [p.starts if isinstance(p, WalkedBodies) else None for p in parts])
    except ValueError as exc:
        raise RemoteProtocolError(str(exc)) from None
    if out is not None and out[0] == 0:
        return _empty(), last
    try:
        batch, offsets, tags = _compiled_batch(out, window)
    except _Fallback:
        batch, offsets, tags = _decode_slow(_joined(parts), window)
    return _kept(batch, offsets, tags, window, last)


def _joined(parts: list[bytes | WalkedBodies]) -> bytes:
    """The bodies of ``parts`` one after the other (a run's records without what lies
    between them)."""
    return b"".join(p.joined() if isinstance(p, WalkedBodies) else p for p in parts)


# ------------------------------------------------------------------ Arrow IPC messages

@dataclass(frozen=True)
class Encoded:
    """A record batch of ``SOURCE_SCHEMA`` already encoded as one Arrow IPC message, for a
    writer of IPC streams: the shared-memory files (``shm.write_batches`` takes these and
    batches alike). The message is kept in the pieces the encoder made (``pieces``: the
    metadata, then each buffer padded), which a writer writes one after the other; joined,
    they are what ``pa.RecordBatch.serialize`` returns (``message``)."""

    pieces: tuple[bytes, ...]
    num_rows: int
    schema: pa.Schema = field(default=SOURCE_SCHEMA, repr=False)

    @property
    def message(self) -> bytes:
        return b"".join(self.pieces)

    def serialize(self) -> bytes:
        return self.message


def _flat_table(buf: bytes, at: int) -> tuple[int, ...]:
    """Where a flatbuffer table's fields are (0: absent), from its vtable."""
    vtable = at - struct.unpack_from("<i", buf, at)[0]
    size = struct.unpack_from("<H", buf, vtable)[0]
    return struct.unpack_from(f"<{(size - 4) // 2}H", buf, vtable + 4)


def _flat_ref(buf: bytes, at: int) -> int:
    return at + struct.unpack_from("<I", buf, at)[0]


def message_layout(template: pa.RecordBatch) -> tuple[bytes, int, int, int, int]:
    """The metadata of ``template``'s IPC message (a flatbuffer) and where in it the numbers
    that vary from batch to batch are: RecordBatch.length, Message.bodyLength, and the first
    of the FieldNode and Buffer structs (18 and 46 of them for ``SOURCE_SCHEMA``)."""
    raw = template.serialize().to_pybytes()
    marker, size = struct.unpack_from("<Ii", raw, 0)
    if marker != 0xFFFFFFFF:
        raise ValueError("not an encapsulated IPC message")
    meta = raw[8:8 + size]
    root = _flat_ref(meta, 0)
    fields = _flat_table(meta, root)            # version, header_type, header, bodyLength
    if len(fields) < 4 or not fields[2] or not fields[3]:
        raise ValueError("the message has no header or no body length")
    header = _flat_ref(meta, root + fields[2])
    rb = _flat_table(meta, header)              # length, nodes, buffers
    if len(rb) < 3 or not all(rb[:3]) or any(rb[3:]):
        raise ValueError("the record batch has fields this layout does not fill in")
    nodes, buffers = _flat_ref(meta, header + rb[1]), _flat_ref(meta, header + rb[2])
    counts = struct.unpack_from("<I", meta, nodes)[0], struct.unpack_from("<I", meta, buffers)[0]
    if counts != (18, 46):
        raise ValueError(f"{counts[0]} field nodes and {counts[1]} buffers, not 18 and 46")
    return meta, header + rb[0], root + fields[3], nodes + 4, buffers + 4


def _template() -> pa.RecordBatch:
    """One row of ``SOURCE_SCHEMA`` with a tag, no keys and a property, for ``message_layout``
    (from buffers: see ``_LOOKUP``)."""
    one = np.array([0, 1], np.int32).tobytes()
    msg_id = "7F000001" + "0" * 24
    zero32, zero64 = np.zeros(1, np.int32).tobytes(), np.zeros(1, np.int64).tobytes()

    def fixed(kind: pa.DataType, raw: bytes) -> pa.Array:
        return pa.Array.from_buffers(kind, len(raw) * 8 // kind.bit_width, [None, pa.py_buffer(raw)])

    properties = pa.MapArray.from_arrays(fixed(pa.int32(), one), _repeated(PROP_TAGS, 1), _repeated("x", 1),
                                         type=_PROPERTIES)
    columns = [_repeated("t", 1), _repeated("b", 1), fixed(pa.int32(), zero32), fixed(pa.int64(), zero64),
               _repeated(msg_id, 1), _repeated(msg_id, 1), _repeated("x", 1),
               _var(pa.string(), 1, (np.zeros(2, np.int32).tobytes(), b"", b"\0")),
               _var(pa.binary(), 1, (one, b"b", None)), properties, fixed(TIMESTAMP, zero64),
               fixed(TIMESTAMP, zero64), _repeated("127.0.0.1:0", 1), _repeated("127.0.0.1:0", 1),
               fixed(pa.int32(), zero32)]
    return pa.RecordBatch.from_arrays(columns, schema=SOURCE_SCHEMA)


def _set_layout() -> bool:
    """Hands the compiled encoder its message layout; False where it cannot take it."""
    if _compiled is None or not hasattr(_compiled, "set_layout"):
        return False
    template = _template()
    try:
        _compiled.set_layout(*message_layout(template))
    except (ValueError, struct.error) as exc:   # pragma: no cover - another pyarrow's metadata
        log.warning("Arrow messages are built by pyarrow: %s", exc)
        return False
    return True


_ENCODER = _set_layout()


def _set_inflaters() -> bool:
    """Hands the compiled decoder the codecs of compressed bodies (by sysFlag type bits), the
    per-message decoder's own; False where it predates them (compressed bodies then go the
    per-message way)."""
    if _compiled is None or not hasattr(_compiled, "set_inflaters"):
        return False
    _compiled.set_inflaters({bits: inflate for bits, (_, inflate) in INFLATE.items()})
    return True


_INFLATES = _set_inflaters()


def encode_parts(parts: list[bytes | WalkedBodies], window: Window, last: int,
                 max_rows: int) -> tuple[Encoded | None, int] | None:
    """``decode_parts`` of ``parts`` as one Arrow IPC message built by the compiled encoder
    (no pyarrow objects): (the message, or None when no row is kept; the new ``last``), or
    None where that path does not apply (a tag filter, restoring retry topics, a record
    or text that is not UTF-8 it leaves to pyarrow, more than ``max_rows`` rows); then
    ``decode_parts``."""
    if not _ENCODER or window.tags or window.restore_retry_topic_of:
        return None
    data = [p.data if isinstance(p, WalkedBodies) else p for p in parts]
    starts = [p.starts if isinstance(p, WalkedBodies) else None for p in parts]
    try:
        out = _compiled.encode_parts(data, starts, window.start, window.end, last,
                                     window.broker.encode(), max_rows)
    except ValueError as exc:
        raise RemoteProtocolError(str(exc)) from None
    if out is None:
        return None
    message, rows, last = out
    return (Encoded(message, rows) if rows else None), last


def _decode_slow(data: bytes, window: Window) -> tuple[pa.RecordBatch, np.ndarray, pa.Array]:
    """Message by message: what the fast paths do not cover, and damaged data's errors."""
    messages = decode_messages(data)
    batch = messages_to_batch(messages, broker=window.broker,
                              restore_retry_topic_of=window.restore_retry_topic_of)
    return batch, np.asarray([m.queue_offset for m in messages], np.int64), batch.column("tags")


def _kept(batch: pa.RecordBatch, offsets: np.ndarray, tags: pa.Array, window: Window,
          last: int) -> tuple[pa.RecordBatch, int]:
    keep = _keep(offsets, tags, window, last)
    if keep.any():
        last = max(last, int(offsets[keep].max()))
    if not keep.all():
        batch = batch.filter(pa.array(keep))
    return batch, last


def _empty() -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist([], schema=SOURCE_SCHEMA)


@dataclass
class BodyBatcher:
    """Collects pull bodies and decodes them a batch at a time: the bodies held once the
    next one would take them past ``max_rows`` records, or once ``max_bytes`` of bodies are
    in, so Arrow batches have up to ``max_rows`` rows (a compiled run of pulls is one
    batch) rather than one small batch per pull. The bodies are decoded where they are,
    without a joined copy."""

    window: Window
    max_rows: int
    max_bytes: int = 16 << 20
    # batches as ``Encoded`` IPC messages where the compiled encoder applies (for a writer
    # of IPC streams), else as record batches
    encoded: bool = False
    _parts: list[bytes | WalkedBodies] = field(default_factory=list)  # not decoded yet, in order
    _rows: int = 0                                           # their records
    _size: int = 0                                           # their bytes
    _last: int = -1

    def batches(self, bodies: Iterable[bytes | WalkedBodies]) -> Iterator["pa.RecordBatch | Encoded"]:
        for body in bodies:
            if isinstance(body, WalkedBodies):
                rows, size = body.records, len(body.data)
            else:
                body = body if type(body) is bytes else bytes(body)
                rows, size = count_records(body), len(body)
            if self._parts and self._rows + rows > self.max_rows:
                yield from self._decode()
            self._parts.append(body)
            self._rows += rows
            self._size += size
            if self._rows >= self.max_rows or self._size >= self.max_bytes:
                yield from self._decode()
        yield from self._decode()

    def _decode(self) -> Iterator["pa.RecordBatch | Encoded"]:
        if not self._parts:
            return
        parts, self._parts, self._rows, self._size = self._parts, [], 0, 0
        if self.encoded:
            got = encode_parts(parts, self.window, self._last, self.max_rows)
            if got is not None:
                message, self._last = got
                if message is not None:
                    yield message
                return
        batch, self._last = decode_parts(parts, self.window, self._last)
        for at in range(0, batch.num_rows, self.max_rows):     # one body of more than max_rows
            yield batch.slice(at, self.max_rows)
