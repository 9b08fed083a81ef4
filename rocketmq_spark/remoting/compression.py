"""Message body compression, as RocketMQ's producers write it (no I/O).

A compressed body has sysFlag bit 0 (COMPRESSED) set, and from 5.x the codec in bits 8-10
(``MessageSysFlag.COMPRESSION_TYPE_MASK``): LZ4 1, ZSTD 2, ZLIB 3. A 4.x producer sets only
bit 0, which means zlib. RocketMQ 5.x's Java producer writes LZ4 as an LZ4 *frame*
(``LZ4FrameOutputStream``), ZSTD as a zstd frame (``ZstdOutputStream``, no content size in
the header) and ZLIB as a zlib stream (``DeflaterOutputStream``). The LZ4 and ZSTD codecs
come from the ``lz4`` and ``zstandard`` packages, imported on first use.
"""

from __future__ import annotations

import threading
import zlib
from dataclasses import dataclass
from typing import Callable

from rocketmq_spark.errors import RemoteProtocolError
from rocketmq_spark.remoting.codes import MessageSysFlag


def _lz4_inflate(data: bytes) -> bytes:
    import lz4.frame

    return lz4.frame.decompress(data)


_local = threading.local()   # a decompressor is not for two threads at once


def _zstd_inflate(data: bytes) -> bytes:
    # one ZstdDecompressor per thread: making one costs more than inflating an 8 KiB body.
    # A frame without its content size (Java's) is read as a stream.
    dctx = getattr(_local, "zstd", None)
    if dctx is None:
        import zstandard

        dctx = _local.zstd = zstandard.ZstdDecompressor()
    out = dctx.decompressobj()
    return out.decompress(data) + out.flush()


def _lz4_deflate(data: bytes, level: int) -> bytes:
    import lz4.frame

    return lz4.frame.compress(data, compression_level=level)


def _zstd_deflate(data: bytes, level: int) -> bytes:
    import zstandard

    return zstandard.ZstdCompressor(level=level).compress(data)


# compression type bits -> (name, inflate)
INFLATE: dict[int, tuple[str, Callable[[bytes], bytes]]] = {
    0: ("zlib", zlib.decompress),                       # a 4.x producer: bit 0 only
    MessageSysFlag.COMPRESSION_ZLIB: ("zlib", zlib.decompress),
    MessageSysFlag.COMPRESSION_LZ4: ("lz4", _lz4_inflate),
    MessageSysFlag.COMPRESSION_ZSTD: ("zstd", _zstd_inflate),
}

# name -> (compression type bits, deflate(data, level), Java's default level)
DEFLATE: dict[str, tuple[int, Callable[[bytes, int], bytes], int]] = {
    "zlib": (MessageSysFlag.COMPRESSION_ZLIB, zlib.compress, 5),
    "lz4": (MessageSysFlag.COMPRESSION_LZ4, _lz4_deflate, 0),
    "zstd": (MessageSysFlag.COMPRESSION_ZSTD, _zstd_deflate, 3),
}


def inflate(sys_flag: int, body: bytes) -> bytes:
    """The body as the application sent it, from a stored body and its sysFlag."""
    if not sys_flag & MessageSysFlag.COMPRESSED:
        return body
    kind = sys_flag & MessageSysFlag.COMPRESSION_TYPE_MASK
    entry = INFLATE.get(kind)
    if entry is None:
        raise RemoteProtocolError(f"unsupported compression type 0x{kind:x} (sysFlag 0x{sys_flag:x})")
    name, fn = entry
    try:
        return fn(body)
    except Exception as exc:  # noqa: BLE001 - each codec has its own error types
        raise RemoteProtocolError(f"a {name} compressed body does not inflate: {exc}") from None


CODECS: tuple[str, ...] = ("zlib", "lz4", "zstd", "none")
COMPRESS_OVER_BYTES = 4 * 1024   # Java's compressMsgBodyOverHowmuch
NEEDS_5X = frozenset({"lz4", "zstd"})   # 4.x consumers inflate every compressed body as zlib


@dataclass(frozen=True)
class Compression:
    """How a producer compresses what it sends: bodies of ``over_bytes`` or more with
    ``codec`` (``none``: never), as the Java producer's ``compressType`` and
    ``compressMsgBodyOverHowmuch`` (defaults zlib and 4096). zlib sets sysFlag bit 0 only,
    as 4.x producers and the C++ client do, which every consumer reads; lz4 and zstd add
    their 5.x type bits, which consumers before 5.0 cannot read (``needs_5x``)."""

    codec: str = "zlib"
    over_bytes: int = COMPRESS_OVER_BYTES

    def __post_init__(self) -> None:
        if self.codec not in CODECS:
            raise ValueError(f"compression {self.codec!r} is not one of {', '.join(CODECS)}")
        if self.over_bytes < 0:
            raise ValueError(f"compression threshold must be >= 0 bytes, got {self.over_bytes}")

    @property
    def needs_5x(self) -> bool:
        return self.codec in NEEDS_5X

    def applies(self, size: int) -> bool:
        """Whether a body of ``size`` bytes goes compressed."""
        return self.codec != "none" and size >= self.over_bytes

    @property
    def sys_flag(self) -> int:
        """The sysFlag bits of a body this compresses."""
        if self.codec == "zlib":
            return MessageSysFlag.COMPRESSED
        return MessageSysFlag.COMPRESSED | DEFLATE[self.codec][0]

    def deflate(self, body: bytes) -> bytes:
        _, fn, level = DEFLATE[self.codec]
        return fn(body, level)


DEFAULT_COMPRESSION = Compression()
NO_COMPRESSION = Compression("none")
