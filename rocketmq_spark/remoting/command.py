"""RemotingCommand and its frame codec, with no I/O.

A frame is ``length(4) | type(1) + header_length(3) | header | body`` (big-endian).
The header is JSON (type 0) or the ROCKETMQ binary layout (type 1); we decode both and
answer in the caller's type. ``FrameDecoder`` is fed bytes and hands out whole commands:
a short buffer yields nothing and consumes nothing; a bad frame raises
``RemoteProtocolError`` and the owner of the connection closes it.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field, replace
from typing import Any, Iterator, Mapping

from rocketmq_spark.errors import LocalProtocolError, NeedMoreData, RemoteProtocolError
from rocketmq_spark.remoting.codes import (
    CLIENT_VERSION, FLAG_ONEWAY, FLAG_RESPONSE, LANGUAGE_CODE, LANGUAGES, SERIALIZE_JSON,
    SERIALIZE_ROCKETMQ)

MAX_FRAME = 16 * 1024 * 1024  # Java's frameMaxLength, length prefix included
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_BIN_FIXED = struct.Struct(">hbhii")  # code, language, version, opaque, flag


def _ext_str(value: Any) -> str:
    """Ext field values arrive as strings, numbers or booleans; Java reads strings."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    if isinstance(value, (int, float)):
        return str(value)
    raise RemoteProtocolError(f"extFields value of type {type(value).__name__}")


@dataclass(frozen=True)
class RemotingCommand:
    code: int
    opaque: int = 0
    flag: int = 0
    ext_fields: Mapping[str, str] | None = None
    remark: str | None = None
    body: bytes = b""
    language: str = "PYTHON"
    version: int = CLIENT_VERSION
    serialize_type: int = SERIALIZE_JSON

    @property
    def is_response(self) -> bool:
        return bool(self.flag & FLAG_RESPONSE)

    @property
    def is_oneway(self) -> bool:
        return bool(self.flag & FLAG_ONEWAY)

    @property
    def ext(self) -> Mapping[str, str]:
        return self.ext_fields or {}

    def with_opaque(self, opaque: int) -> "RemotingCommand":
        return replace(self, opaque=opaque)


def response_to(request: RemotingCommand, code: int, *, remark: str | None = None,
                ext_fields: Mapping[str, str] | None = None, body: bytes = b"",
                version: int, language: str = "JAVA") -> RemotingCommand:
    """An answer to ``request``: same opaque, response flag, the caller's serialization."""
    return RemotingCommand(code=code, opaque=request.opaque, flag=FLAG_RESPONSE,
                           ext_fields=ext_fields, remark=remark, body=body,
                           language=language, version=version,
                           serialize_type=request.serialize_type)


# ---------------------------------------------------------------- header encoding

# One encoder for every header: json.dumps with options builds a new one per call.
_JSON_ENCODE = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


def _encode_json_header(cmd: RemotingCommand) -> bytes:
    obj: dict[str, Any] = {"code": cmd.code}
    if cmd.ext_fields is not None:
        obj["extFields"] = {k: v if type(v) is str else _ext_str(v) for k, v in cmd.ext_fields.items()}
    obj["flag"] = cmd.flag
    obj["language"] = cmd.language
    obj["opaque"] = cmd.opaque
    if cmd.remark is not None:
        obj["remark"] = cmd.remark
    obj["serializeTypeCurrentRPC"] = "JSON"
    obj["version"] = cmd.version
    return _JSON_ENCODE(obj).encode("utf-8")


def _encode_rocketmq_header(cmd: RemotingCommand) -> bytes:
    if not -32768 <= cmd.code <= 32767:
        raise LocalProtocolError(f"code {cmd.code} does not fit the ROCKETMQ header")
    parts = [_BIN_FIXED.pack(cmd.code, LANGUAGE_CODE.get(cmd.language, 7), cmd.version,
                             cmd.opaque, cmd.flag)]
    remark = (cmd.remark or "").encode("utf-8")
    parts += [_I32.pack(len(remark)), remark]
    ext = bytearray()
    for k, v in (cmd.ext_fields or {}).items():
        kb, vb = k.encode("utf-8"), _ext_str(v).encode("utf-8")
        if kb and vb:
            ext += struct.pack(">h", len(kb)) + kb + _I32.pack(len(vb)) + vb
    parts += [_I32.pack(len(ext)), bytes(ext)]
    return b"".join(parts)


