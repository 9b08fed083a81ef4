"""Recording a real Apache broker's answers to SQL92 subscriptions.

``python -m tests.apache.record_sql92 --broker HOST:PORT --out DIR`` against the master of
``broker-a`` of a cluster started with ``scripts/apache-cluster start 5.5.0 --dir ...
--broker-config enablePropertyFilter=true`` (with ``--filter-disabled``, of one started
without it, for ``DISABLED``'s exchanges): it sends ``MESSAGES`` to queue 0 of a new
topic (auto-created by the send), then the ``EXCHANGES`` (pulls with a SQL92 subscription,
CHECK_CLIENT_CONFIG), and writes one file per exchange in the vectors' format
(tests/data/vectors/README.md): the request as sent, the answer as received with the
pulled messages decoded. ``tests/differential/test_sql92_replay.py`` replays the same
requests against the embedded broker.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from rocketmq_spark.remoting.codes import RequestCode, response_name
from rocketmq_spark.remoting.command import RemotingCommand, encode
from rocketmq_spark.remoting.message import decode_messages
from tests.embedded.wire import Wire, req, send_msg

# (tags, user properties) of the messages sent first, in order
MESSAGES: tuple[tuple[str, dict[str, str]], ...] = tuple(
    (("TagA", "TagB")[i % 2], {"n": str(i), "color": ("red", "blue", "green")[i % 3]}) for i in range(8)) + (
    ("TagC", {}),                     # no user property
    ("TagC", {"n": "abc"}),           # not a number
)

# name -> (description, kind, expression, expression type)
EXPRESSIONS: dict[str, tuple[str, str, str, str]] = {
    "sql92_pull_match": ("a pull with a SQL92 subscription: numbers, strings, TAGS, IN, AND/OR", "pull",
                         "(n >= 3 AND TAGS = 'TagA') OR color IN ('green')", "SQL92"),
    "sql92_pull_between_not": ("BETWEEN, NOT, IS NULL", "pull",
                               "n NOT BETWEEN 2 AND 5 AND NOT (color = 'red') OR n IS NULL", "SQL92"),
    "sql92_pull_no_match": ("nothing matches: NO_MATCHED_MESSAGE past the whole queue", "pull",
                            "n > 100", "SQL92"),
    "sql92_pull_unparsed_number": ("a property that does not parse as the literal's number does not match",
                                   "pull", "n < 3", "SQL92"),
    "sql92_pull_empty": ("an empty SQL92 subscription", "pull", "", "SQL92"),
    "sql92_pull_unparsable": ("a selector that does not compile: Apache delivers every message", "pull",
                              "n >", "SQL92"),
    "sql92_check_ok": ("CHECK_CLIENT_CONFIG with a selector that compiles", "check", "n > 1 AND TAGS IS NOT NULL",
                       "SQL92"),
    "sql92_check_bad": ("CHECK_CLIENT_CONFIG with a selector that does not compile", "check", "n >", "SQL92"),
    "sql92_check_tag": ("CHECK_CLIENT_CONFIG with a TAG subscription", "check", "TagA", "TAG"),
}
# recorded against a broker with the property filter off (Apache's default)
DISABLED: dict[str, tuple[str, str, str, str]] = {
    "sql92_disabled_pull": ("a SQL92 pull to a broker without enablePropertyFilter", "pull", "n > 1", "SQL92"),
    "sql92_disabled_check": ("CHECK_CLIENT_CONFIG to a broker without enablePropertyFilter", "check", "n > 1",
                             "SQL92"),
}
GROUP = "sql92_g"


def pull_command(topic: str, expression: str, expression_type: str) -> RemotingCommand:
    return req(RequestCode.PULL_MESSAGE, {
        "consumerGroup": GROUP, "topic": topic, "queueId": 0, "queueOffset": 0, "maxMsgNums": 32,
        "sysFlag": 4, "commitOffset": 0, "suspendTimeoutMillis": 0, "subVersion": 0,
        "subscription": expression, "expressionType": expression_type}).with_opaque(7)


def check_command(topic: str, expression: str, expression_type: str) -> RemotingCommand:
    body = json.dumps({"clientId": "127.0.0.1@sql92", "group": GROUP, "subscriptionData": {
        "classFilterMode": False, "codeSet": [], "expressionType": expression_type, "subString": expression,
        "subVersion": 1, "tagsSet": [], "topic": topic}}).encode()
    return req(RequestCode.CHECK_CLIENT_CONFIG, None, body).with_opaque(7)


COMMANDS = {"pull": pull_command, "check": check_command}


def fill(w: Wire, topic: str) -> None:
    for i, (tags, props) in enumerate(MESSAGES):
        ans = send_msg(w, topic, f"m{i}".encode(), queue_id=0, tags=tags, props=props)
        assert ans.code == 0, (ans.code, ans.remark)


def answer_of(cmd: RemotingCommand) -> dict[str, Any]:
    out: dict[str, Any] = {"code": cmd.code, "name": response_name(cmd.code), "remark": cmd.remark,
                           "extFields": cmd.ext_fields}
    if cmd.code == 0 and cmd.body:
        out["messages"] = [{"body": m.body.decode(), "queue_offset": m.queue_offset,
                            "properties": {k: v for k, v in m.properties.items() if k in ("TAGS", "n", "color")}}
                           for m in decode_messages(cmd.body)]
    return out


def record(broker: str, out: Path, topic: str, *, filter_disabled: bool = False) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with Wire(broker, timeout=10) as w:
        fill(w, topic)
        for name, (description, kind, expression, expression_type) in (
                DISABLED if filter_disabled else EXPRESSIONS).items():
            cmd = COMMANDS[kind](topic, expression, expression_type)
            answer = w.request(cmd)
            doc = {"name": name, "description": description, "server": "broker", "topic": topic,
                   "property_filter": not filter_disabled,
                   "request": {"code": cmd.code, "expression": expression, "expression_type": expression_type,
                               "frame_hex": encode(cmd).hex()},
                   "response": answer_of(answer)}
            (out / f"{name}.json").write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--broker", required=True, help="host:port of broker-a's master")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--topic", default=f"sql92_{time.strftime('%H%M%S')}")
    p.add_argument("--filter-disabled", action="store_true", help="the broker runs without enablePropertyFilter")
    args = p.parse_args(argv)
    record(args.broker, args.out, args.topic, filter_disabled=args.filter_disabled)


if __name__ == "__main__":
    main()
