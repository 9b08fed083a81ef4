"""Recording a real Apache broker's answers to the requests of a recorded run.

``python -m tests.apache.record --namesrv HOST:PORT --broker HOST:PORT --out DIR`` replays
the scripted requests of ``tests/data/vectors/apache-broker-5`` (the 5.1.3 run, framed as the
4.9.8 Java client frames them) against a live broker, in the recorded order and with the
recorder's unkept steps (``tests/differential/replay.main_scenario``), and writes one file
per exchange in the vectors' format (tests/data/vectors/README.md): the request as sent,
the answer as received, and, from a second run with other names, ``varies`` (the answer's
fields that differed between the runs). Give it a fresh cluster (``scripts/apache-cluster
start 5.5.0 --dir ...``) and the master of ``broker-a``.

What differs from the embedded replay: the live broker's clock is its own, so a timestamp
search is sent with the timestamp moved as far from this run's store times as the recorded
one was from the recorded store times (the recording's ``context``); the waits ask the
broker (GET_MAX_OFFSET), and the wake-up of the held pull comes 1.5 s after it was sent, as
the first recorder did; the retention exchanges are left out (a live broker's commit-log
segments cannot be deleted on demand), as they were for 5.1.3.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any, Sequence

from rocketmq_spark.remoting.codes import RequestCode, response_name
from rocketmq_spark.remoting.command import decode
from rocketmq_spark.remoting.message import decode_batch, decode_properties
from tests.differential.compare import answer_tree, diff, normalise, pushed_trees
from tests.differential.replay import Replay, _replace_value, main_scenario, new_run_id
from tests.vectors import apache5_vectors

RECORDED_RUN = "200109r0"            # the 5.1.3 run the requests come from
RECORDED_BROKER = "127.0.0.1:40911"
RECORDED_NAMESRV = "127.0.0.1:39876"
WAKE_AFTER = 1.5                     # seconds: when the held pull is woken (as recorded)
SEARCHES = {"search_offset_by_timestamp_before_first", "search_offset_by_timestamp_between",
            "search_offset_by_timestamp_between_nearer_later", "search_offset_by_timestamp_exact",
            "search_offset_by_timestamp_after_last"}
FASTJSON_NOTE = ("not strict JSON (fastjson writes non-string map keys bare); such keys appear in "
                 "'body' as their source text")
BIG = 256 * 1024                     # bodies and frames over this are kept as prefix + hash


class _Cluster:
    def __init__(self, namesrv: str) -> None:
        self.namesrv_addr = namesrv


class _Broker:
    def __init__(self, addr: str) -> None:
        self.addr = addr


class LiveReplay(Replay):
    """``Replay`` against a running broker: every wait asks it over the wire."""

    recorded_broker, recorded_namesrv = RECORDED_BROKER, RECORDED_NAMESRV

    def __init__(self, namesrv: str, broker: str, vectors: dict[str, dict], new_run: str) -> None:
        super().__init__(_Cluster(namesrv), None, vectors, RECORDED_RUN, new_run)  # type: ignore[arg-type]
        self._broker = _Broker(broker)
        self.sent: dict[str, bytes] = {}

    @property
    def broker(self) -> Any:  # type: ignore[override]
        return self._broker

    def name(self, suffix: str) -> str:
        """A run-specific name as the 5.x recordings make them: ``r5_<run>_<suffix>``."""
        return f"r5_{self.new_run}_{suffix}"

    def advance(self, ms: int | None) -> None:
        """The live broker keeps its own time."""

    def x(self, name: str, conn: str | None = None, **kw: Any) -> Any:  # type: ignore[override]
        if name not in self.v:              # not part of the 5.x recording
            return None
        return super().x(name, conn, **kw)

    def request_frame(self, name: str) -> bytes:
        frame = super().request_frame(name)
        if name in SEARCHES:
            frame = self._moved_timestamp(name, frame)
        self.sent[name] = frame
        return frame

    def _moved_timestamp(self, name: str, frame: bytes) -> bytes:
        """The search's timestamp, as far from this run's store times as it was recorded."""
        # the store times are in every search's context but the first one's
        recorded_times = next(self.v[n]["context"]["store_timestamps_by_offset"] for n in sorted(SEARCHES)
                              if "context" in self.v.get(n, {}))
        live_times = self.store_times(self.name("main"), len(recorded_times))
        ts = int(self.v[name]["request"]["header"]["extFields"]["timestamp"])
        nearest = min(range(len(recorded_times)), key=lambda i: abs(recorded_times[i] - ts))
        moved = live_times[nearest] + ts - recorded_times[nearest]
        cmd, _ = decode(frame)
        header = frame[8:8 + (int.from_bytes(frame[4:8], "big") & 0xFFFFFF)].decode()
        text = _replace_value(header, "timestamp", cmd.ext["timestamp"], str(moved)).encode()
        return (len(text) + 4).to_bytes(4, "big") + (len(text)).to_bytes(4, "big") + text

    def store_times(self, topic: str, n: int) -> list[int]:
        """Store timestamps of queue 0's first ``n`` messages (pulled on a connection of its own)."""
        from tests.differential.compare import message_tree

        out: list[int] = []
        while len(out) < n:
            answer = self.call("probe", RequestCode.PULL_MESSAGE, {
                "consumerGroup": self.name("probe"), "topic": topic, "queueId": 0, "queueOffset": len(out),
                "maxMsgNums": n - len(out), "sysFlag": 4, "commitOffset": 0, "suspendTimeoutMillis": 0,
                "subscription": "*", "subVersion": 0, "expressionType": "TAG"})
            out.extend(m["storeTimestamp"] for m in message_tree(answer.body))
        return out

    def wait_held_pull(self) -> None:
        time.sleep(WAKE_AFTER)

    def wait_max_offset(self, topic: str, queue_id: int, n: int, what: str) -> None:
        deadline = time.monotonic() + 30
        while True:
            got = int(self.call("probe", RequestCode.GET_MAX_OFFSET, {"topic": topic, "queueId": queue_id})
                      .ext["offset"])
            if got >= n:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"{what}: max offset {got}, not {n}, after 30 s")
            time.sleep(0.1)

    def delete_segments(self, trim: str, filler: str) -> bool:
        return False


