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
from rocketmq_spark.remoting.compression import DEFAULT_COMPRESSION, DEFLATE, Compression, inflate
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


def test_a_compression_applies_at_its_threshold_with_its_flag() -> None:
    assert DEFAULT_COMPRESSION == Compression("zlib", 4096)
    assert not DEFAULT_COMPRESSION.applies(4095) and DEFAULT_COMPRESSION.applies(4096)
    assert not Compression("none", 0).applies(1 << 20)
    assert Compression("zlib", 0).applies(0)
    assert DEFAULT_COMPRESSION.sys_flag == F.COMPRESSED            # as 4.x producers: every consumer reads it
    assert Compression("lz4").sys_flag == F.COMPRESSED | F.COMPRESSION_LZ4
    assert Compression("zstd").sys_flag == F.COMPRESSED | F.COMPRESSION_ZSTD
    assert [c for c in ("zlib", "lz4", "zstd", "none") if Compression(c).needs_5x] == ["lz4", "zstd"]
    for codec in ("zlib", "lz4", "zstd"):
        c = Compression(codec)
        assert inflate(c.sys_flag, c.deflate(b"abc" * 5000)) == b"abc" * 5000
    with pytest.raises(ValueError, match="'gzip' is not one of zlib, lz4, zstd, none"):
        Compression("gzip")
    with pytest.raises(ValueError, match=">= 0 bytes"):
        Compression("zlib", -1)


def test_a_batch_is_compressed_whole_or_not_at_all() -> None:
    from rocketmq_spark.client.producer import batch_request
    from rocketmq_spark.remoting.message import decode_batch
    from rocketmq_spark.structs import Message

    def sent(bodies: list[bytes], compression: Compression) -> tuple[int, list[bytes]]:
        cmd = batch_request([Message("T", b) for b in bodies], queue_id=0, producer_group="g",
                            uniq_keys=[str(i) for i in range(len(bodies))], born_timestamp=1,
                            compression=compression)
        flag = int(cmd.ext["f"])
        return flag, [inflate(flag, item.body) for item in decode_batch(cmd.body)]

    big, small = b"x" * 5000, b"y"
    flag, bodies = sent([big, big], Compression("zstd"))
    assert flag == F.COMPRESSED | F.COMPRESSION_ZSTD and bodies == [big, big]
    flag, bodies = sent([big, small], Compression("zstd"))
    assert flag == 0 and bodies == [big, small]
