"""The columnar decoder (pull bodies -> Arrow) against the per-message decoder, and the
undecoded, pipelined range read that feeds it (pure logic: no sockets)."""

from __future__ import annotations

import array
import threading
import zlib
from dataclasses import replace

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rocketmq_spark.errors import RemoteProtocolError
from rocketmq_spark.remoting.codes import MessageSysFlag, retry_topic
from rocketmq_spark.remoting.compression import Compression
from rocketmq_spark.remoting.message import (
    HostPort, MessageExt, decode_messages, decode_properties, encode_message)
from rocketmq_spark.sidecar import columnar
from rocketmq_spark.sidecar.arrow import messages_to_batch
from rocketmq_spark.sidecar.columnar import BodyBatcher, Window, decode_body
from rocketmq_spark.sidecar.model import PullSpec
from rocketmq_spark.sidecar.pull import PullPolicy, read_range
from rocketmq_spark.sidecar.readahead import readahead
from rocketmq_spark.structs import PullResult, WalkedBodies
from tests.sidecar.fakes import Q, FakeQueue, rows
from tests.vectors import broker_vectors
from tests.waiting import wait_until

GROUP = "g1"
TEXT = st.text(st.characters(min_codepoint=3, max_codepoint=0x2FFF, exclude_categories=("Cs",)), max_size=12)
IPV4 = st.builds("{}.{}.{}.{}".format, *[st.integers(0, 255)] * 4)
HOSTS = st.one_of(st.sampled_from([HostPort("127.0.0.1", 10911), HostPort("10.1.2.3", 65535),
                                   HostPort("192.168.0.7", 1), HostPort("::1", 10911)]),
                  st.builds(HostPort, IPV4, st.integers(0, 65535)))


# how a body is stored: as sent, zlib with bit 0 only (a 4.x producer, the C++ client), or
# with a 5.x producer's type bits
STORED_CODECS = ("none", "zlib-4.x", "zlib", "lz4", "zstd")


def squeezed(body: bytes, codec: str) -> tuple[bytes, int]:
    """(stored body, sysFlag) of ``body`` sent with ``codec`` (one of STORED_CODECS)."""
    if codec == "none":
        return body, 0
    if codec == "zlib-4.x":
        return zlib.compress(body), MessageSysFlag.COMPRESSED
    how = Compression(codec, 0)
    return how.deflate(body), how.sys_flag


@st.composite
def stored(draw, offset: int, v6: bool, compress: bool) -> MessageExt:  # type: ignore[no-untyped-def]
    props = draw(st.dictionaries(TEXT, TEXT, max_size=4))
    for name in ("TAGS", "KEYS", "UNIQ_KEY"):
        if draw(st.booleans()):
            props[name] = draw(st.sampled_from(["TagA", "TagB", "k1 k2", "7F000001ABCD"]))
    topic = draw(st.sampled_from(["orders", "t" * 127, retry_topic(GROUP)]))
    if topic == retry_topic(GROUP) and draw(st.booleans()):
        props["RETRY_TOPIC"] = "orders"
    body = draw(st.binary(max_size=64))
    sys_flag = 0
    if compress:
        body, sys_flag = squeezed(body, draw(st.sampled_from(STORED_CODECS)))
    hosts = HOSTS if v6 else HOSTS.filter(lambda h: not h.is_v6)
    return MessageExt(topic=topic, body=body, queue_id=draw(st.integers(0, 7)), flag=0,
                      queue_offset=offset, commit_log_offset=draw(st.integers(0, 2**40)),
                      sys_flag=sys_flag, born_timestamp=draw(st.integers(0, 2**42)),
                      born_host=draw(hosts), store_timestamp=draw(st.integers(0, 2**42)),
                      store_host=draw(hosts), reconsume_times=draw(st.integers(0, 16)),
                      properties=props)


@st.composite
def bodies(draw, v6: bool = False, compress: bool = False):  # type: ignore[no-untyped-def]
    offsets = sorted(draw(st.lists(st.integers(0, 60), min_size=1, max_size=24, unique=True)))
    return [draw(stored(o, v6, compress)) for o in offsets]


def reference(data: bytes, window: Window, last: int = -1) -> pa.RecordBatch:
    """What the per-message path keeps: the window's offsets, each once, increasing, and tags."""
    kept = []
    for m in decode_messages(data):
        if window.start <= m.queue_offset < window.end and m.queue_offset > last:
            if not window.tags or m.tags in window.tags:
                kept.append(m)
                last = m.queue_offset
    return messages_to_batch(kept, broker=window.broker, restore_retry_topic_of=window.restore_retry_topic_of)


def same(a: pa.RecordBatch, b: pa.RecordBatch) -> bool:
    return a.schema.equals(b.schema) and a.to_pylist() == b.to_pylist()


WINDOWS = st.builds(Window, start=st.integers(0, 20), end=st.integers(20, 70),
                    tags=st.sampled_from([frozenset(), frozenset({"TagA"}), frozenset({"TagA", "TagB"})]),
                    broker=st.just("broker-a"), restore_retry_topic_of=st.sampled_from([None, GROUP]))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(bodies(), WINDOWS)
