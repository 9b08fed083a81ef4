"""Golden tests: every frame the C++ client sent decodes whole, byte by byte, with trailing bytes."""

from __future__ import annotations

import json
import zlib

import pytest

from rocketmq_spark.remoting import command
from rocketmq_spark.remoting.bodies import HeartbeatData, LockBatchBody
from rocketmq_spark.remoting.codes import RequestCode
from rocketmq_spark.remoting.headers import (
    PullMessageRequestHeader, SendMessageRequestHeader)
from rocketmq_spark.remoting.message import decode_batch, decode_properties
from tests.vectors import cpp_vectors

VECTORS = cpp_vectors()
NAMES = sorted(VECTORS)


def _expected_ext(v: dict) -> dict[str, str]:
    return {k: (v2 if isinstance(v2, str) else json.dumps(v2)) for k, v2 in v["header"]["extFields"].items()}


@pytest.mark.parametrize("name", NAMES)
def test_decode_whole(name: str) -> None:
    v = VECTORS[name]
    frame = bytes.fromhex(v["frame_hex"])
    cmd, used = command.decode(frame)
    assert used == len(frame)
    assert cmd.code == v["code"]
    assert cmd.opaque == v["header"]["opaque"]
    assert cmd.language == "CPP" and cmd.version == v["header"]["version"]
    assert dict(cmd.ext) == _expected_ext(v)
    assert not cmd.is_response


@pytest.mark.parametrize("name", NAMES)
def test_decode_byte_by_byte_and_trailing(name: str) -> None:
    frame = bytes.fromhex(VECTORS[name]["frame_hex"])
    dec = command.FrameDecoder()
    got = []
    for b in frame:
        assert not got
        dec.feed(bytes([b]))
        got.extend(dec)
    assert len(got) == 1 and dec.pending == 0
    dec.feed(frame + frame[:7])
    assert [c.opaque for c in dec] == [got[0].opaque]
    assert dec.pending == 7
    whole, _ = command.decode(frame)
    assert got[0] == whole


@pytest.mark.parametrize("name", [n for n in NAMES if VECTORS[n]["code"] == RequestCode.SEND_MESSAGE])
def test_send_headers_and_bodies(name: str) -> None:
    v = VECTORS[name]
    cmd, _ = command.decode(bytes.fromhex(v["frame_hex"]))
    h = SendMessageRequestHeader.from_ext(cmd.ext)
    assert h.topic == v["header"]["extFields"]["topic"]
    assert decode_properties(h.properties or "") == v["decoded_properties"]
    body = zlib.decompress(cmd.body) if h.sys_flag & 1 else cmd.body
    if "inflated_body_hex" in v:
        assert body.hex() == v["inflated_body_hex"]
    if "batch_items" in v:
        assert h.batch is True
        items = decode_batch(body)
        assert len(items) == len(v["batch_items"])
        for item, expect in zip(items, v["batch_items"]):
            assert item.properties == expect.get("properties", expect.get("decoded_properties"))


@pytest.mark.parametrize("name", [n for n in NAMES if VECTORS[n]["code"] == RequestCode.HEART_BEAT])
def test_heartbeat_bodies(name: str) -> None:
    v = VECTORS[name]
    cmd, _ = command.decode(bytes.fromhex(v["frame_hex"]))
    hb = HeartbeatData.decode(cmd.body)
    assert hb.client_id == v["body"]["clientID"]
    assert len(hb.consumers) == len(v["body"].get("consumerDataSet", []))
    for c, raw in zip(hb.consumers, v["body"].get("consumerDataSet", [])):
        assert c.group_name == raw["groupName"]
        assert c.message_model == ("CLUSTERING" if raw["messageModel"] == 1 else "BROADCASTING")
        assert [s.topic for s in c.subscriptions] == [s["topic"] for s in raw.get("subscriptionDataSet", [])]


@pytest.mark.parametrize("name", [n for n in NAMES if VECTORS[n]["code"] in (41, 42)])
def test_lock_bodies(name: str) -> None:
    v = VECTORS[name]
    cmd, _ = command.decode(bytes.fromhex(v["frame_hex"]))
    body = LockBatchBody.decode(cmd.body)
    assert body.consumer_group == v["body"]["consumerGroup"]
    assert len(body.mqs) == len(v["body"]["mqSet"])


@pytest.mark.parametrize("name", [n for n in NAMES if VECTORS[n]["code"] == RequestCode.PULL_MESSAGE])
def test_pull_headers(name: str) -> None:
    v = VECTORS[name]
    cmd, _ = command.decode(bytes.fromhex(v["frame_hex"]))
    h = PullMessageRequestHeader.from_ext(cmd.ext)
    assert h.queue_id == v["header"]["extFields"]["queueId"]
    assert h.sys_flag == v["header"]["extFields"]["sysFlag"]
