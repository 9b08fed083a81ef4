"""SQL92 subscriptions: the requests recorded against Apache 5.5.0 (enablePropertyFilter=true)
and 4.9.7 (its default, the filter off) by ``tests/apache/record_sql92.py``
(vectors/apache-broker-sql92) replayed against embedded brokers set alike, holding the same
messages; the answers must agree: code, remark, next begin offset
and the messages delivered. The two differences are in docs/compatibility.md: for a
selector that does not compile, CHECK_CLIENT_CONFIG's remark (Apache's is its parser's
exception text) and a pull (Apache answers with every message, the embedded broker
refuses it).
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest

from rocketmq_spark.embedded import EmbeddedCluster
from tests.apache.record_sql92 import answer_of, fill
from tests.embedded.wire import Wire, replay
from tests.vectors import sql92_vectors

V = sql92_vectors()
REMARK_DIFFERS = {"sql92_check_bad"}     # code alike; remark: Apache's exception text, ours the parser's


def exchange(addr: str, frame: bytes) -> dict:
    return answer_of(replay(addr, frame))


def topics(property_filter: bool) -> set[str]:
    return {v["topic"] for v in V.values() if v["property_filter"] == property_filter}


def embedded(tmp: Path, property_filter: bool) -> Iterator[str]:
    """An embedded broker holding the recorded topics' messages, with the property filter
    as the recorded broker had it (on: 5.5.0 with enablePropertyFilter=true; off: 4.9.7's
    default)."""
    with EmbeddedCluster(tmp / "data", namesrv_port=0, enable_property_filter=property_filter) as cluster:
        addr = cluster.broker_addrs["broker-a"]
        with Wire(addr) as w:
            for topic in topics(property_filter):
                fill(w, topic)
        yield addr


@pytest.fixture(scope="module")
def filter_on(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    yield from embedded(tmp_path_factory.mktemp("sql92_on"), True)


@pytest.fixture(scope="module")
def filter_off(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    yield from embedded(tmp_path_factory.mktemp("sql92_off"), False)


def broker_for(name: str, request: pytest.FixtureRequest) -> str:
    return request.getfixturevalue("filter_on" if V[name]["property_filter"] else "filter_off")


def test_every_recording_is_replayed() -> None:
    assert {"sql92_pull_match", "sql92_pull_no_match", "sql92_pull_empty", "sql92_check_bad",
            "sql92_disabled_pull", "sql92_disabled_check"} <= set(V)


def test_a_pull_with_a_selector_that_does_not_compile(filter_on: str) -> None:
    recorded = V["sql92_pull_unparsable"]
    assert recorded["response"]["code"] == 0 and len(recorded["response"]["messages"]) == 10   # everything
    ours = exchange(filter_on, bytes.fromhex(recorded["request"]["frame_hex"]))
    assert (ours["code"], ours["remark"]) == (23, "parse the consumer's subscription failed")


@pytest.mark.parametrize("name", sorted(set(V) - {"sql92_pull_unparsable"}))
def test_embedded_answers_as_apache(name: str, request: pytest.FixtureRequest) -> None:
    recorded = V[name]["response"]
    ours = exchange(broker_for(name, request), bytes.fromhex(V[name]["request"]["frame_hex"]))
    assert ours["code"] == recorded["code"]
    if name not in REMARK_DIFFERS:
        assert ours["remark"] == recorded["remark"]
    for key in ("nextBeginOffset", "minOffset", "maxOffset"):
        assert (ours["extFields"] or {}).get(key) == (recorded["extFields"] or {}).get(key), key
    assert ours.get("messages", []) == recorded.get("messages", [])