# ---------------------------------------------------------------- the files


def _body(raw: bytes) -> dict[str, Any]:
    if len(raw) > BIG:
        import hashlib
        return {"body_hex_prefix": raw[:64].hex(), "body_len": len(raw), "body_sha256": hashlib.sha256(raw).hexdigest()}
    try:
        return {"body": json.loads(raw)}
    except ValueError:
        out: dict[str, Any] = {"body_hex": raw.hex()}
        try:
            out["body_text"] = raw.decode()
        except UnicodeDecodeError:
            pass
        return out


def request_record(frame: bytes, recorded: dict[str, Any]) -> dict[str, Any]:
    """The request as sent, in the recording's shape."""
    word = int.from_bytes(frame[4:8], "big")
    header, body = frame[8:8 + (word & 0xFFFFFF)], frame[8 + (word & 0xFFFFFF):]
    cmd, _ = decode(frame)
    out: dict[str, Any] = {"code": cmd.code, "name": recorded["request"]["name"],
                           "serialization": recorded["request"]["serialization"]}
    if out["serialization"] == "JSON":
        out["header"], out["header_text"] = json.loads(header), header.decode()
    else:
        out["header"], out["header_hex"] = recorded["request"]["header"], header.hex()
    if body:
        out.update(_body(body))
    ext = cmd.ext
    if "properties" in ext or "i" in ext:
        out["decoded_properties"] = decode_properties(ext.get("properties", ext.get("i", "")))
    if cmd.code == RequestCode.SEND_BATCH_MESSAGE and body:
        out["batch_items"] = [{"body_hex": m.body.hex(), "properties": dict(m.properties)} for m in decode_batch(body)]
    if len(frame) > BIG:
        import hashlib
        out.update({"frame_hex_prefix": frame[:64].hex(), "frame_hex_len": len(frame),
                    "frame_hex_sha256": hashlib.sha256(frame).hexdigest()})
    else:
        out["frame_hex"] = frame.hex()
    return out