_HEADER_ENCODERS = {SERIALIZE_JSON: _encode_json_header, SERIALIZE_ROCKETMQ: _encode_rocketmq_header}


def encode(cmd: RemotingCommand) -> bytes:
    """The whole frame, length prefix included."""
    encoder = _HEADER_ENCODERS.get(cmd.serialize_type)
    if encoder is None:
        raise LocalProtocolError(f"unknown serialization type {cmd.serialize_type}")
    header = encoder(cmd)
    total = 4 + len(header) + len(cmd.body)
    if total + 4 > MAX_FRAME:
        raise LocalProtocolError(f"frame of {total + 4} bytes exceeds {MAX_FRAME}")
    return b"".join((_I32.pack(total), _U32.pack((cmd.serialize_type << 24) | len(header)),
                     header, cmd.body))


# ---------------------------------------------------------------- header decoding

def _int_field(obj: Mapping[str, Any], key: str, default: int | None = None) -> int:
    value = obj.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, str) and value.lstrip("-").isdigit():
            return int(value)
        raise RemoteProtocolError(f"header field {key!r} is {value!r}, not an integer")
    return value


def _decode_json_header(data: bytes, body: bytes) -> RemotingCommand:
    try:
        obj = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise RemoteProtocolError(f"header is not JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise RemoteProtocolError("header is not a JSON object")
    ext = obj.get("extFields")
    if ext is not None:
        if not isinstance(ext, dict):
            raise RemoteProtocolError("extFields is not an object")
        ext = {str(k): v if type(v) is str else _ext_str(v) for k, v in ext.items() if v is not None}
    language = obj.get("language", "JAVA")
    if isinstance(language, int) and 0 <= language < len(LANGUAGES):
        language = LANGUAGES[language]
    remark = obj.get("remark")
    return RemotingCommand(
        code=_int_field(obj, "code"), opaque=_int_field(obj, "opaque", 0),
        flag=_int_field(obj, "flag", 0), ext_fields=ext,
        remark=remark if isinstance(remark, str) else None, body=body,
        language=str(language), version=_int_field(obj, "version", 0),
        serialize_type=SERIALIZE_JSON)


def _take(data: bytes, pos: int, n: int) -> tuple[bytes, int]:
    if n < 0 or pos + n > len(data):
        raise RemoteProtocolError("ROCKETMQ header is truncated")
    return data[pos:pos + n], pos + n


def _decode_rocketmq_header(data: bytes, body: bytes) -> RemotingCommand:
    raw, pos = _take(data, 0, _BIN_FIXED.size)
    code, lang, version, opaque, flag = _BIN_FIXED.unpack(raw)
    raw, pos = _take(data, pos, 4)
    remark_b, pos = _take(data, pos, _I32.unpack(raw)[0])
    raw, pos = _take(data, pos, 4)
    ext_b, pos = _take(data, pos, _I32.unpack(raw)[0])
    ext: dict[str, str] = {}
    i = 0
    try:
        while i < len(ext_b):
            (klen,) = struct.unpack_from(">h", ext_b, i)
            key, i = _take(ext_b, i + 2, klen)
            (vlen,) = struct.unpack_from(">i", ext_b, i)
            value, i = _take(ext_b, i + 4, vlen)
            ext[key.decode("utf-8")] = value.decode("utf-8")
    except (struct.error, UnicodeDecodeError) as exc:
        raise RemoteProtocolError(f"bad ROCKETMQ extFields: {exc}") from None
    try:
        remark = remark_b.decode("utf-8") or None
    except UnicodeDecodeError:
        raise RemoteProtocolError("remark is not UTF-8") from None
    return RemotingCommand(
        code=code, opaque=opaque, flag=flag, ext_fields=ext, remark=remark, body=body,
        language=LANGUAGES[lang] if 0 <= lang < len(LANGUAGES) else "OTHER",
        version=version, serialize_type=SERIALIZE_ROCKETMQ)


_HEADER_DECODERS = {SERIALIZE_JSON: _decode_json_header, SERIALIZE_ROCKETMQ: _decode_rocketmq_header}


def decode_frame(frame: bytes | bytearray) -> RemotingCommand:
    """Decode one whole frame given *without* its 4-byte length prefix."""
    if len(frame) < 4:
        raise RemoteProtocolError(f"frame of {len(frame)} bytes has no header length")
    (word,) = _U32.unpack_from(frame, 0)
    stype, hlen = word >> 24, word & 0xFFFFFF
    if hlen > len(frame) - 4:
        raise RemoteProtocolError(f"header length {hlen} exceeds frame length {len(frame)}")
    decoder = _HEADER_DECODERS.get(stype)
    if decoder is None:
        raise RemoteProtocolError(f"unknown serialization type {stype}")
    return decoder(frame[4:4 + hlen], bytes(frame[4 + hlen:]))


def _frame_length(data: bytes | bytearray) -> int | None:
    """The length of the frame ``data`` starts with (its prefix excluded); None while the
    frame is incomplete."""
    if len(data) < 4:
        return None
    (length,) = _I32.unpack_from(data, 0)
    if length < 4 or length + 4 > MAX_FRAME:
        raise RemoteProtocolError(f"frame length {length} outside 4..{MAX_FRAME - 4}{_looks_like(data[:4])}")
    return length if len(data) >= 4 + length else None


def _looks_like(prefix: bytes | bytearray) -> str:
    """A hint when a frame's length is text: the peer speaks another protocol (an HTTP
    proxy or server answers 'HTTP/1.1 ...')."""
    text = bytes(prefix)
    if all(32 <= b < 127 for b in text):
        return f" (it starts with the text {text.decode()!r}: is this a RocketMQ NameServer or broker port?)"
    return ""


def decode(data: bytes) -> tuple[RemotingCommand, int]:
    """Decode the first frame of ``data``; return it and the bytes it used.

    Raises ``NeedMoreData`` (consuming nothing) when the frame is incomplete."""
    length = _frame_length(data)
    if length is None:
        raise NeedMoreData("frame incomplete")
    return decode_frame(bytes(data[4:4 + length])), 4 + length


@dataclass
class FrameDecoder:
    """Incremental decoder for one connection: ``feed`` bytes, iterate commands."""

    _buffer: bytearray = field(default_factory=bytearray)

    def feed(self, data: bytes) -> None:
        self._buffer += data

    def __iter__(self) -> Iterator[RemotingCommand]:
        """The whole frames fed so far, in order. A frame leaves the buffer once decoded; a
        short buffer ends the iteration (no exception per read: a broker decodes a read of
        pipelined pulls this way) and keeps what it has; a bad frame raises
        ``RemoteProtocolError`` and stays."""
        buf = self._buffer
        while (length := _frame_length(buf)) is not None:
            cmd = decode_frame(buf[4:4 + length])
            del buf[:4 + length]
            yield cmd

    def frames(self) -> Iterator[bytes]:
        """The whole frames fed so far, undecoded (length prefix excluded), in order, for
        a reader that answers some frames without decoding them (``decode_frame`` the
        rest). A frame leaves the buffer as it is handed out; a bad length raises
        ``RemoteProtocolError`` and stays."""
        buf = self._buffer
        while (length := _frame_length(buf)) is not None:
            frame = bytes(buf[4:4 + length])
            del buf[:4 + length]
            yield frame

    @property
    def pending(self) -> int:
        return len(self._buffer)
