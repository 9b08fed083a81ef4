"""Golden tests: every frame in the Apache broker recordings (4.9.8 and 5.1.3) (requests and answers) decodes
whole, byte by byte and with trailing bytes; stored messages decode to the recorded fields."""

from __future__ import annotations

import pytest

from rocketmq_spark.remoting import command
from rocketmq_spark.remoting.codes import SERIALIZE_ROCKETMQ
from rocketmq_spark.remoting.message import decode_messages, encode_message
from tests.vectors import broker_vectors

VECTORS = broker_vectors()
FRAMES = sorted(
    [(name, "request") for name, v in VECTORS.items() if "frame_hex" in v["request"]]
    + [(name, "response") for name, v in VECTORS.items() if v.get("response")])


@pytest.mark.parametrize("name,side", FRAMES)
def test_frame_decodes_whole_bytewise_and_with_trailing_bytes(name: str, side: str) -> None:
    rec = VECTORS[name][side]
    frame = bytes.fromhex(rec["frame_hex"])
    whole, used = command.decode(frame)
    assert used == len(frame)
    assert whole.code == (rec["header"]["code"] if side == "request" else rec["code"])
    if side == "response":
        assert whole.is_response and whole.opaque == rec["opaque"]
        assert (whole.remark or None) == (rec["remark"] or None)
        if rec["extFields"] is not None:
            assert dict(whole.ext) == {k: str(v) for k, v in rec["extFields"].items()}
        assert (whole.serialize_type == SERIALIZE_ROCKETMQ) == (rec["serialization"] == "ROCKETMQ")
    dec = command.FrameDecoder()
    out = []
    for i in range(len(frame)):
        dec.feed(frame[i:i + 1])
        out.extend(dec)
        assert len(out) == (1 if i == len(frame) - 1 else 0)
    assert out[0] == whole
    dec.feed(frame + b"\x00\x00")
    assert list(dec) == [whole] and dec.pending == 2


@pytest.mark.parametrize("name,side", [f for f in FRAMES if f[1] == "response"])
def test_encode_roundtrip_of_decoded_frames(name: str, side: str) -> None:
    cmd, _ = command.decode(bytes.fromhex(VECTORS[name][side]["frame_hex"]))
    again, _ = command.decode(command.encode(cmd))
    assert again == cmd


MESSAGE_FILES = sorted(n for n, v in VECTORS.items() if (v.get("response") or {}).get("messages"))


@pytest.mark.parametrize("name", MESSAGE_FILES)
def test_stored_messages_match_recording(name: str) -> None:
    resp = VECTORS[name]["response"]
    cmd, _ = command.decode(bytes.fromhex(resp["frame_hex"]))
    msgs = decode_messages(cmd.body)
    assert len(msgs) == len(resp["messages"])
    for m, rec in zip(msgs, resp["messages"]):
        assert m.topic == rec["topic"]
        assert m.queue_id == rec["queueId"] and m.queue_offset == rec["queueOffset"]
        assert m.commit_log_offset == rec["commitLogOffset"]
        assert m.sys_flag == rec["sysFlag"] and m.reconsume_times == rec["reconsumeTimes"]
        assert m.body.hex() == rec["body_hex"]
        assert dict(m.properties) == rec["properties"]
        assert str(m.store_host) == rec["storeHost"] and str(m.born_host) == rec["bornHost"]
        assert m.born_timestamp == rec["bornTimestamp"]
        # our encoder writes the same record back, byte for byte (modulo property order)
        again = decode_messages(encode_message(m))[0]
        assert again == m