def test_fast_path_equals_the_per_message_path(messages: list[MessageExt], window: Window) -> None:
    data = b"".join(encode_message(m) for m in messages)
    starts = columnar.record_starts(data)
    if all(len(m.topic) <= 127 and not set(m.properties) & {""} for m in messages):
        columnar._decode_fast(data, starts, window)      # the fast path applies (no fallback)
    got, _ = decode_body(data, window)
    assert same(got, reference(data, window))


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(bodies(v6=True, compress=True), WINDOWS)
def test_ipv6_hosts_and_compressed_bodies_come_out_the_same(messages: list[MessageExt], window: Window) -> None:
    data = b"".join(encode_message(m) for m in messages)
    got, _ = decode_body(data, window)
    assert same(got, reference(data, window))


def test_rows_are_each_offset_once_in_increasing_order_across_bodies() -> None:
    ms = [MessageExt(topic="orders", body=b"m%d" % i, queue_offset=i, properties={"UNIQ_KEY": f"U{i}"})
          for i in range(10)]
    first = b"".join(encode_message(m) for m in ms[:6])
    again = b"".join(encode_message(m) for m in ms[3:])       # overlaps 3..5
    window = Window(2, 9, broker="broker-a")
    a, last = decode_body(first, window)
    b, last = decode_body(again, window, last)
    assert a.column("queue_offset").to_pylist() == [2, 3, 4, 5]
    assert b.column("queue_offset").to_pylist() == [6, 7, 8] and last == 8
    assert b.column("msg_id").to_pylist() == ["U6", "U7", "U8"]


def test_a_property_name_given_twice_keeps_the_last_value_like_the_decoder() -> None:
    m = MessageExt(topic="orders", body=b"x", properties={"TAGS": "A"})
    raw = bytearray(encode_message(m))
    # rewrite the properties to "TAGS\x01A\x02TAGS\x01B" (same record layout, longer text)
    props = "TAGS\x01A\x02TAGS\x01B".encode()
    old = "TAGS\x01A".encode()
    assert raw.endswith(old)
    raw = raw[:-len(old) - 2] + len(props).to_bytes(2, "big") + props
    raw[0:4] = len(raw).to_bytes(4, "big")
    got, _ = decode_body(bytes(raw), Window(0, 10, broker="b"))
    assert got.column("tags").to_pylist() == ["B"] == [m.tags for m in decode_messages(bytes(raw))]


PROPERTY_TEXT = st.lists(st.sampled_from(["\x01", "\x02", "a", "TAGS", "é", "v1", ""]), max_size=12).map("".join)


@settings(max_examples=300, deadline=None)
@given(st.lists(PROPERTY_TEXT, min_size=1, max_size=8))
def test_the_property_map_keeps_what_the_per_message_decoder_keeps(texts: list[str]) -> None:
    """Any text, separators anywhere: the same pairs as ``decode_properties`` (a name given
    twice in one text goes to the per-message path, which keeps the last value)."""
    expected = [decode_properties(t) for t in texts]
    try:
        got = columnar._property_map(pa.array(texts, pa.string()))
    except columnar._Fallback:
        assert any(_repeats_a_name(t) for t in texts)
        return
    assert [dict(m) for m in got.to_pylist()] == expected
    assert [[k for k, _ in m] for m in got.to_pylist()] == [list(e) for e in expected]


def _repeats_a_name(text: str) -> bool:
    """Whether two of the pairs ``decode_properties`` keeps have the same name."""
    names = [name for name, sep, value in (piece.partition("\x01") for piece in text.split("\x02"))
             if sep and name and value]
    return len(names) != len(set(names))


@settings(max_examples=150, deadline=None)
@given(st.binary(max_size=64), st.data())
def test_views_cut_the_same_bytes_as_slicing(data: bytes, draw: st.DataObject) -> None:
    """Ranges of any length (inline up to 12 bytes, referenced beyond), up to the last byte."""
    ranges = draw.draw(st.lists(st.tuples(st.integers(0, len(data)), st.integers(0, 64)), max_size=10))
    ranges = [(a, min(n, len(data) - a)) for a, n in ranges]
    starts = np.asarray([a for a, _ in ranges], np.int64)
    lengths = np.asarray([n for _, n in ranges], np.int64)
    got = columnar._views(columnar._Bytes.of(pa.py_buffer(data)), starts, lengths, pa.binary())
    assert got.to_pylist() == [data[a:a + n] for a, n in ranges]


@pytest.mark.parametrize("cut", [1, 7, 60, 95])
def test_a_damaged_body_raises_a_protocol_error(cut: int) -> None:
    data = encode_message(MessageExt(topic="orders", body=b"hello", properties={"TAGS": "A"}))
    with pytest.raises(RemoteProtocolError):
        decode_body(data[:-cut], Window(0, 10))
    bad_magic = data[:4] + b"\x00\x00\x00\x00" + data[8:]
    with pytest.raises(RemoteProtocolError):
        decode_body(bad_magic, Window(0, 10))


def test_batcher_makes_batches_of_at_most_max_rows_in_offset_order() -> None:
    ms = [MessageExt(topic="orders", body=b"m%d" % i, queue_offset=i) for i in range(100)]
    pulls = [b"".join(encode_message(m) for m in ms[i:i + 32]) for i in range(0, 100, 32)]
    out = list(BodyBatcher(Window(5, 95, broker="b"), max_rows=40).batches(pulls))
    assert all(b.num_rows <= 40 for b in out) and len(out) >= 3
    assert [o for b in out for o in b.column("queue_offset").to_pylist()] == list(range(5, 95))


