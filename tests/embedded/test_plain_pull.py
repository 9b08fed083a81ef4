"""The broker's plain pulls, answered from the frame as read (``processors.pull.answer_plain_pull``):
the same answer, byte for byte, as the general path (decode, ``handle_pull``, encode) gives to
the same request, and everything the shortcut does not serve left to the general path."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any, Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rocketmq_spark.embedded import EmbeddedCluster
from rocketmq_spark.embedded.broker import Broker
from rocketmq_spark.embedded.processors import HANDLERS, answer_request
from rocketmq_spark.embedded.processors.base import Call
from rocketmq_spark.embedded.processors.pull import answer_plain_pull
from rocketmq_spark.embedded.server import Connection, RemotingServer
from rocketmq_spark.remoting.codes import RequestCode
from rocketmq_spark.remoting.command import decode_frame, encode
from rocketmq_spark.remoting.command import RemotingCommand, response_to
from tests.embedded.wire import Wire, pull, req, send_msg

TAGS = ("TagA", "TagB", "TagC")
MESSAGES = 40                      # in queue 0 of T; queue 1 stays empty


class Conn:
    """What a handler sees of a connection: what it sent, nothing written anywhere."""

    id = 1
    remote_addr = "127.0.0.1:50000"

    def __init__(self) -> None:
        self.frames: list[bytes] = []

    def send(self, cmd: Any) -> bool:
        self.frames.append(encode(cmd))
        return True

    def send_frame(self, frame: bytes) -> bool:
        self.frames.append(frame)
        return True

    def peer_gone(self) -> bool:
        return False


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    root: Path = tmp_path_factory.mktemp("plain")
    with EmbeddedCluster(root / "data", namesrv_port=0, topics={"T": 4}) as cluster:
        with Wire(cluster.broker_addrs["broker-a"]) as w:
            for i in range(MESSAGES):
                assert send_msg(w, "T", f"m{i}".encode(), queue_id=0, tags=TAGS[i % 3]).code == 0
        yield cluster.brokers["broker-a"]


def frame_of(ext: dict[str, Any], *, code: int = RequestCode.PULL_MESSAGE, flag: int = 0,
             serialize_type: int = 0, opaque: int = 7) -> bytes:
    """A pull request's frame without its length prefix, as a broker's reader hands it out."""
    return encode(req(code, ext, flag=flag, serialize_type=serialize_type).with_opaque(opaque))[4:]


def raw_frame(header: bytes, body: bytes = b"") -> bytes:
    return struct.pack(">I", len(header)) + header + body


def pull_ext(**over: Any) -> dict[str, Any]:
    ext: dict[str, Any] = {"consumerGroup": "g", "topic": "T", "queueId": 0, "queueOffset": 0, "maxMsgNums": 32,
                           "sysFlag": 4, "commitOffset": 0, "suspendTimeoutMillis": 0, "subVersion": 0,
                           "subscription": "*", "expressionType": "TAG"}
    ext.update(over)
    return {k: v for k, v in ext.items() if v is not None}


def both(broker: Broker, frame: bytes) -> tuple[bytes | None, bytes | None]:
    """(the shortcut's answer or None when it declined, the general path's answer or None)."""
    plain = Conn()
    answered = answer_plain_pull(broker, plain, frame)
    assert answered == bool(plain.frames) and len(plain.frames) <= 1
    general = answer_request(broker, Call(decode_frame(frame), Conn()), HANDLERS)  # type: ignore[arg-type]
    return (plain.frames[0] if answered else None), (encode(general) if general is not None else None)


@pytest.mark.parametrize("over", [
    {},                                                   # FOUND, the whole queue
    {"queueOffset": 17, "maxMsgNums": 5},
    {"maxMsgNums": 1},
    {"maxMsgNums": 500},                                  # capped by the broker's 32
    {"queueOffset": MESSAGES},                            # OFFSET_OVERFLOW_ONE, no long poll asked
    {"queueOffset": MESSAGES + 9},                        # OFFSET_OVERFLOW_BADLY
    {"queueId": 1},                                       # NO_MESSAGE_IN_QUEUE
    {"queueId": 1, "queueOffset": 3},
    {"subscription": "TagB"},                             # filtered on the tag codes
    {"subscription": "TagA || TagC", "queueOffset": 4},
    {"subscription": "Nope"},                             # NO_MATCHED_MESSAGE
    {"subscription": ""},
    {"expressionType": None},                             # TAG by default
    {"expressionType": "tag"},
    {"subVersion": None},
    {"sysFlag": 4 | 16},                                  # LITE_PULL
    {"queueOffset": 39, "sysFlag": 4 | 2, "suspendTimeoutMillis": 1000},  # found: no hold
])
def test_the_shortcut_answers_like_the_general_path(broker: Broker, over: dict[str, Any]) -> None:
    plain, general = both(broker, frame_of(pull_ext(**over)))
    assert plain is not None, "the shortcut declined a plain pull"
    assert plain == general


def test_lite_pull_and_its_opaque(broker: Broker) -> None:
    plain, general = both(broker, frame_of(pull_ext(), code=RequestCode.LITE_PULL_MESSAGE, opaque=2**31 - 1))
    assert plain is not None and plain == general
    assert decode_frame(plain[4:]).opaque == 2**31 - 1


def test_the_commit_offset_flag_stores_the_offset(broker: Broker) -> None:
    assert answer_plain_pull(broker, Conn(), frame_of(pull_ext(consumerGroup="cg", sysFlag=4 | 1, commitOffset=12)))
    assert broker.offsets.query("cg", "T", 0) == 12


def test_the_shortcut_counts_like_the_general_path(broker: Broker) -> None:
    group = "counted"
    assert answer_plain_pull(broker, Conn(), frame_of(pull_ext(consumerGroup=group, maxMsgNums=10)))
    assert broker.groups.get(group) is not None           # created on first pull, as Apache does
    assert broker.stats.group_get_tps(group, "T") == pytest.approx(10 / 60)


GENERAL_ONLY = {
    "held for long polling": frame_of(pull_ext(queueOffset=MESSAGES, sysFlag=4 | 2, suspendTimeoutMillis=1)),
    "the group's subscription": frame_of(pull_ext(sysFlag=0)),
    "SQL92": frame_of(pull_ext(expressionType="SQL92", subscription="a > 1")),
    "no such topic": frame_of(pull_ext(topic="Nope")),
    "queue id out of range": frame_of(pull_ext(queueId=4)),
    "negative queue id": frame_of(pull_ext(queueId=-1)),
    "ROCKETMQ serialization": frame_of(pull_ext(), serialize_type=1),
    "oneway": frame_of(pull_ext(), flag=2),
    "a required field missing": frame_of(pull_ext(queueOffset=None)),
    "a field that is no number": frame_of(pull_ext(maxMsgNums="lots")),
    "an empty number": frame_of(pull_ext(commitOffset="")),
    "numbers as JSON numbers": raw_frame(json.dumps(
        {"code": 11, "extFields": {**pull_ext(), "queueOffset": 3}, "flag": 0, "opaque": 1}).encode()),
    "a float": raw_frame(json.dumps(
        {"code": 11, "extFields": {**pull_ext(), "queueOffset": 3.0}, "flag": 0, "opaque": 1}).encode()),
    "a body": raw_frame(json.dumps({"code": 11, "extFields": pull_ext(), "flag": 0, "opaque": 1}).encode(), b"x"),
    "spaced JSON": raw_frame(json.dumps({"code": 11, "extFields": pull_ext(), "flag": 0, "opaque": 1},
                                        indent=1).encode()),
    "another request": frame_of(pull_ext(), code=RequestCode.GET_MAX_OFFSET),
}


@pytest.mark.parametrize("what", list(GENERAL_ONLY))
def test_what_the_shortcut_leaves_to_the_general_path(broker: Broker, what: str) -> None:
    plain, _general = both(broker, GENERAL_ONLY[what])
    assert plain is None


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(queue_id=st.integers(-1, 4), offset=st.integers(-2, MESSAGES + 3), max_nums=st.integers(-1, 40),
       sys_flag=st.integers(0, 31), subscription=st.sampled_from(["*", "", "TagA", "TagB || TagC", " TagC ", "x"]),
       expression_type=st.sampled_from([None, "TAG", "Tag", "SQL92"]), code=st.sampled_from([11, 361]))
def test_any_pull_is_answered_alike(broker: Broker, queue_id: int, offset: int, max_nums: int, sys_flag: int,
                                    subscription: str, expression_type: str | None, code: int) -> None:
    frame = frame_of(pull_ext(queueId=queue_id, queueOffset=offset, maxMsgNums=max_nums, sysFlag=sys_flag & ~1,
                              subscription=subscription, expressionType=expression_type), code=code)
    plain, general = both(broker, frame)
    if plain is not None:
        assert plain == general


def test_a_real_read_takes_the_shortcut(broker: Broker, monkeypatch: pytest.MonkeyPatch) -> None:
    """Over TCP, a pull of the wire client is answered by the shortcut, and reads the same."""
    import rocketmq_spark.embedded.broker as broker_module

    taken: list[bool] = []

    def counted(b: Broker, conn: Any, frame: bytes) -> bool:
        taken.append(answer_plain_pull(b, conn, frame))
        return taken[-1]

    monkeypatch.setattr(broker_module, "answer_plain_pull", counted)
    with Wire(broker.addr) as w:
        ans = pull(w, "g", "T", 0, 30)
    assert taken == [True]
    assert (ans.code, ans.remark, ans.ext["nextBeginOffset"]) == (0, "FOUND", str(MESSAGES))


def test_a_frame_handler_that_fails_leaves_the_frame_to_the_handler() -> None:
    """The server offers each frame to its frame handler first; one that answers keeps the
    frame, one that declines or fails leaves it to the request handler, in order."""
    seen: list[str] = []

    def frames(conn: Connection, frame: bytes) -> bool:
        cmd = decode_frame(frame)
        if cmd.ext["n"] == "1":
            seen.append("frame handler answered 1")
            conn.send(response_to(cmd, 0, remark="shortcut", version=1))
            return True
        if cmd.ext["n"] == "2":
            raise RuntimeError("a bug in the shortcut")
        return False

    def handler(conn: Connection, cmd: RemotingCommand) -> None:
        seen.append(f"handler answered {cmd.ext['n']}")
        conn.send(response_to(cmd, 0, remark="general", version=1))

    server = RemotingServer("t", "127.0.0.1", handler, frame_handler=frames)
    server.bind(0)
    server.start()
    try:
        with Wire(f"127.0.0.1:{server.port}") as w:
            remarks = [w.request(req(RequestCode.GET_MAX_OFFSET, {"n": n})).remark for n in (1, 2, 3)]
    finally:
        server.stop()
    assert remarks == ["shortcut", "general", "general"]
    assert seen == ["frame handler answered 1", "handler answered 2", "handler answered 3"]
