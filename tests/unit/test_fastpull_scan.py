"""The compiled pulls' header scanner (client/_fastpull.c ``scan``) reads what json.loads
reads: every JSON answer Apache 4.9.8, 5.1.3 and 5.5.0 gave in the recordings, and generated
headers with any key order, spacing, nesting and escapes; what it cannot read it says so
(None: the Python path reads that answer), never a wrong value."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rocketmq_spark.client import direct
from tests.vectors import broker_vectors, txn_broker_vectors



def scan(header: bytes) -> tuple[int, int, int, int] | None:
    assert direct._compiled is not None, "pip install . did not build rocketmq_spark/client/_fastpull.c"
    return direct._compiled.scan(header)


def expected(header: dict[str, Any]) -> tuple[int, int, int, int]:
    ext = header.get("extFields") or {}
    return (int(header["code"]), int(header.get("flag", 0)), int(header["opaque"]),
            int(ext["nextBeginOffset"]) if "nextBeginOffset" in ext else -1)


def recorded_headers() -> list[tuple[str, str]]:
    found = []
    txn = {f"txn-{release}/{k}": x for release, vs in txn_broker_vectors().items() for k, x in vs.items()}
    for name, v in {**broker_vectors(), **txn}.items():
        for side in ("request", "response"):
            text = (v.get(side) or {}).get("header_text")
            if isinstance(text, str) and text.startswith("{"):
                found.append((f"{name}:{side}", text))
    return found


def test_every_recorded_json_header_is_read_as_json_reads_it() -> None:
    headers = recorded_headers()
    assert len(headers) > 500
    pulls = 0
    for name, text in headers:
        obj = json.loads(text)
        if "flag" not in obj:
            continue
        assert scan(text.encode()) == expected(obj), name
        pulls += "nextBeginOffset" in (obj.get("extFields") or {})
    assert pulls > 20                            # pull answers among them


_plain_keys = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E, exclude_characters='"\\'),
                      max_size=20)
_scalars = st.one_of(st.none(), st.booleans(), st.integers(-10**15, 10**15),
                     st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=20))
_values = st.recursive(_scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                         st.dictionaries(st.text(max_size=8), inner, max_size=4)),
                       max_leaves=10)
_ints = st.integers(-(10**18 - 1), 10**18 - 1)    # 19 digits and more: left to Python


@st.composite
def headers(draw: st.DrawFn) -> dict[str, Any]:
    ext = draw(st.dictionaries(_plain_keys.filter(lambda k: k != "nextBeginOffset"), st.text(max_size=12),
                               max_size=5))
    if draw(st.booleans()):
        nxt = draw(_ints)
        ext["nextBeginOffset"] = str(nxt) if draw(st.booleans()) else nxt
    items = {"code": draw(_ints), "flag": draw(st.integers(0, 3)), "opaque": draw(_ints),
             "extFields": ext if draw(st.booleans()) else None,
             **draw(st.dictionaries(_plain_keys.filter(lambda k: k not in ("code", "flag", "opaque", "extFields")),
                                    _values, max_size=4))}
    keys = draw(st.permutations(list(items)))
    return {k: items[k] for k in keys}


@settings(max_examples=400, deadline=None)
@given(headers(), st.sampled_from([(",", ":"), (", ", ": "), (" ,\n", " :\t")]), st.booleans())
def test_generated_headers_are_read_as_json_reads_them(header: dict[str, Any], seps: tuple[str, str],
                                                       ascii_only: bool) -> None:
    text = json.dumps(header, separators=seps, ensure_ascii=ascii_only).encode()
    assert scan(text) == expected(header)


@pytest.mark.parametrize("text", [
    b"", b"{", b"[]", b'{"code":0,"flag":1}', b'{"code":0.5,"flag":1,"opaque":1}',
    b'{"code":0,"flag":1,"opaque":1,"extFields":{"nextBeginOffset":"12x"}}',
    b'{"code":0,"flag":1,"opaque":"","extFields":{}}', b'{"code":0,"flag":1,"opaque":1,"remark":"unterminated}',
    b'{"co\\u0064e":0,"flag":1,"opaque":1}', b'{"code":0,"flag":1,"opaque":12345678901234567890}',
])
def test_what_it_cannot_read_it_leaves_to_python(text: bytes) -> None:
    assert scan(text) is None
