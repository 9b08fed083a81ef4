"""A tiny remoting client for the embedded-broker tests: raw sockets + the codec only.

``Wire(addr)`` is one TCP connection with a reader thread: ``request`` sends a command
and waits for the answer with its opaque; requests the server pushes (e.g.
NOTIFY_CONSUMER_IDS_CHANGED) are collected in ``pushed``. ``call(addr, cmd)`` does one
request on a fresh connection, ``replay(addr, frame)`` one recorded frame as it is. The helpers below build the requests the tests need.
"""

from __future__ import annotations

import itertools
import json
import socket
import threading
import time
from typing import Any, Callable, Mapping

from rocketmq_spark.remoting.codes import RequestCode
from rocketmq_spark.remoting.command import FrameDecoder, RemotingCommand, decode, encode
from rocketmq_spark.remoting.message import MessageExt, decode_messages, encode_properties

_opaques = itertools.count(1)


def req(code: int, ext: Mapping[str, Any] | None = None, body: bytes = b"", *, flag: int = 0,
        version: int = 413, language: str = "PYTHON", serialize_type: int = 0) -> RemotingCommand:
    return RemotingCommand(code=int(code), flag=flag, body=body, language=language, version=version,
                           serialize_type=serialize_type,
                           ext_fields={k: str(v) for k, v in ext.items()} if ext is not None else None)


