"""QUERY_MESSAGE: the requests recorded against Apache 4.9.7 and 5.5.0 by
``tests/apache/record_query.py`` (vectors/apache-broker-query) replayed against an embedded
broker holding the same messages; the answers must agree: code, remark, the records
(body, queue offset, KEYS, UNIQ_KEY, in Apache's order) and the ext field names. The index's
last update (time, commit-log offset) is this broker's own; Apache says 0 and 0 when it
finds nothing, and so must we.
"""

from __future__ import annotations

from typing import Iterator

import pytest

from rocketmq_spark.embedded import EmbeddedCluster
from tests.apache.record_query import answer_of, fill
from tests.embedded.wire import Wire, replay
from tests.vectors import query_vectors

V = query_vectors()


def exchange(addr: str, frame: bytes) -> dict:
    return answer_of(replay(addr, frame))


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with EmbeddedCluster(tmp_path_factory.mktemp("query") / "data", namesrv_port=0) as cluster:
        addr = cluster.broker_addrs["broker-a"]
        with Wire(addr) as w:
            for topic in sorted({v["topic"] for v in V.values()}):
                fill(w, topic)
        yield addr


def test_both_releases_were_recorded() -> None:
    assert {n.split("/")[0] for n in V} == {"4.9.7", "5.5.0"}
    assert {n.split("/")[1] for n in V} == {"query_by_key", "query_by_key_max_num", "query_by_second_key",
                                             "query_by_unique_key", "query_not_found"}


@pytest.mark.parametrize("name", sorted(V))
def test_embedded_answers_as_apache(name: str, broker: str) -> None:
    recorded = V[name]["response"]
    ours = exchange(broker, bytes.fromhex(V[name]["request"]["frame_hex"]))
    assert (ours["code"], ours["remark"]) == (recorded["code"], recorded["remark"])
    assert ours.get("messages", []) == recorded.get("messages", [])
    assert set(ours["extFields"] or {}) == set(recorded["extFields"] or {})
    if recorded["code"] != 0:
        assert ours["extFields"] == recorded["extFields"]
