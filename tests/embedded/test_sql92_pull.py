"""PULL_MESSAGE with a SQL92 subscription over TCP: the embedded broker filters by message
properties (rocketmq_spark/embedded/sql92.py), skips what does not match as it skips
tag-filtered entries, and refuses what Apache refuses with Apache's code and remark."""

from __future__ import annotations

import json
from pathlib import Path

from rocketmq_spark.embedded import EmbeddedCluster
from rocketmq_spark.remoting.codes import RequestCode
from tests.embedded.wire import Wire, heartbeat, messages, pull, req, send_msg, wait_for


def fill(w: Wire, n: int, qid: int = 0) -> None:
    for i in range(n):
        tags = ("TagA", "TagB")[i % 2]
        assert send_msg(w, "T", f"m{i}".encode(), queue_id=qid, tags=tags, props={"n": str(i)}).code == 0


def test_sql92_pull_returns_the_matching_messages_and_moves_past_the_rest(wire: Wire) -> None:
    fill(wire, 8)
    ans = pull(wire, "g", "T", 0, 0, subscription="n >= 3 AND TAGS = 'TagA'", expression_type="SQL92")
    assert (ans.code, ans.remark) == (0, "FOUND")
    assert [m.body for m in messages(ans)] == [b"m4", b"m6"]
    assert ans.ext["nextBeginOffset"] == "8"


def test_nothing_matching_answers_retry_immediately_past_the_filtered(wire: Wire) -> None:
    fill(wire, 4)
    ans = pull(wire, "g", "T", 0, 0, subscription="n > 100", expression_type="SQL92")
    assert (ans.code, ans.remark, ans.ext["nextBeginOffset"]) == (20, "NO_MATCHED_MESSAGE", "4")


def test_a_bad_expression_is_refused(wire: Wire) -> None:
    fill(wire, 1)
    ans = pull(wire, "g", "T", 0, 0, subscription="n >", expression_type="SQL92")
    assert (ans.code, ans.remark) == (23, "parse the consumer's subscription failed")


def test_property_filter_disabled_refuses_sql92(tmp_path: Path) -> None:
    with EmbeddedCluster(tmp_path / "data", namesrv_port=0, topics={"T": 4},
                         enable_property_filter=False) as c, Wire(c.broker_addrs["broker-a"]) as w:
        fill(w, 2)
        ans = pull(w, "g", "T", 0, 0, subscription="n > 0", expression_type="SQL92")
        assert (ans.code, ans.remark) == (1, "The broker does not support consumer to filter message by SQL92")
        assert pull(w, "g", "T", 0, 0).code == 0          # tags still work


def test_sql92_subscription_from_the_heartbeat(wire: Wire) -> None:
    fill(wire, 4)
    heartbeat(wire, "127.0.0.1@c", "hb", {"T": "n IN ('1', '2')"}, expression_type="SQL92")
    ans = pull(wire, "hb", "T", 0, 0, sys_flag=0, subscription=None, sub_version=1)
    assert ans.code == 0 and [m.body for m in messages(ans)] == [b"m1", b"m2"]


def test_long_poll_with_sql92_answers_once_a_match_arrives(cluster: EmbeddedCluster, wire: Wire,
                                                           broker_addr: str) -> None:
    opaque = pull(wire, "g", "T", 2, 0, sys_flag=6, subscription="n = 7", expression_type="SQL92",
                  suspend_ms=20_000, send_only=True)
    assert wait_for(lambda: cluster.brokers["broker-a"].long_poll.held_count() == 1)
    with Wire(broker_addr) as other:
        assert send_msg(other, "T", b"x", queue_id=2, props={"n": "1"}).code == 0
        assert send_msg(other, "T", b"y", queue_id=2, props={"n": "7"}).code == 0
    ans = wire.answer(opaque, timeout=10)
    assert ans.code in (0, 20)
    # answered at the first arrival, maybe before the match was stored; a pull from where
    # it left off finds the match
    nxt = int(ans.ext["nextBeginOffset"])
    found = [m.body for m in messages(ans)] if ans.code == 0 else \
        [m.body for m in messages(pull(wire, "g", "T", 2, nxt, subscription="n = 7", expression_type="SQL92"))]
    assert found == [b"y"]


def check_client_config(w: Wire, expression: str, expression_type: str = "SQL92") -> tuple[int, str | None]:
    body = json.dumps({"clientId": "127.0.0.1@c", "group": "g", "subscriptionData": {
        "classFilterMode": False, "codeSet": [], "expressionType": expression_type, "subString": expression,
        "subVersion": 1, "tagsSet": [], "topic": "T"}}).encode()
    ans = w.request(req(RequestCode.CHECK_CLIENT_CONFIG, None, body))
    return ans.code, ans.remark


def test_check_client_config_answers_as_apache(wire: Wire, tmp_path: Path) -> None:
    assert check_client_config(wire, "n > 1") == (0, None)
    assert check_client_config(wire, "TagA", "TAG") == (0, None)
    code, remark = check_client_config(wire, "n >")
    assert code == 23 and remark and remark.startswith("Invalid MessageSelector.")
    assert check_client_config(wire, "")[0] == 23
    with EmbeddedCluster(tmp_path / "own", namesrv_port=0, enable_property_filter=False) as c, \
            Wire(c.broker_addrs["broker-a"]) as w:
        assert check_client_config(w, "n > 1") == (1, "The broker does not support consumer to filter message by SQL92")
        assert check_client_config(w, "TagA", "TAG") == (0, None)