class Wire:
    def __init__(self, addr: str, timeout: float = 5.0) -> None:
        host, _, port = addr.rpartition(":")
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.sock.settimeout(None)
        self.timeout = timeout
        self.pushed: list[RemotingCommand] = []
        self._answers: dict[int, RemotingCommand] = {}
        self._cond = threading.Condition()
        self.closed = False
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        dec = FrameDecoder()
        try:
            while True:
                data = self.sock.recv(1 << 16)
                if not data:
                    break
                dec.feed(data)
                for cmd in dec:
                    with self._cond:
                        if cmd.is_response:
                            self._answers[cmd.opaque] = cmd
                        else:
                            self.pushed.append(cmd)
                        self._cond.notify_all()
        except OSError:
            pass
        with self._cond:
            self.closed = True
            self._cond.notify_all()

    def send(self, cmd: RemotingCommand) -> int:
        opaque = next(_opaques)
        self.sock.sendall(encode(cmd.with_opaque(opaque)))
        return opaque

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def answer(self, opaque: int, timeout: float | None = None) -> RemotingCommand:
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        with self._cond:
            while opaque not in self._answers:
                left = deadline - time.monotonic()
                if left <= 0 or self.closed:
                    raise TimeoutError(f"no answer to opaque {opaque}" + (" (connection closed)" if self.closed else ""))
                self._cond.wait(left)
            return self._answers.pop(opaque)

    def has_answer(self, opaque: int) -> bool:
        with self._cond:
            return opaque in self._answers

    def request(self, cmd: RemotingCommand, timeout: float | None = None) -> RemotingCommand:
        return self.answer(self.send(cmd), timeout)

    def wait_pushed(self, pred: Callable[[RemotingCommand], bool], timeout: float = 5.0) -> RemotingCommand:
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                for cmd in self.pushed:
                    if pred(cmd):
                        return cmd
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError("no matching request from the server")
                self._cond.wait(left)

    def wait_closed(self, timeout: float = 5.0) -> bool:
        deadline = time.monotonic() + timeout
        with self._cond:
            while not self.closed and time.monotonic() < deadline:
                self._cond.wait(deadline - time.monotonic())
            return self.closed

    def close(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
        self._thread.join(2)

    def __enter__(self) -> "Wire":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def call(addr: str, cmd: RemotingCommand, timeout: float = 5.0) -> RemotingCommand:
    with Wire(addr, timeout) as w:
        return w.request(cmd)


def replay(addr: str, frame: bytes, timeout: float = 10.0) -> RemotingCommand:
    """A recorded request frame sent byte for byte on a fresh connection; its answer (the one
    with the frame's own opaque)."""
    with Wire(addr, timeout) as w:
        w.send_raw(frame)
        return w.answer(decode(frame)[0].opaque)


# ---------------------------------------------------------------- request builders

def send_msg(w: Wire, topic: str, body: bytes, *, queue_id: int = 0, tags: str | None = None,
             keys: str | None = None, props: Mapping[str, str] | None = None, group: str = "pg",
             code: int = RequestCode.SEND_MESSAGE_V2, sys_flag: int = 0, wait: bool = True,
             extra: Mapping[str, Any] | None = None, uniq: bool = True) -> RemotingCommand:
    p: dict[str, str] = {}
    if keys:
        p["KEYS"] = keys
    if uniq:
        p["UNIQ_KEY"] = f"{next(_opaques):032X}"
    p["WAIT"] = "true" if wait else "false"
    if tags:
        p["TAGS"] = tags
    p.update(props or {})
    v1 = {"producerGroup": group, "topic": topic, "defaultTopic": "TBW102", "defaultTopicQueueNums": 4,
          "queueId": queue_id, "sysFlag": sys_flag, "bornTimestamp": int(time.time() * 1000), "flag": 0,
          "properties": encode_properties(p), "reconsumeTimes": 0, "unitMode": "false", "batch": "false"}
    v1.update(extra or {})
    if code == RequestCode.SEND_MESSAGE:
        return w.request(req(code, v1, body))
    keys2 = dict(zip(["producerGroup", "topic", "defaultTopic", "defaultTopicQueueNums", "queueId", "sysFlag",
                      "bornTimestamp", "flag", "properties", "reconsumeTimes", "unitMode", "maxReconsumeTimes",
                      "batch"], "abcdefghijklm"))
    return w.request(req(code, {keys2[k]: v for k, v in v1.items()}, body))


def pull(w: Wire, group: str, topic: str, queue_id: int, offset: int, *, max_nums: int = 32,
         sys_flag: int = 4, subscription: str | None = "*", suspend_ms: int = 0, commit_offset: int = 0,
         sub_version: int = 0, timeout: float | None = None, send_only: bool = False,
         expression_type: str = "TAG") -> Any:
    ext: dict[str, Any] = {"consumerGroup": group, "topic": topic, "queueId": queue_id, "queueOffset": offset,
                           "maxMsgNums": max_nums, "sysFlag": sys_flag, "commitOffset": commit_offset,
                           "suspendTimeoutMillis": suspend_ms, "subVersion": sub_version}
    if subscription is not None:
        ext["subscription"] = subscription
        ext["expressionType"] = expression_type
    cmd = req(RequestCode.PULL_MESSAGE, ext)
    return w.send(cmd) if send_only else w.request(cmd, timeout)


def messages(answer: RemotingCommand) -> list[MessageExt]:
    return decode_messages(answer.body)


def offset_call(w: Wire, code: int, topic: str, queue_id: int, **more: Any) -> RemotingCommand:
    return w.request(req(code, {"topic": topic, "queueId": queue_id, **more}))


def max_offset(w: Wire, topic: str, queue_id: int) -> int:
    return int(offset_call(w, RequestCode.GET_MAX_OFFSET, topic, queue_id).ext["offset"])


def heartbeat(w: Wire, client_id: str, group: str | None = None, topics: Mapping[str, str] | None = None, *,
              model: str = "CLUSTERING", producer_group: str | None = None, sub_version: int = 1,
              expression_type: str = "TAG") -> RemotingCommand:
    consumers = []
    if group is not None:
        subs = [{"classFilterMode": False, "codeSet": [], "expressionType": expression_type, "subString": expr,
                 "subVersion": sub_version, "tagsSet": [], "topic": t} for t, expr in (topics or {}).items()]
        consumers.append({"consumeFromWhere": "CONSUME_FROM_LAST_OFFSET", "consumeType": "CONSUME_ACTIVELY",
                          "groupName": group, "messageModel": model, "subscriptionDataSet": subs,
                          "unitMode": False})
    body = {"clientID": client_id, "consumerDataSet": consumers,
            "producerDataSet": [{"groupName": producer_group}] if producer_group else []}
    return w.request(req(RequestCode.HEART_BEAT, None, json.dumps(body).encode()))


def lock_body(group: str, client_id: str, mqs: list[tuple[str, str, int]]) -> bytes:
    return json.dumps({"consumerGroup": group, "clientId": client_id,
                       "mqSet": [{"topic": t, "brokerName": b, "queueId": q} for t, b, q in mqs]}).encode()


def wait_for(pred: Callable[[], Any], timeout: float = 5.0, interval: float = 0.01) -> Any:
    """Poll ``pred`` until it returns something truthy (a condition wait, not a fixed sleep)."""
    deadline = time.monotonic() + timeout
    while True:
        value = pred()
        if value or time.monotonic() >= deadline:
            return value
        time.sleep(interval)
