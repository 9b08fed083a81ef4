"""Body compression by sysFlag: zlib (4.x: bit 0 alone; 5.x: type 3), LZ4 frames and zstd
frames (5.x types 1 and 2) inflate to what was sent; an unknown type or a damaged body is a
RemoteProtocolError naming it. Bodies the Java producer compressed: tests/javapeer/."""

from __future__ import annotations

import zlib

import lz4.frame
import pytest
import zstandard
from hypothesis import given
from hypothesis import strategies as st

from rocketmq_spark.errors import RemoteProtocolError
from rocketmq_spark.remoting.codes import MessageSysFlag as F
from rocketmq_spark.remoting.compression import DEFLATE, inflate
from rocketmq_spark.remoting.message import MessageExt


def zstd_streamed(data: bytes) -> bytes:
    """As Java's ZstdOutputStream writes it: no content size in the frame header."""
    out = zstandard.ZstdCompressor(level=3, write_content_size=False).compressobj()
    return out.compress(data) + out.flush()


@given(st.binary(max_size=20_000))
def test_every_codec_inflates_what_it_deflated(data: bytes) -> None:
    for name, (bits, deflate, level) in DEFLATE.items():
        assert inflate(F.COMPRESSED | bits, deflate(data, level)) == data, name


@pytest.mark.parametrize("flag, body", [
    (F.COMPRESSED, zlib.compress(b"hello " * 100)),                          # 4.x producer
    (F.COMPRESSED | F.COMPRESSION_ZLIB, zlib.compress(b"hello " * 100)),
    (F.COMPRESSED | F.COMPRESSION_LZ4, lz4.frame.compress(b"hello " * 100)),
    (F.COMPRESSED | F.COMPRESSION_ZSTD, zstd_streamed(b"hello " * 100)),
])
def test_a_stored_message_gives_the_payload_sent(flag: int, body: bytes) -> None:
    m = MessageExt(topic="t", body=body, sys_flag=flag)
    assert m.payload() == b"hello " * 100


def test_an_uncompressed_body_is_returned_as_is_whatever_the_type_bits() -> None:
    assert inflate(F.COMPRESSION_LZ4, b"plain") == b"plain"


def test_an_unknown_type_and_a_damaged_body_name_what_is_wrong() -> None:
    with pytest.raises(RemoteProtocolError, match="unsupported compression type 0x400"):
        inflate(F.COMPRESSED | 0x400, b"x")
    for name in ("zlib", "lz4", "zstd"):
        bits = DEFLATE[name][0]
        with pytest.raises(RemoteProtocolError, match=f"a {name} compressed body does not inflate"):
            inflate(F.COMPRESSED | bits, b"not compressed at all")
