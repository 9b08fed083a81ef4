"""Message body compression, as RocketMQ's producers write it (no I/O).

A compressed body has sysFlag bit 0 (COMPRESSED) set, and from 5.x the codec in bits 8-10
(``MessageSysFlag.COMPRESSION_TYPE_MASK``): LZ4 1, ZSTD 2, ZLIB 3. A 4.x producer sets only
bit 0, which means zlib. RocketMQ 5.x's Java producer writes LZ4 as an LZ4 *frame*
(``LZ4FrameOutputStream``), ZSTD as a zstd frame (``ZstdOutputStream``, no content size in
the header) and ZLIB as a zlib stream (``DeflaterOutputStream``). The LZ4 and ZSTD codecs
come from the ``lz4`` and ``zstandard`` packages, imported on first use.
"""

from __future__ import annotations

import zlib
from typing import Callable

from rocketmq_spark.errors import RemoteProtocolError
from rocketmq_spark.remoting.codes import MessageSysFlag


def _lz4_inflate(data: bytes) -> bytes:
    import lz4.frame

    return lz4.frame.decompress(data)


def _zstd_inflate(data: bytes) -> bytes:
    import zstandard

    out = zstandard.ZstdDecompressor().decompressobj()
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
