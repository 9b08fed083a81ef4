"""Comparing an answer of ours with a recorded Apache answer (pure logic, no sockets).

Both frames go through the same steps: ``answer_tree`` turns a frame into the shape the
recordings use (``code``, ``remark``, ``header_keys``, ``extFields`` with the JSON type
of each value, ``body`` parsed the fastjson way and ``body_syntax`` saying whether it
was strict JSON, or ``messages`` decoded, or ``body_hex``), ``normalise`` replaces
run-specific names and addresses by placeholders, and ``diff`` walks both trees and
reports every ``Difference`` by path: code, presence of extFields (absent vs ``{}``),
JSON types, list lengths, leaf values, and each header key or dict key that only one
side has, on its own path (``header_keys.remark``, ``body.table.<key>``; kind ``missing``
when only Apache has it, ``extra`` when only ours does). Paths look like the recordings'
``varies`` entries (``extFields.msgId``, ``messages[].storeTimestamp``,
``body.offsetTable.<key>.lastTimestamp``); a path is
masked when it or one of its ancestors is listed, and a masked value is still checked
for its JSON type and, unless its parent is masked too, for its presence. Remarks of error answers are free text: only their presence counts.
"""

from __future__ import annotations

import json
import re
import struct
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping

from rocketmq_spark.errors import RemoteProtocolError
from rocketmq_spark.remoting import fastjson
from rocketmq_spark.remoting.codes import SERIALIZE_JSON, RequestCode
from rocketmq_spark.remoting.command import RemotingCommand, decode
from rocketmq_spark.remoting.message import decode_message

MESSAGE_ANSWERS = {RequestCode.PULL_MESSAGE, RequestCode.LITE_PULL_MESSAGE, RequestCode.VIEW_MESSAGE_BY_ID}
STATUS_REMARK = re.compile(r"^[A-Z_]+$")  # pull remarks carry the store status: compared


@dataclass(frozen=True, order=True)
class Difference:
    path: str
    kind: str  # code | missing | extra | presence | type | count | value | answered | silent | timing
    detail: str = ""  # Apache's side != ours ("absent" where a side has nothing), or a sentence

    def __str__(self) -> str:
        return f"{self.path} [{self.kind}] {self.detail}"


def json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


# ---------------------------------------------------------------- frames -> trees

def _header(frame: bytes) -> tuple[int, bytes, bytes]:
    word = struct.unpack(">I", frame[4:8])[0]
    length = word & 0xFFFFFF
    return word >> 24, frame[8:8 + length], frame[8 + length:]


def command_tree(frame: bytes) -> dict[str, Any]:
    """Header fields of any frame (answers and pushed requests alike)."""
    cmd, _ = decode(frame)
    serialization, header, _body = _header(frame)
    if serialization == SERIALIZE_JSON:
        obj = json.loads(header)
        keys = sorted(obj)
        ext = obj.get("extFields")
    else:
        keys = sorted(["code", "extFields", "flag", "language", "opaque", "serializeTypeCurrentRPC", "version"]
                      + (["remark"] if cmd.remark else []))
        ext = dict(cmd.ext_fields or {})
    return {"code": cmd.code, "flag": cmd.flag, "opaque": cmd.opaque, "remark": cmd.remark,
            "serialization": "JSON" if serialization == SERIALIZE_JSON else "ROCKETMQ",
            "language": cmd.language, "version": cmd.version, "header_keys": keys, "extFields": ext}


