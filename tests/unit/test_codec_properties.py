"""Property tests: round trips of every codec, and 'parses or raises ProtocolError' on junk."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rocketmq_spark.errors import NeedMoreData, ProtocolError
from rocketmq_spark.remoting import command, fastjson
from rocketmq_spark.remoting.codes import LANGUAGES
from rocketmq_spark.remoting.message import (
    BatchItem, HostPort, MessageExt, decode_batch, decode_messages, decode_properties,
    encode_batch, encode_message, encode_properties, java_string_hash, offset_msg_id,
    parse_offset_msg_id)
from rocketmq_spark.remoting.route import BrokerData, QueueData, TopicRouteData, decode_route, encode_route

text = st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00\x01\x02"),
               max_size=20)
key = text.filter(bool)
props = st.dictionaries(key, text.filter(bool), max_size=5)
i32 = st.integers(-(2**31), 2**31 - 1)
i64 = st.integers(-(2**63), 2**63 - 1)
v4 = st.ip_addresses(v=4).map(str)
v6 = st.ip_addresses(v=6).map(str)
hosts = st.builds(HostPort, st.one_of(v4, v6), st.integers(0, 65535))


@st.composite
def commands(draw: st.DrawFn) -> command.RemotingCommand:
    return command.RemotingCommand(
        code=draw(st.integers(-32768, 32767)), opaque=draw(i32), flag=draw(st.integers(0, 3)),
        ext_fields=draw(st.dictionaries(key, text.filter(bool), max_size=6)),
        remark=draw(st.one_of(st.none(), text.filter(bool))), body=draw(st.binary(max_size=64)),
        language=draw(st.sampled_from(LANGUAGES)), version=draw(st.integers(0, 32767)),
        serialize_type=draw(st.sampled_from([0, 1])))


@given(commands())
def test_command_roundtrip(cmd: command.RemotingCommand) -> None:
    frame = command.encode(cmd)
    got, used = command.decode(frame)
    assert used == len(frame)
    assert got == cmd


@given(st.binary(max_size=200))
@settings(max_examples=300)
def test_decode_parses_or_raises_protocol_error(data: bytes) -> None:
    try:
        command.decode(data)
    except NeedMoreData:
        pass
    except ProtocolError:
        pass


@given(props)
def test_properties_roundtrip(p: dict[str, str]) -> None:
    assert decode_properties(encode_properties(p)) == p


@st.composite
def messages(draw: st.DrawFn) -> MessageExt:
    return MessageExt(
        topic=draw(st.text(alphabet="abcXYZ%_-0", min_size=1, max_size=200)),
        body=draw(st.binary(max_size=100)), queue_id=draw(i32), flag=draw(i32),
        queue_offset=draw(i64), commit_log_offset=draw(i64), sys_flag=draw(st.integers(0, 0xC)),
        born_timestamp=draw(i64), born_host=draw(hosts), store_timestamp=draw(i64),
        store_host=draw(hosts), reconsume_times=draw(i32), prepared_transaction_offset=draw(i64),
        properties=draw(props))


@given(st.lists(messages(), max_size=4))
def test_stored_messages_roundtrip(msgs: list[MessageExt]) -> None:
    data = b"".join(encode_message(m) for m in msgs)
    got = decode_messages(data)
    assert [(m.topic, m.body, m.queue_offset, m.store_host, m.born_host, dict(m.properties))
            for m in got] == [(m.topic, m.body, m.queue_offset, m.store_host, m.born_host,
                               dict(m.properties)) for m in msgs]


@given(st.lists(st.builds(BatchItem, st.binary(max_size=50), props, i32), max_size=5))
def test_batch_roundtrip(items: list[BatchItem]) -> None:
    assert decode_batch(encode_batch(items)) == [BatchItem(i.body, dict(i.properties), i.flag) for i in items]


@given(hosts, st.integers(0, 2**62))
def test_offset_msg_id_roundtrip(host: HostPort, offset: int) -> None:
    assert parse_offset_msg_id(offset_msg_id(host, offset)) == (host, offset)


def test_java_string_hash_known_values() -> None:
    assert java_string_hash("TagA") == 2598919
    assert java_string_hash("TagB") == 2598920
    assert java_string_hash("") == 0
    assert java_string_hash("polygenelubricants") == -2147483648  # wraps to Integer.MIN_VALUE


@given(st.lists(st.tuples(st.text(alphabet="abc-", min_size=1, max_size=8), st.integers(1, 16),
                          st.integers(0, 16)), min_size=1, max_size=3, unique_by=lambda t: t[0]))
def test_route_roundtrip_and_legacy_keys(brokers: list[tuple[str, int, int]]) -> None:
    route = TopicRouteData(
        tuple(QueueData(n, r, w, 6, 0) for n, r, w in brokers),
        tuple(BrokerData("DefaultCluster", n, {0: f"127.0.0.1:{10911 + i}"}) for i, (n, _, _) in enumerate(brokers)))
    body = encode_route(route)
    assert decode_route(body) == route
    legacy = body.replace(b'{"0":', b"{0:")
    assert legacy != body
    assert decode_route(legacy) == route


def test_fastjson_object_keys() -> None:
    text = '{"offsetTable":{{"brokerName":"b","queueId":0,"topic":"T"}:{"x":1}},"n":{0:"a",12:"b"}}'
    obj = fastjson.loads(text)
    assert obj["n"] == {"0": "a", "12": "b"}
    (k,) = obj["offsetTable"]
    assert json.loads(k) == {"brokerName": "b", "queueId": 0, "topic": "T"}


def test_frame_decoder_hands_out_whole_frames_and_keeps_a_bad_one() -> None:
    cmds = [command.RemotingCommand(code=11, opaque=i, ext_fields={"queueOffset": str(32 * i)})
            for i in range(5)]
    frames = b"".join(command.encode(c) for c in cmds)
    dec = command.FrameDecoder()
    dec.feed(frames[:-3])                              # the last frame 3 bytes short
    assert list(dec) == cmds[:4] and list(dec) == []
    dec.feed(frames[-3:] + b"\x00\x00\x00\x02xx")      # then a frame that claims 2 bytes
    it = iter(dec)
    assert next(it) == cmds[4]
    with pytest.raises(ProtocolError, match="frame length 2 outside"):
        next(it)
    assert dec.pending == 6                            # the bad frame stays for the log


def test_frame_decoder_hands_out_undecoded_frames_too() -> None:
    cmds = [command.RemotingCommand(code=11, opaque=i, body=b"b" * i) for i in range(4)]
    encoded = [command.encode(c) for c in cmds]
    dec = command.FrameDecoder()
    dec.feed(b"".join(encoded)[:-1])                   # the last frame 1 byte short
    assert list(dec.frames()) == [e[4:] for e in encoded[:3]]
    assert [command.decode_frame(f) for f in [e[4:] for e in encoded[:3]]] == cmds[:3]
    dec.feed(encoded[3][-1:] + b"\xff\xff\xff\xff")       # then a negative length
    it = dec.frames()
    assert next(it) == encoded[3][4:]
    with pytest.raises(ProtocolError, match="frame length -1 outside"):
        next(it)
    assert dec.pending == 4