def test_batcher_decodes_what_it_holds_once_max_bytes_are_in() -> None:
    ms = [MessageExt(topic="orders", body=bytes([i]) * 1000, queue_offset=i) for i in range(12)]
    pulls = [b"".join(encode_message(m) for m in ms[i:i + 4]) for i in range(0, 12, 4)]
    out = list(BodyBatcher(Window(0, 12, broker="b"), max_rows=100, max_bytes=5000).batches(pulls))
    assert [b.num_rows for b in out] == [8, 4]          # 2 pulls pass 5000 bytes, then the end
    assert [bytes(v)[:1] for b in out for v in b.column("body").to_pylist()] == [bytes([i]) for i in range(12)]


# ------------------------------------------------------------------ undecoded, pipelined reads

class RawQueue:
    """A FakeQueue answering undecoded, with ``pull_async``; records pulls in flight."""

    def __init__(self, fq: FakeQueue, cap: int | None = None) -> None:
        self.fq, self.cap = fq, cap
        self.sent: list[int] = []
        self.inflight = self.most_inflight = 0
        self.cancelled = 0

    def pull_async(self, queue, offset, *, decode=True, max_nums=32, **kw):  # type: ignore[no-untyped-def]
        assert decode is False
        self.sent.append(offset)
        self.inflight += 1
        self.most_inflight = max(self.most_inflight, self.inflight)
        res = self.fq.pull(queue, offset, max_nums=min(max_nums, self.cap or max_nums), **kw)
        raw = b"".join(encode_message(m) for m in res.messages)
        answer = PullResult(res.status, res.next_begin_offset, res.min_offset, res.max_offset, raw_body=raw)
        owner = self

        class Pending:
            def result(self) -> PullResult:
                owner.inflight -= 1
                return answer

            def cancel(self) -> None:
                owner.inflight -= 1
                owner.cancelled += 1
        return Pending()


def messages(n: int) -> list[MessageExt]:
    return [MessageExt(topic="orders", body=b"m%d" % i, queue_offset=i,
                       properties={"TAGS": "TagA" if i % 3 else "TagB"}) for i in range(n)]


def test_pulls_go_out_ahead_and_the_range_comes_whole() -> None:
    rq = RawQueue(FakeQueue(messages(200)))
    spec = PullSpec(Q, 10, 150, pull_batch_size=16)
    assert rows(read_range(rq, spec, PullPolicy(pipeline_depth=4)), spec) == list(range(10, 150))
    assert rq.most_inflight == 4
    assert rq.sent == list(range(10, 150, 16))        # each offset asked once, the last one short


def test_a_capped_answer_resets_the_pipeline_and_nothing_is_lost_or_doubled() -> None:
    rq = RawQueue(FakeQueue(messages(200)), cap=10)    # the broker answers 10 at most
    spec = PullSpec(Q, 0, 120, pull_batch_size=32)
    assert rows(read_range(rq, spec, PullPolicy(pipeline_depth=4)), spec) == list(range(120))
    assert rq.cancelled >= 3 and rq.inflight == 0


def test_a_tag_filter_reads_one_pull_at_a_time() -> None:
    rq = RawQueue(FakeQueue(messages(100)))
    spec = PullSpec(Q, 0, 100, pull_batch_size=8, sub_expression="TagB")
    assert rows(read_range(rq, spec, PullPolicy(pipeline_depth=4)), spec) == list(range(0, 100, 3))
    assert rq.most_inflight == 1


# ------------------------------------------------------------------ readahead

def test_readahead_keeps_order_and_raises_where_the_source_failed() -> None:
    def source():  # type: ignore[no-untyped-def]
        yield from range(5)
        raise RemoteProtocolError("boom")

    got = []
    with pytest.raises(RemoteProtocolError, match="boom"):
        for x in readahead(source(), 2):
            got.append(x)
    assert got == [0, 1, 2, 3, 4]


def test_readahead_stops_its_thread_when_the_consumer_stops() -> None:
    produced = []

    def source():  # type: ignore[no-untyped-def]
        for i in range(1000):
            produced.append(i)
            yield i

    it = readahead(source(), 2, name="readahead-test")
    assert next(it) == 0
    it.close()
    for t in threading.enumerate():
        if t.name == "readahead-test":
            t.join(timeout=10)
            assert not t.is_alive()
    assert len(produced) < 10


def test_readahead_discards_what_the_consumer_stopped_without_using() -> None:
    produced: list[int] = []
    discarded: list[int] = []

    def source():  # type: ignore[no-untyped-def]
        for i in range(1000):
            produced.append(i)
            yield i

    it = readahead(source(), 3, name="readahead-discard-test", discard=discarded.append)
    yielded = [next(it), next(it)]
    wait_until(lambda: len(produced) >= 5, 10, "the thread to fetch ahead")
    it.close()
    for t in threading.enumerate():
        if t.name == "readahead-discard-test":
            t.join(timeout=10)
            assert not t.is_alive()
    assert yielded == [0, 1]
    assert discarded[0] == 1               # held by the consumer when it stopped: maybe unused
    assert len(discarded) > 1              # fetched ahead, never handed out
    assert sorted([0] + discarded) == produced         # each item once: used or discarded