def message_tree(raw: bytes) -> list[dict[str, Any]]:
    """Stored records as the recordings show them (``response.messages``)."""
    out = []
    pos = 0
    while pos < len(raw):
        size = struct.unpack_from(">i", raw, pos)[0]
        m, _ = decode_message(raw[pos:pos + size])
        out.append({
            "storeSize": size, "magicCode": f"0x{m.magic & 0xFFFFFFFF:08X}", "bodyCRC": m.body_crc,
            "queueId": m.queue_id, "flag": m.flag, "queueOffset": m.queue_offset,
            "commitLogOffset": m.commit_log_offset, "sysFlag": m.sys_flag, "bornTimestamp": m.born_timestamp,
            "bornHost": str(m.born_host), "storeTimestamp": m.store_timestamp, "storeHost": str(m.store_host),
            "reconsumeTimes": m.reconsume_times, "preparedTransactionOffset": m.prepared_transaction_offset,
            "bodyLength": len(m.body), "topic": m.topic, "properties": dict(m.properties),
            "body_hex": m.body.hex()})
        pos += size
    return out


def answer_tree(frame: bytes | None, request_code: int) -> dict[str, Any] | None:
    """The comparable form of an answer frame (None = no answer)."""
    if frame is None:
        return None
    tree = command_tree(frame)
    body = _header(frame)[2]
    if not body:
        return tree
    if request_code in MESSAGE_ANSWERS and tree["code"] == 0:
        tree["messages"] = message_tree(body)
        tree["body_hex"] = body.hex()
        return tree
    try:
        tree["body"] = fastjson.loads(body)
    except RemoteProtocolError:
        tree["body_hex"] = body.hex()
        return tree
    try:  # fastjson writes non-string map keys bare ({0:"addr"}): not strict JSON
        json.loads(body)
        tree["body_syntax"] = "json"
    except ValueError:
        tree["body_syntax"] = "fastjson"
    return tree


def pushed_trees(frames: Iterable[bytes]) -> list[dict[str, Any]]:
    """Requests the server pushed, with their bodies: CHECK_TRANSACTION_STATE carries the
    half message in store format (``messages``), any other body is kept as ``body_hex``."""
    out = []
    for frame in frames:
        tree = command_tree(frame)
        body = _header(frame)[2]
        if body:
            key = "messages" if tree["code"] == RequestCode.CHECK_TRANSACTION_STATE else "body_hex"
            tree[key] = message_tree(body) if key == "messages" else body.hex()
        out.append(tree)
    return out


# ---------------------------------------------------------------- normalising

def normalise(value: Any, replacements: Mapping[str, str]) -> Any:
    """``value`` with every occurrence of each key (names, addresses) replaced, in keys too."""
    if isinstance(value, str):
        for old, new in replacements.items():
            value = value.replace(old, new)
        return value
    if isinstance(value, dict):
        return {normalise(k, replacements): normalise(v, replacements) for k, v in value.items()}
    if isinstance(value, list):
        return [normalise(v, replacements) for v in value]
    return value


# ---------------------------------------------------------------- diffing

def _masked(path: str, masks: frozenset[str]) -> bool:
    if path in masks:
        return True
    return any(path.startswith(m + ".") or path.startswith(m + "[") for m in masks)


