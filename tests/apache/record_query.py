"""Recording a real Apache broker's answers to QUERY_MESSAGE (the message index).

``python -m tests.apache.record_query --broker HOST:PORT --release R --out DIR`` against the
master of ``broker-a`` of a fresh cluster (``scripts/apache-cluster start R --dir ...``):
it sends ``MESSAGES`` to queue 0 of a new topic (auto-created by the send; each with a
UNIQ_KEY of its own, fixed, so a replay can ask for it), waits until the index has the last
one, then sends the ``EXCHANGES`` and writes one file per exchange in the vectors' format
(tests/data/vectors/README.md): the request as sent, the answer as received with the
records decoded (body, queue offset, KEYS). ``tests/differential/test_query_replay.py``
replays the same requests against the embedded broker.
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

# KEYS of the messages sent first, in order; message i has UNIQ_KEY uniq_key(i)
MESSAGES: tuple[str, ...] = ("order-1", "order-1 user-7", "user-7", "order-10", "order-1", "solo")
FOREVER = (1 << 63) - 1

# name -> (description, key, maxNum, unique)
EXCHANGES: dict[str, tuple[str, str, int, bool]] = {
    "query_by_key": ("QUERY_MESSAGE for a key three messages carry (one among two keys)", "order-1", 64, False),
    "query_by_key_max_num": ("the same with maxNum 2: the newest two, oldest first", "order-1", 2, False),
    "query_by_second_key": ("the second of a message's space-separated keys", "user-7", 64, False),
    "query_by_unique_key": ("_UNIQUE_KEY_QUERY=true with a message's UNIQ_KEY", "", 64, True),
    "query_not_found": ("a key no message carries: QUERY_NOT_FOUND", "order-2", 64, False),
}


def uniq_key(i: int) -> str:
    return f"7F00000100002A9F{i:016X}"


def query_command(topic: str, key: str, max_num: int, unique: bool) -> RemotingCommand:
    ext: dict[str, Any] = {"topic": topic, "key": key or uniq_key(3), "maxNum": max_num,
                           "beginTimestamp": 0, "endTimestamp": FOREVER}
    if unique:
        ext["_UNIQUE_KEY_QUERY"] = "true"
    return req(RequestCode.QUERY_MESSAGE, ext).with_opaque(7)


def fill(w: Wire, topic: str) -> None:
    for i, keys in enumerate(MESSAGES):
        ans = send_msg(w, topic, f"m{i}".encode(), queue_id=0, keys=keys, uniq=False,
                       props={"UNIQ_KEY": uniq_key(i)})
        assert ans.code == 0, (ans.code, ans.remark)


def answer_of(cmd: RemotingCommand) -> dict[str, Any]:
    out: dict[str, Any] = {"code": cmd.code, "name": response_name(cmd.code), "remark": cmd.remark,
                           "extFields": cmd.ext_fields}
    if cmd.code == 0 and cmd.body:
        out["messages"] = [{"body": m.body.decode(), "queue_offset": m.queue_offset, "keys": m.keys,
                            "uniq_key": m.properties.get("UNIQ_KEY")} for m in decode_messages(cmd.body)]
    return out


def record(broker: str, out: Path, topic: str, release: str) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with Wire(broker, timeout=10) as w:
        fill(w, topic)
        last = query_command(topic, "solo", 64, False)
        deadline = time.monotonic() + 10
        while w.request(last).code != 0:         # the index is built on the dispatch thread
            assert time.monotonic() < deadline, "the broker never indexed the last message"
            time.sleep(0.05)
        for name, (description, key, max_num, unique) in EXCHANGES.items():
            cmd = query_command(topic, key, max_num, unique)
            doc = {"name": name, "description": description, "server": "broker", "topic": topic,
                   "release": release, "request": {"code": cmd.code, "frame_hex": encode(cmd).hex()},
                   "response": answer_of(w.request(cmd))}
            (out / f"{name}.json").write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--broker", required=True, help="host:port of broker-a's master")
    p.add_argument("--release", required=True, help="the broker's release, e.g. 5.5.0")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--topic", default=f"query_{time.strftime('%H%M%S')}")
    args = p.parse_args(argv)
    record(args.broker, args.out, args.topic, args.release)


if __name__ == "__main__":
    main()