# ------------------------------------------------------------------ the compiled decoder

def test_the_compiled_decoder_is_built_by_the_install() -> None:
    assert columnar._compiled is not None, "pip install . did not build rocketmq_spark/sidecar/_fastcolumnar.c"


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(bodies(), WINDOWS)
def test_compiled_path_equals_the_numpy_path(messages: list[MessageExt], window: Window) -> None:
    data = b"".join(encode_message(m) for m in messages)
    starts = columnar.record_starts(data)
    assert starts == columnar._record_starts(data)
    try:
        numpy_batch, numpy_offsets, numpy_tags = columnar._decode_fast(data, starts, window)
    except columnar._Fallback:
        return
    batch, offsets, tags = columnar._decode_compiled(data, starts, window)
    assert same(batch, numpy_batch)
    assert offsets.tolist() == numpy_offsets.tolist() and tags.to_pylist() == numpy_tags.to_pylist()


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(bodies(), WINDOWS, st.integers(1, 5))
def test_bodies_decoded_where_they_are_equal_their_joined_decode(messages: list[MessageExt], window: Window,
                                                                  parts: int) -> None:
    encoded = [encode_message(m) for m in messages]
    cut = max(1, len(encoded) // parts)
    bodies = [b"".join(encoded[i:i + cut]) for i in range(0, len(encoded), cut)]
    assert [columnar.count_records(b) for b in bodies] == [len(columnar._record_starts(b)) for b in bodies]
    got, got_last = columnar.decode_parts(bodies, window, 3)
    want, want_last = decode_body(b"".join(bodies), window, 3)
    assert same(got, want) and got_last == want_last


def walked(body: bytes) -> WalkedBodies:
    """``body`` with its record starts, as a compiled run of pulls hands them over."""
    return WalkedBodies(body, array.array("i", columnar._record_starts(body)).tobytes())


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(bodies(), WINDOWS, st.integers(1, 5), st.lists(st.booleans(), min_size=5, max_size=5))
def test_bodies_with_their_starts_decode_as_bodies_walked_here(messages: list[MessageExt], window: Window,
                                                               parts: int, noted: list[bool]) -> None:
    encoded = [encode_message(m) for m in messages]
    cut = max(1, len(encoded) // parts)
    bodies = [b"".join(encoded[i:i + cut]) for i in range(0, len(encoded), cut)]
    mixed = [walked(b) if noted[i % 5] else b for i, b in enumerate(bodies)]
    got, got_last = columnar.decode_parts(mixed, window, 3)
    want, want_last = columnar.decode_parts(bodies, window, 3)
    assert same(got, want) and got_last == want_last
    batches = list(BodyBatcher(window, max_rows=7).batches(mixed))
    assert [b.num_rows for b in batches] == [b.num_rows for b in BodyBatcher(window, max_rows=7).batches(bodies)]


def test_the_noted_starts_are_the_rows_and_each_must_be_a_record_that_fits() -> None:
    records = [encode_message(MessageExt(topic="t", body=b"%d" % i, queue_offset=i)) for i in range(3)]
    good = b"".join(records)
    first, second, third = columnar._record_starts(good)
    # a compiled run's bytes hold frame headers between bodies: only the noted records are rows
    gaps = b"HEADER" + records[0] + b"xx" + records[1] + records[2] + b"tail"
    at = [6, 6 + len(records[0]) + 2, 6 + len(records[0]) + 2 + len(records[1])]
    run = WalkedBodies(gaps, array.array("i", at).tobytes())
    assert columnar.decode_parts([run], Window(0, 10))[0].column("queue_offset").to_pylist() == [0, 1, 2]
    assert run.joined() == good
    skipped = WalkedBodies(good, array.array("i", [first, third]).tobytes())
    assert columnar.decode_parts([skipped], Window(0, 10))[0].column("queue_offset").to_pylist() == [0, 2]
    for starts in ([4], [-1], [0, len(good)], [third + 1], []):   # not records that fit this data
        with pytest.raises(RemoteProtocolError, match="record starts do not fit"):
            columnar.decode_parts([WalkedBodies(good, array.array("i", starts).tobytes())], Window(0, 10))
    damaged = WalkedBodies(good[:-1], array.array("i", [first, second, third]).tobytes())
    with pytest.raises(RemoteProtocolError):
        columnar.decode_parts([damaged], Window(0, 10))


def test_a_damaged_body_among_parts_fails_as_the_joined_body_does() -> None:
    good = b"".join(encode_message(MessageExt(topic="t", body=b"%d" % i, queue_offset=i)) for i in range(3))
    for bad in (good[:-1], good[:3], b"\x00\x00\x00\x02" + good):
        with pytest.raises(RemoteProtocolError) as parts:
            columnar.decode_parts([good, bad], Window(0, 10))
        with pytest.raises(RemoteProtocolError) as counted:
            columnar.count_records(bad)
        with pytest.raises(RemoteProtocolError) as joined:
            columnar._record_starts(good + bad)
        assert str(parts.value) == str(counted.value)
        assert "does not fit" in str(joined.value) or "truncated" in str(joined.value)


def test_the_batcher_keeps_a_run_of_max_rows_whole_and_cuts_no_batch_past_it() -> None:
    ms = [MessageExt(topic="orders", body=b"m%d" % i, queue_offset=i) for i in range(150)]
    pulls = [b"".join(encode_message(m) for m in ms[i:i + 10]) for i in range(0, 150, 10)]
    sizes = [b.num_rows for b in BodyBatcher(Window(0, 150, broker="b"), max_rows=40).batches(pulls)]
    assert sizes == [40, 40, 40, 30]
    one_big = [b"".join(encode_message(m) for m in ms)]
    sizes = [b.num_rows for b in BodyBatcher(Window(0, 150, broker="b"), max_rows=40).batches(one_big)]
    assert sizes == [40, 40, 40, 30]


def _with_properties(text: str, offset: int) -> bytes:
    """A record whose properties text is ``text`` exactly (any separators)."""
    raw = bytearray(encode_message(MessageExt(topic="t", body=b"b", queue_offset=offset, properties={"P": "x"})))
    old = "P\x01x".encode()
    props = text.encode()
    raw = raw[:-len(old) - 2] + len(props).to_bytes(2, "big") + props
    raw[0:4] = len(raw).to_bytes(4, "big")
    return bytes(raw)


@settings(max_examples=300, deadline=None)
@given(st.lists(PROPERTY_TEXT, min_size=1, max_size=8))
def test_compiled_property_maps_keep_what_the_per_message_decoder_keeps(texts: list[str]) -> None:
    data = b"".join(_with_properties(t, i) for i, t in enumerate(texts))
    window = Window(0, 100, broker="broker-a")
    got, _ = decode_body(data, window)
    assert same(got, reference(data, window))


def test_a_damaged_body_gives_the_same_error_either_way() -> None:
    data = b"".join(encode_message(MessageExt(topic="t", body=b"%d" % i, queue_offset=i)) for i in range(3))
    for bad in (data[:-1], data[:3], b"\x00\x00\x00\x02" + data):
        with pytest.raises(RemoteProtocolError) as compiled:
            columnar.record_starts(bad)
        with pytest.raises(RemoteProtocolError) as pure:
            columnar._record_starts(bad)
        assert str(compiled.value) == str(pure.value)


def test_text_that_is_not_ascii_is_kept_and_text_that_is_not_utf8_is_refused() -> None:
    msgs = [MessageExt(topic="t", body=b"b", queue_offset=i,
                       properties={"K": "vé\u2603" if i == 1 else "ascii"}) for i in range(3)]
    data = b"".join(encode_message(m) for m in msgs)
    batch, _ = columnar.decode_parts([data], Window(0, 10))
    assert batch.column("properties").to_pylist() == [[("K", "ascii")], [("K", "vé\u2603")], [("K", "ascii")]]
    bad = data.replace("vé".encode(), b"v\xff\xfe")           # same length, not UTF-8
    with pytest.raises(RemoteProtocolError, match="not UTF-8"):
        columnar.decode_parts([bad], Window(0, 10))


# ------------------------------------------------------------------ IPC messages built in C

def from_message(encoded: columnar.Encoded) -> pa.RecordBatch:
    batch = pa.ipc.read_record_batch(pa.py_buffer(encoded.message), columnar.SOURCE_SCHEMA)
    batch.validate(full=True)
    return batch


def test_the_compiled_encoder_takes_pyarrows_message_layout() -> None:
    assert columnar._ENCODER, "the compiled encoder did not take the layout of pyarrow's messages"


PLAIN_WINDOWS = st.builds(Window, start=st.integers(0, 20), end=st.integers(20, 70), broker=st.just("broker-a"))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(bodies(), PLAIN_WINDOWS, st.integers(1, 5), st.lists(st.booleans(), min_size=5, max_size=5),
       st.sampled_from([-1, 3, 30]))
def test_encoded_messages_hold_what_decode_parts_keeps(messages: list[MessageExt], window: Window, parts: int,
                                                       noted: list[bool], last: int) -> None:
    encoded = [encode_message(m) for m in messages]
    cut = max(1, len(encoded) // parts)
    pieces = [b"".join(encoded[i:i + cut]) for i in range(0, len(encoded), cut)]
    mixed = [walked(b) if noted[i % 5] else b for i, b in enumerate(pieces)]
    want, want_last = columnar.decode_parts(pieces, window, last)
    got = columnar.encode_parts(mixed, window, last, max_rows=4096)
    assert got is not None
    message, got_last = got
    assert got_last == want_last
    if want.num_rows == 0:
        assert message is None
    else:
        assert message is not None and message.num_rows == want.num_rows
        assert same(from_message(message), want)
        # written one after the other: every piece keeps the stream 8-byte aligned
        assert all(len(p) % 8 == 0 for p in message.pieces) and message.pieces[0][:4] == b"\xff" * 4


def test_encoded_messages_leave_tag_filters_retry_topics_and_big_runs_to_pyarrow() -> None:
    msgs = [MessageExt(topic="orders", body=b"b%d" % i, queue_offset=i, properties={"TAGS": "TagA"})
            for i in range(5)]
    data = b"".join(encode_message(m) for m in msgs)
    assert columnar.encode_parts([data], Window(0, 10, frozenset({"TagA"}), "b"), -1, 4096) is None
    assert columnar.encode_parts([data], Window(0, 10, broker="b", restore_retry_topic_of=GROUP), -1, 4096) is None
    assert columnar.encode_parts([data], Window(0, 10, broker="b"), -1, 4) is None      # 5 rows > 4
    message, last = columnar.encode_parts([data], Window(0, 10, broker="b"), -1, 5)
    assert message is not None and message.num_rows == 5 and last == 4
    assert columnar.encode_parts([data], Window(5, 10, broker="b"), -1, 5) == (None, -1)
    assert columnar.encode_parts([data], Window(0, 10, broker="b"), 4, 5) == (None, 4)


def test_a_record_the_encoder_cannot_read_goes_to_the_path_that_names_the_damage() -> None:
    good = b"".join(encode_message(MessageExt(topic="t", body=b"%d" % i, queue_offset=i)) for i in range(3))
    bad_magic = bytearray(good)
    bad_magic[4:8] = b"\x00\x00\x00\x01"
    assert columnar.encode_parts([bytes(bad_magic)], Window(0, 10, broker="b"), -1, 10) is None
    with pytest.raises(RemoteProtocolError):      # a size that does not fit: the walk's error
        columnar.encode_parts([good[:-1]], Window(0, 10, broker="b"), -1, 10)
    with pytest.raises(RemoteProtocolError, match="record starts do not fit"):
        columnar.encode_parts([WalkedBodies(good, array.array("i", [4]).tobytes())], Window(0, 10), -1, 10)


def test_the_batcher_encodes_where_it_can_and_builds_batches_where_it_cannot() -> None:
    msgs = [MessageExt(topic="t", body=b"b%d" % i, queue_offset=i, properties={"K": "v", "UNIQ_KEY": "U%d" % i})
            for i in range(100)]
    msgs[45] = replace(msgs[45], born_host=HostPort("::1", 10911))          # not for the compiled path
    for i, codec in zip((12, 13, 14, 15), STORED_CODECS[1:]):                # compressed bodies are
        body, sys_flag = squeezed(b"b%d" % i, codec)
        msgs[i] = replace(msgs[i], body=body, sys_flag=sys_flag)
    pulls = [b"".join(encode_message(m) for m in msgs[i:i + 10]) for i in range(0, 100, 10)]
    window = Window(3, 97, broker="broker-a")
    items = list(BodyBatcher(window, max_rows=20, encoded=True).batches(pulls))
    kinds = [type(i) for i in items]
    assert kinds == [columnar.Encoded, columnar.Encoded, pa.RecordBatch, columnar.Encoded, columnar.Encoded]
    got = pa.Table.from_batches([from_message(i) if isinstance(i, columnar.Encoded) else i for i in items])
    want = pa.Table.from_batches(list(BodyBatcher(window, max_rows=20).batches(pulls)))
    assert got.equals(want) and got.column("queue_offset").to_pylist() == list(range(3, 97))
    assert got.column("body").to_pylist()[9:13] == [b"b12", b"b13", b"b14", b"b15"]


def test_a_layout_of_another_schema_is_refused() -> None:
    other = pa.record_batch({"i": pa.array([1, 2], pa.int64())})
    with pytest.raises(ValueError, match="not 18 and 46"):
        columnar.message_layout(other)
    if columnar._compiled is not None:
        with pytest.raises(ValueError, match="does not fit"):
            columnar._compiled.set_layout(b"\x00" * 16, 0, 8, 0, 0)


def test_the_encoder_keeps_utf8_text_and_leaves_the_rest_to_the_path_that_refuses_it() -> None:
    msgs = [MessageExt(topic="订单" if i == 2 else "t", body=b"b", queue_offset=i,
                       properties={"K": "vé\u2603" if i == 1 else "ascii", "TAGS": "标签"}) for i in range(3)]
    data = b"".join(encode_message(m) for m in msgs)
    got = columnar.encode_parts([data], Window(0, 10, broker="b"), -1, 10)
    assert got is not None and got[0] is not None
    assert same(from_message(got[0]), columnar.decode_parts([data], Window(0, 10, broker="b"))[0])
    for bad in (data.replace("vé".encode(), b"v\xff\xfe"),           # not UTF-8
                data.replace("\u2603".encode(), b"\xed\xa0\x80")):    # a surrogate
        assert columnar.encode_parts([bad], Window(0, 10, broker="b"), -1, 10) is None
        with pytest.raises(RemoteProtocolError, match="not UTF-8"):
            list(BodyBatcher(Window(0, 10, broker="b"), 10, encoded=True).batches([bad]))
    # each value on its own: a character cut between a name and its value is not UTF-8
    # although the two side by side are
    snowman = "\u2603".encode()
    split = _with_properties_bytes(b"N" + snowman[:1] + b"\x01" + snowman[1:] + b"v", 0)
    assert columnar.encode_parts([split], Window(0, 10, broker="b"), -1, 10) is None


def _with_properties_bytes(text: bytes, offset: int) -> bytes:
    raw = bytearray(encode_message(MessageExt(topic="t", body=b"b", queue_offset=offset, properties={"P": "x"})))
    old = "P\x01x".encode()
    raw = raw[:-len(old) - 2] + len(text).to_bytes(2, "big") + text
    raw[0:4] = len(raw).to_bytes(4, "big")
    return bytes(raw)


def test_fields_of_every_short_length_are_copied_whole() -> None:
    # each length from 0 to 70 bytes, in bodies, topics, keys and property values, through
    # both compiled paths
    msgs = [MessageExt(topic="t" * max(1, n % 40), body=bytes(range(n)), queue_offset=n,
                       properties={"KEYS": "k" * (n % 40) or "k", "P" * (1 + n % 33): "v%s" % ("x" * n)})
            for n in range(71)]
    data = b"".join(encode_message(m) for m in msgs)
    window = Window(0, 100, broker="broker-a" * 5)
    got, _ = columnar.decode_parts([data], window)
    assert same(got, reference(data, window))
    encoded = columnar.encode_parts([data], window, -1, 100)
    assert encoded is not None and encoded[0] is not None
    assert same(from_message(encoded[0]), got)


# ------------------------------------------------------------------ compressed bodies in C

def test_the_compiled_decoder_takes_the_codecs_of_every_compression_type() -> None:
    assert columnar._INFLATES, "the compiled decoder predates set_inflaters: rebuild it"
    with pytest.raises(ValueError, match="compression type bits"):
        columnar._compiled.set_inflaters({0x80: zlib.decompress})      # not a type of bits 8-10
    with pytest.raises(ValueError, match="compression type bits"):
        columnar._compiled.set_inflaters({0x100: "not callable"})


def test_a_codec_s_error_falls_back_and_what_is_no_codec_s_error_is_raised() -> None:
    data = encode_message(MessageExt(topic="t", body=zlib.compress(b"x"), sys_flag=MessageSysFlag.COMPRESSED))

    def not_bytes(body: bytes) -> bytearray:
        return bytearray(zlib.decompress(body))

    def out_of_memory(body: bytes) -> bytes:
        raise MemoryError()

    def interrupted(body: bytes) -> bytes:
        raise KeyboardInterrupt()

    try:
        columnar._compiled.set_inflaters({0: not_bytes})
        assert columnar._compiled.decode_parts([data]) is None          # the per-message path's
        for codec, error in ((out_of_memory, MemoryError), (interrupted, KeyboardInterrupt)):
            columnar._compiled.set_inflaters({0: codec})
            with pytest.raises(error):
                columnar._compiled.decode_parts([data])
            with pytest.raises(error):
                columnar._compiled.encode_parts([data], None, 0, 10, -1, b"b", 10)
    finally:
        columnar._set_inflaters()
    assert columnar.decode_parts([data], Window(0, 10))[0].column("body").to_pylist() == [b"x"]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(bodies(compress=True), PLAIN_WINDOWS, st.integers(1, 5), st.lists(st.booleans(), min_size=5, max_size=5))
def test_compressed_bodies_of_every_codec_decode_in_c_as_the_per_message_path(
        messages: list[MessageExt], window: Window, parts: int, noted: list[bool]) -> None:
    encoded = [encode_message(m) for m in messages]
    cut = max(1, len(encoded) // parts)
    pieces = [b"".join(encoded[i:i + cut]) for i in range(0, len(encoded), cut)]
    mixed = [walked(b) if noted[i % 5] else b for i, b in enumerate(pieces)]
    data = b"".join(pieces)
    # the compiled decoder reads them itself (None would hand them to the per-message path)
    assert columnar._compiled.decode_parts(pieces) is not None
    assert columnar._compiled.decode(data, columnar.record_starts(data)) is not None
    want = reference(data, window)
    got, _ = columnar.decode_parts(mixed, window)
    assert same(got, want)
    out = columnar.encode_parts(mixed, window, -1, max_rows=4096)
    assert out is not None
    assert (out[0] is None) if want.num_rows == 0 else same(from_message(out[0]), want)


@pytest.mark.parametrize("release", ["4.9.8", "5.1.3", "5.5.0"])
def test_a_recorded_pull_of_a_compressed_body_decodes_in_c_as_the_per_message_path(release: str) -> None:
    """A real broker's pull answer holding the Java producer's zlib body (sysFlag bit 0)."""
    data = bytes.fromhex(broker_vectors()[f"{release}/pull_binary_body"]["response"]["body_hex"])
    assert [m.sys_flag & MessageSysFlag.COMPRESSED for m in decode_messages(data)] == [0, 1]
    window = Window(0, 100, broker="broker-a")
    assert columnar._compiled.decode_parts([data]) is not None
    got, _ = columnar.decode_parts([data], window)
    assert same(got, reference(data, window)) and len(got.column("body")[1].as_py()) == 9000
    out = columnar.encode_parts([data], window, -1, max_rows=10)
    assert out is not None and same(from_message(out[0]), got)


@pytest.mark.parametrize("sys_flag, body, error", [
    (MessageSysFlag.COMPRESSED | MessageSysFlag.COMPRESSION_LZ4, b"not a frame", "a lz4 compressed body does not inflate"),
    (MessageSysFlag.COMPRESSED | MessageSysFlag.COMPRESSION_ZSTD, b"not a frame", "a zstd compressed body does not inflate"),
    (MessageSysFlag.COMPRESSED, zlib.compress(b"cut short")[:-3], "a zlib compressed body does not inflate"),
    (MessageSysFlag.COMPRESSED | 0x500, zlib.compress(b"x"), "unsupported compression type 0x500"),
])
def test_a_body_its_codec_does_not_inflate_gets_the_per_message_error_either_way(
        sys_flag: int, body: bytes, error: str) -> None:
    good = [encode_message(MessageExt(topic="t", body=b"b%d" % i, queue_offset=i)) for i in range(3)]
    bad = encode_message(MessageExt(topic="t", body=body, sys_flag=sys_flag, queue_offset=3))
    data = b"".join(good) + bad
    assert columnar._compiled.decode_parts([data]) is None         # left to the per-message path
    assert columnar.encode_parts([data], Window(0, 10, broker="b"), -1, 10) is None
    with pytest.raises(RemoteProtocolError, match=error):
        decode_messages(data)[3].payload()
    with pytest.raises(RemoteProtocolError, match=error):
        columnar.decode_parts([data], Window(0, 10, broker="b"))
    with pytest.raises(RemoteProtocolError, match=error):
        list(BodyBatcher(Window(0, 10, broker="b"), 10, encoded=True).batches([data]))
    # the codec's state after a failure does not spoil the next body (one decompressor a thread)
    ok = encode_message(MessageExt(topic="t", body=squeezed(b"after", "zstd")[0],
                                   sys_flag=squeezed(b"", "zstd")[1], queue_offset=4))
    assert columnar.decode_parts([b"".join(good) + ok], Window(0, 10))[0].column("body")[3].as_py() == b"after"


def test_8k_json_bodies_of_every_codec_come_out_whole() -> None:
    """Bodies as the benchmark sends them (8 KiB of JSON, past the columns' first sizes)."""
    doc = (b'{"order_id":"ord-%09d","items":[' + b'{"sku":"SKU-00042","qty":3,"price":12.5},' * 190 + b"{}]}")
    msgs = []
    for i in range(40):
        body, sys_flag = squeezed(doc % i, STORED_CODECS[i % len(STORED_CODECS)])
        msgs.append(MessageExt(topic="orders", body=body, sys_flag=sys_flag, queue_offset=i))
    data = b"".join(encode_message(m) for m in msgs)
    window = Window(0, 100, broker="b")
    got, _ = columnar.decode_parts([data], window)
    assert got.column("body").to_pylist() == [doc % i for i in range(40)]
    assert same(got, reference(data, window))
    assert same(from_message(columnar.encode_parts([data], window, -1, 100)[0]), got)


def test_the_encoder_s_template_is_the_row_pyarrow_builds_from_a_message() -> None:
    """The layout template is built from buffers (no pandas); it is the same batch as
    ``messages_to_batch`` makes of the same message, so the encoder learns the same layout."""
    reference = messages_to_batch([MessageExt(topic="t", body=b"b", properties={columnar.PROP_TAGS: "x"})],
                                  broker="b")
    assert columnar._template().equals(reference)
    assert columnar.message_layout(columnar._template()) == columnar.message_layout(reference)


def test_streams_encoded_at_once_on_several_threads_each_come_out_whole() -> None:
    """The sidecar encodes each stream in that stream's thread: threads encoding their own
    streams at the same time each get exactly the message one thread alone gets (long topics
    and property values growing the columns included, and compressed bodies of every codec,
    whose codecs let other threads run)."""
    def stream(seed: int) -> list[bytes]:
        out = []
        for i in range(600):
            body, sys_flag = squeezed(bytes([seed]) * (i % 97), STORED_CODECS[i % len(STORED_CODECS)])
            m = MessageExt(topic=("t" * 127 if (i + seed) % 3 else f"topic-{seed}"), body=body, sys_flag=sys_flag,
                           queue_id=seed, queue_offset=i, store_host=HostPort("10.1.2.3", 10911),
                           born_host=HostPort("127.0.0.1", 1), properties={"TAGS": "TagA", "v": "x" * (i % 300)})
            out.append(encode_message(m))
        return [b"".join(out[k:k + 150]) for k in range(0, len(out), 150)]

    window = Window(0, 10_000, broker="broker-a")
    parts = [stream(seed) for seed in range(4)]
    alone = [columnar.encode_parts(p, window, -1, max_rows=4096) for p in parts]
    assert all(a is not None and a[0] is not None and a[0].num_rows == 600 for a in alone)
    got: dict[tuple[int, int], bytes] = {}

    def encode(seed: int) -> None:
        for round_ in range(20):
            result = columnar.encode_parts(parts[seed], window, -1, max_rows=4096)
            assert result is not None and result[0] is not None
            got[(seed, round_)] = result[0].message

    threads = [threading.Thread(target=encode, args=(seed,)) for seed in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(got) == 80
    for (seed, _), message in got.items():
        assert message == alone[seed][0].message
    assert same(from_message(alone[1][0]), columnar.decode_parts(parts[1], window, -1)[0])
    assert same(from_message(alone[1][0]), reference(b"".join(parts[1]), window))