def _child(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def diff(theirs: Any, ours: Any, masks: Iterable[str] = ()) -> list[Difference]:
    """Every difference between two answer trees (``None`` = no answer)."""
    mask = frozenset(masks)
    if theirs is None or ours is None:
        if theirs is None and ours is None:
            return []
        if theirs is None:
            return [Difference("response", "answered", f"absent != {_answer(ours)}")]
        return [Difference("response", "silent", f"{_answer(theirs)} != absent")]
    out: list[Difference] = []
    if theirs["code"] != ours["code"] and not _masked("code", mask):
        out.append(Difference("code", "code", f"{theirs['code']} != {ours['code']}"))
    for key in ("flag", "serialization", "language", "version", "opaque"):
        _leaf(key, theirs.get(key), ours.get(key), mask, out)
    _keys("header_keys", dict.fromkeys(theirs["header_keys"]), dict.fromkeys(ours["header_keys"]), mask, out,
          show=lambda _: "present")
    remark = theirs.get("remark")
    if remark is not None and (theirs["code"] == 0 or STATUS_REMARK.match(remark)):
        _leaf("remark", remark, ours.get("remark"), mask, out)
    te, oe = theirs.get("extFields"), ours.get("extFields")
    if (te is None) != (oe is None):
        if not _masked("extFields", mask):
            out.append(Difference("extFields", "presence", f"Apache {'absent' if te is None else '{...}'}, "
                                                           f"ours {'absent' if oe is None else '{...}'}"))
    elif te is not None:
        _walk("extFields", te, oe, mask, out)
    for key in ("body_syntax",):
        if key in theirs and key in ours:
            _leaf(key, theirs[key], ours[key], mask, out)
    for key in ("body", "messages", "body_hex"):
        if key in theirs or key in ours:
            if (key in theirs) != (key in ours):
                if not _masked(key, mask):
                    out.append(Difference(key, "presence", "Apache has it" if key in theirs else "only ours has it"))
            else:
                _walk(key, theirs[key], ours[key], mask, out)
    return sorted(set(out))


def _leaf(path: str, a: Any, b: Any, mask: frozenset[str], out: list[Difference]) -> None:
    if json_type(a) != json_type(b):
        out.append(Difference(path, "type", f"{json_type(a)} != {json_type(b)}"))
    elif a != b and not _masked(path, mask):
        out.append(Difference(path, "value", f"{_short(a)} != {_short(b)}"))


def _keys(path: str, a: Mapping[str, Any], b: Mapping[str, Any], mask: frozenset[str], out: list[Difference],
          show: Callable[[Any], str] | None = None) -> None:
    """A ``missing`` or ``extra`` difference for each key only one side has, on the key's own path.

    Masking a key masks its value, not its presence: only a masked parent hides a key."""
    if _masked(path, mask) or (path == "header_keys" and _masked("header_keys[]", mask)):
        return
    show = show or _short
    for k in sorted(set(a) ^ set(b)):
        child = _child(path, k)
        if k in a:
            out.append(Difference(child, "missing", f"{show(a[k])} != absent"))
        else:
            out.append(Difference(child, "extra", f"absent != {show(b[k])}"))


def _walk(path: str, a: Any, b: Any, mask: frozenset[str], out: list[Difference]) -> None:
    if json_type(a) != json_type(b):
        out.append(Difference(path, "type", f"{json_type(a)} != {json_type(b)}"))
        return
    if _masked(path, mask) and not isinstance(a, (dict, list)):
        return
    if isinstance(a, dict):
        _keys(path, a, b, mask, out)
        for k in sorted(set(a) & set(b)):
            _walk(_child(path, k), a[k], b[k], mask, out)
    elif isinstance(a, list):
        if len(a) != len(b):
            if not _masked(path, mask):
                out.append(Difference(path, "count", f"{len(a)} != {len(b)} elements"))
            return
        for x, y in zip(a, b):
            _walk(path + "[]", x, y, mask, out)
    elif a != b:
        out.append(Difference(path, "value", f"{_short(a)} != {_short(b)}"))


def _answer(tree: Mapping[str, Any]) -> str:
    """An answer in a detail: its code and remark."""
    return f"code {tree['code']} remark {_short(tree.get('remark'))}"


def _short(value: Any, limit: int = 80) -> str:
    text = json.dumps(value) if not isinstance(value, str) else repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def push_diff(theirs: list[dict[str, Any]], ours: list[dict[str, Any]]) -> list[Difference]:
    """Requests the server pushed on the connection while the exchange was answered."""
    if len(theirs) != len(ours):
        return [Difference("server_requests_seen", "count", f"{len(theirs)} != {len(ours)} pushed requests")]
    out: list[Difference] = []
    for a, b in zip(theirs, ours):
        for d in diff(a, b, {"opaque"}):
            out.append(Difference(f"server_requests_seen[].{d.path}", d.kind, d.detail))
    return sorted(set(out))


def recorded_command(frame_hex: str) -> RemotingCommand:
    return decode(bytes.fromhex(frame_hex))[0]