def response_record(frame: bytes | None, request_code: int) -> dict[str, Any] | None:
    tree = answer_tree(frame, request_code)
    if tree is None or frame is None:
        return None
    tree["name"] = response_name(tree["code"])
    word = int.from_bytes(frame[4:8], "big")
    if tree["serialization"] == "JSON":
        tree["header_text"] = frame[8:8 + (word & 0xFFFFFF)].decode()
    else:
        tree["header_hex"] = frame[8:8 + (word & 0xFFFFFF)].hex()
    if "messages" in tree:
        _note_inflated(tree["messages"], frame[8 + (word & 0xFFFFFF):])
    if tree.pop("body_syntax", None) == "fastjson":
        tree["body_text"] = frame[8 + (word & 0xFFFFFF):].decode()
        tree["body_note"] = FASTJSON_NOTE
    tree["frame_hex"] = frame.hex()
    tree.setdefault("body", None)
    return tree


def _note_inflated(trees: list[dict[str, Any]], body: bytes) -> None:
    """Each record's body as text where it is, a compressed record's inflated length and
    hash, as the recordings keep them."""
    import hashlib
    from rocketmq_spark.remoting.message import decode_messages

    for tree, m in zip(trees, decode_messages(body)):
        try:
            tree.setdefault("body_text", m.body.decode())
        except UnicodeDecodeError:
            pass
        if tree["sysFlag"] & 1:
            payload = m.payload()
            tree["body_inflated_len"] = len(payload)
            tree["body_inflated_sha256"] = hashlib.sha256(payload).hexdigest()


def record_run(namesrv: str, broker: str, vectors: dict[str, dict]) -> LiveReplay:
    r = LiveReplay(namesrv, broker, vectors, new_run_id())
    try:
        main_scenario(r)
    finally:
        r.close()
    return r


def files_of(first: LiveReplay, second: LiveReplay, vectors: dict[str, dict], version: str) -> dict[str, dict]:
    out = {}
    for name, outcome in first.outcomes.items():
        rec = vectors[name]
        response = response_record(outcome.frame, outcome.request_code)
        again = second.outcomes.get(name)
        varies: list[str] = []
        if again is not None and response is not None:
            a = normalise(response, first.replacements(ours=True))
            b = normalise(response_record(again.frame, again.request_code), second.replacements(ours=True))
            varies = sorted({d.path for d in diff(a, b)} - {"opaque"})
        doc = {
            "name": name, "description": rec["description"], "server": rec["server"],
            "request": request_record(first.sent.get(name) or first.request_frame(name), rec),
            "response": response,
            "elapsed_ms": round(outcome.elapsed_ms, 1),
            "elapsed_ms_each_run": [round(outcome.elapsed_ms, 1)] + ([round(again.elapsed_ms, 1)] if again else []),
            "varies": varies,
            "varies_note": "fields that differed between 2 runs with fresh names (run id replaced by a placeholder "
                           "before comparing)",
            "run_id": first.new_run,
            "recorded_with": f"Apache RocketMQ {version}, tests/apache/record.py",
        }
        if outcome.pushed:
            doc["server_requests_seen"] = [{**t, "frame_hex": f.hex()}
                                           for t, f in zip(pushed_trees(outcome.pushed), outcome.pushed)]
        if outcome.frame is None:
            doc["no_response"] = "nothing came back"
        out[name] = doc
    return out


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.apache.record", description=__doc__.split("\n\n")[0])
    p.add_argument("--namesrv", required=True)
    p.add_argument("--broker", required=True, help="the master of broker-a")
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--version", required=True, help="the broker's release, for the files")
    args = p.parse_args(argv)
    vectors = {n: v for n, v in apache5_vectors().items() if v["run_id"] == RECORDED_RUN}
    first = record_run(args.namesrv, args.broker, vectors)
    second = record_run(args.namesrv, args.broker, vectors)
    args.out.mkdir(parents=True, exist_ok=True)
    for name, doc in files_of(first, second, vectors, args.version).items():
        (args.out / f"{name}.json").write_text(json.dumps(doc, indent=2, sort_keys=False) + "\n")
    print(f"{len(first.outcomes)} exchanges recorded into {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
