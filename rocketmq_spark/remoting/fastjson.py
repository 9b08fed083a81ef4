"""A JSON reader tolerant of fastjson's non-string map keys.

fastjson writes ``{0:"addr"}`` for integer keys and ``{{"brokerName":..}:{..}}`` for
object keys (routes of old NameServers, cluster info, topic and consume stats, the
broker's consumerOffset.json). This reader accepts both: a bare number key becomes its
text, an object key becomes its compact JSON text with sorted keys.
"""

from __future__ import annotations

import json
import re
from typing import Any

from rocketmq_spark.errors import RemoteProtocolError

_WS = re.compile(r"[ \t\n\r]*")
_NUMBER = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?")
_decoder = json.JSONDecoder()


def loads(text: str | bytes) -> Any:
    if isinstance(text, (bytes, bytearray)):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise RemoteProtocolError(f"JSON body is not UTF-8: {exc}") from None
    try:
        return json.loads(text)
    except ValueError:
        pass
    try:
        value, pos = _value(text, _WS.match(text, 0).end())
    except (IndexError, ValueError) as exc:
        raise RemoteProtocolError(f"bad JSON body: {exc}") from None
    if _WS.match(text, pos).end() != len(text):
        raise RemoteProtocolError("trailing data after JSON body")
    return value


def key_text(value: Any) -> str:
    """How a non-string key is represented after parsing."""
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def _value(s: str, i: int) -> tuple[Any, int]:
    c = s[i]
    if c == "{":
        return _object(s, i + 1)
    if c == "[":
        return _array(s, i + 1)
    if c == '"':
        return _decoder.raw_decode(s, i)
    m = _NUMBER.match(s, i)
    if m:
        text = m.group()
        return (float(text) if any(ch in text for ch in ".eE") else int(text)), m.end()
    for word, val in (("true", True), ("false", False), ("null", None)):
        if s.startswith(word, i):
            return val, i + len(word)
    raise ValueError(f"unexpected {c!r} at {i}")


def _object(s: str, i: int) -> tuple[dict[str, Any], int]:
    out: dict[str, Any] = {}
    i = _WS.match(s, i).end()
    if s[i] == "}":
        return out, i + 1
    while True:
        i = _WS.match(s, i).end()
        key, i = _value(s, i)
        if not isinstance(key, str):
            key = key_text(key) if isinstance(key, (dict, list)) else str(key).lower() \
                if isinstance(key, bool) else str(key)
        i = _WS.match(s, i).end()
        if s[i] != ":":
            raise ValueError(f"expected ':' at {i}")
        i = _WS.match(s, i + 1).end()
        out[key], i = _value(s, i)
        i = _WS.match(s, i).end()
        if s[i] == ",":
            i += 1
            continue
        if s[i] == "}":
            return out, i + 1
        raise ValueError(f"expected ',' or '}}' at {i}")


def _array(s: str, i: int) -> tuple[list[Any], int]:
    out: list[Any] = []
    i = _WS.match(s, i).end()
    if s[i] == "]":
        return out, i + 1
    while True:
        i = _WS.match(s, i).end()
        item, i = _value(s, i)
        out.append(item)
        i = _WS.match(s, i).end()
        if s[i] == ",":
            i += 1
            continue
        if s[i] == "]":
            return out, i + 1
        raise ValueError(f"expected ',' or ']' at {i}")
