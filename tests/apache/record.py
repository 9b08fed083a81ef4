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

``--phases transactions`` replays the 40 ``txn_*`` exchanges of
``tests/data/vectors/apache-broker-txn`` instead (``LiveTxnReplay``, the scenario of
``tests/differential/txn_replay``), against a fresh cluster started with the recorded
transaction settings::

    scripts/apache-cluster start 5.5.0 --dir DIR --broker-config transactionTimeOut=2000 \
        --broker-config transactionCheckInterval=3000 --broker-config transactionCheckMax=3
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any, Sequence

from rocketmq_spark.remoting.codes import TRANS_CHECK_MAX_TIME_TOPIC, TRANS_HALF_TOPIC, RequestCode, response_name
from rocketmq_spark.remoting.command import RemotingCommand, decode, encode
from rocketmq_spark.remoting.message import HostPort, decode_batch, decode_properties
from tests.differential.compare import answer_tree, diff, normalise, pushed_trees
from tests.differential.replay import LaterReplay, Replay, main_scenario, new_run_id, with_ext
from tests.differential.txn_replay import local_address, txn_placeholders, txn_scenario
from tests.txn_recording import CHECK_ANSWERS
from tests.txn_recording import RECORDED_BROKER as TXN_BROKER
from tests.txn_recording import RECORDED_NAMESRV as TXN_NAMESRV
from tests.txn_recording import RECORDED_RUN as TXN_RUN
from tests.vectors import apache5_vectors, map_commit_log_offset, txn_vectors

RECORDED_RUN = "200109r0"            # the 5.1.3 run the requests come from
RECORDED_BROKER = "127.0.0.1:40911"
RECORDED_NAMESRV = "127.0.0.1:39876"
WAKE_AFTER = 1.5                     # seconds: when the held pull is woken (as recorded)
SEARCHES = {"search_offset_by_timestamp_before_first", "search_offset_by_timestamp_between",
            "search_offset_by_timestamp_between_nearer_later", "search_offset_by_timestamp_exact",
            "search_offset_by_timestamp_after_last"}
FASTJSON_NOTE = ("not strict JSON (fastjson writes non-string map keys bare); such keys appear in "
                 "'body' as their source text")
JAVA_TIMEOUT = 3.0                   # seconds: how long the Java client waits for an answer (the recorders too)
BIG = 256 * 1024                     # bodies and frames over this are kept as prefix + hash


class _Cluster:
    def __init__(self, namesrv: str) -> None:
        self.namesrv_addr = namesrv


class _Broker:
    def __init__(self, addr: str) -> None:
        self.addr = addr


class _WallClock:
    """The time born timestamps are taken from: the live broker keeps its own."""

    @staticmethod
    def now_ms() -> int:
        return int(time.time() * 1000)


class LiveReplay(LaterReplay):
    """``Replay`` against a running broker: every wait asks it over the wire."""

    recorded_run, recorded_broker, recorded_namesrv = RECORDED_RUN, RECORDED_BROKER, RECORDED_NAMESRV

    def __init__(self, namesrv: str, broker: str, vectors: dict[str, dict], new_run: str) -> None:
        self._broker = _Broker(broker)
        super().__init__(_Cluster(namesrv), _WallClock(), vectors, self.recorded_run, new_run)  # type: ignore[arg-type]
        self.recorded_broker, self.recorded_namesrv = type(self).recorded_broker, type(self).recorded_namesrv
        self.sent: dict[str, bytes] = {}

    @property
    def broker(self) -> Any:  # type: ignore[override]
        return self._broker

    def advance(self, ms: int | None) -> None:
        """The live broker keeps its own time."""

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
        return with_ext(frame, {"timestamp": str(moved)})

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

    def max_offset(self, topic: str, queue_id: int) -> int:
        """GET_MAX_OFFSET on a connection of its own (0 where the broker has no such queue yet)."""
        c = self.conn("probe")
        opaque = next(self._opaques)
        c.send(encode(RemotingCommand(code=int(RequestCode.GET_MAX_OFFSET), opaque=opaque, language="JAVA",
                                      version=409, ext_fields={"topic": topic, "queueId": str(queue_id)})))
        got = c.answer(opaque, 10.0)
        assert got is not None, f"no answer to GET_MAX_OFFSET {topic} {queue_id}"
        answer, _ = decode(got[0])
        return int(answer.ext["offset"]) if answer.code == 0 else 0


class LiveTxnReplay(LiveReplay):
    """The transaction run (``tests.txn_recording``) against a running broker started with the
    recorded transaction settings.

    Sends are born now (``g``): the broker's check service skips, unchecked, a half message
    born longer ago than fileReservedTime (72 h), which a recorded born time is. Half-queue offsets are mapped as commit-log offsets are (recorded -> ours, from the half
    sends' answers): a second run on the same broker finds the first run's half messages
    there. An answer to a check-back waits for the broker's CHECK_TRANSACTION_STATE for that
    message (30 s at most) and echoes its commitLogOffset / tranStateTableOffset, as the Java
    client does; the pull of TRANS_CHECK_MAX_TIME_TOPIC waits until the broker moved the
    message there and pulls from where this run's message is. A request Apache never answered
    waits ``SILENCE`` seconds (a oneway one) or the Java client's 3 s timeout."""

    recorded_run, recorded_broker, recorded_namesrv = TXN_RUN, TXN_BROKER, TXN_NAMESRV
    SILENCE = 0.3

    def __init__(self, namesrv: str, broker: str, vectors: dict[str, dict], new_run: str) -> None:
        super().__init__(namesrv, broker, vectors, new_run)
        self.half: dict[int, int] = {}            # recorded half-queue offset -> ours
        self.half_sent: dict[str, float] = {}     # UNIQ_KEY -> when its half send went out
        self.checks_seen: dict[str, int] = {}     # UNIQ_KEY -> check-backs answered
        self.check: dict[str, str] = {}           # the check-back being answered: its extFields
        self.context: dict[str, dict[str, Any]] = {}
        self.moved_before = self.max_offset(TRANS_CHECK_MAX_TIME_TOPIC, 0)
        self.producer = ""                        # the producer connection's address, kept past close()
        self._oneway = False

    def name(self, suffix: str) -> str:
        return Replay.name(self, suffix)          # rec_<run>_<suffix>, as the recording names them

    def x(self, name: str, conn: str | None = None, **kw: Any) -> Any:  # type: ignore[override]
        vec = self.v[name]
        req = vec["request"]
        ext = req["header"].get("extFields") or {}
        half = req["code"] == RequestCode.SEND_MESSAGE_V2 and \
            decode_properties(ext.get("i", "")).get("TRAN_MSG") == "true"
        uniq = decode_properties(ext.get("i", "")).get("UNIQ_KEY", "")
        context: dict[str, Any] = {}
        if name in CHECK_ANSWERS:
            self.check = self._await_check(ext["msgId"])
        if name == "txn_pull_check_max_time_topic":
            context["check_max_time_topic_max_offset_before"] = self.moved_before
            context["check_backs_for_answered_unknown"] = self.checks_seen.get(
                self.v["txn_check_back_unknown_1"]["request"]["header"]["extFields"]["msgId"], 0)
            self._await_move()
        theirs = vec["response"]
        if req["code"] == RequestCode.PULL_MESSAGE and theirs and theirs["code"] == 0 and \
                ext["topic"] not in (TRANS_HALF_TOPIC, TRANS_CHECK_MAX_TIME_TOPIC):
            # SEND_OK can come before the consume queue has the message (5.5.0): wait for it
            topic = ext["topic"].replace(self.run, self.new_run)
            self.wait_max_offset(topic, int(ext["queueId"]), int(theirs["extFields"]["maxOffset"]), name)
        if "half_topic_max_offset_before_send" in (vec.get("context") or {}):
            context["half_topic_max_offset_before_send"] = self.max_offset(TRANS_HALF_TOPIC, 0)
        if half:
            self.half_sent[uniq] = time.monotonic()
        lost = "queue3_max_offset_before" in (vec.get("context") or {})  # sysFlag 4 without TRAN_MSG
        if lost:
            context["queue3_max_offset_before"] = self.max_offset(ext["b"].replace(self.run, self.new_run), 3)
        self._oneway = bool(req["header"].get("flag", 0) & 2)
        out = super().x(name, conn, **kw)
        self.producer = local_address(self.conn("main"))
        if lost:  # measured as the first recorder measured it: half a second after the answer
            time.sleep(0.5)
            context["queue3_max_offset_500ms_after"] = self.max_offset(ext["b"].replace(self.run, self.new_run), 3)
        if context:
            self.context[name] = context
        if half and theirs and theirs["code"] == 0 and out.frame is not None:
            ours, _ = decode(out.frame)
            if ours.code == 0:
                self.half[int(theirs["extFields"]["queueOffset"])] = int(ours.ext["queueOffset"])
        return out

    def _await_check(self, msg_id: str) -> dict[str, str]:
        def match(frame: bytes) -> bool:
            cmd, _ = decode(frame)
            return cmd.code == RequestCode.CHECK_TRANSACTION_STATE and cmd.ext.get("msgId") == msg_id

        got = self.conn("main").wait_pushed(match, 30.0)
        assert got is not None, f"no check-back for {msg_id} within 30 s"
        self.checks_seen[msg_id] = self.checks_seen.get(msg_id, 0) + 1
        return dict(decode(got[0])[0].ext)

    def _await_move(self) -> None:
        deadline = time.monotonic() + 30
        while self.max_offset(TRANS_CHECK_MAX_TIME_TOPIC, 0) <= self.moved_before:
            assert time.monotonic() < deadline, "the unresolved message was not moved to " \
                                                f"{TRANS_CHECK_MAX_TIME_TOPIC} within 30 s"
            time.sleep(0.1)

    def request_frame(self, name: str) -> bytes:
        frame = Replay.request_frame(self, name)
        req = self.v[name]["request"]
        ext = req["header"].get("extFields") or {}
        if "g" in ext and req["code"] in (RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE):
            # born now: the check service skips a half message born over fileReservedTime ago
            frame = with_ext(frame, {"g": str(self.clock.now_ms())})
        elif req["code"] == RequestCode.END_TRANSACTION:
            if name in CHECK_ANSWERS:
                values = {k: self.check[k] for k in ("commitLogOffset", "tranStateTableOffset")}
            else:
                values = {"tranStateTableOffset": str(self.map_half(int(ext["tranStateTableOffset"])))}
            frame = with_ext(frame, values)
        elif req["code"] == RequestCode.PULL_MESSAGE and ext["topic"] == TRANS_HALF_TOPIC:
            frame = with_ext(frame, {"queueOffset": str(self.map_half(int(ext["queueOffset"])))})
        elif req["code"] == RequestCode.PULL_MESSAGE and ext["topic"] == TRANS_CHECK_MAX_TIME_TOPIC:
            frame = with_ext(frame, {"queueOffset": str(self.moved_before)})
        self.sent[name] = frame
        return frame

    def map_half(self, recorded: int) -> int:
        """Ours for a recorded half-queue offset (as commit-log offsets are mapped)."""
        return map_commit_log_offset(self.half, recorded) if self.half else recorded

    def unanswered(self, c: Any, opaque: int) -> tuple[bytes, float] | None:
        return c.answer(opaque, self.SILENCE if self._oneway else JAVA_TIMEOUT)

    def replacements(self, ours: bool) -> dict[str, str]:
        out = super().replacements(ours)
        host, _, port = self.broker.addr.rpartition(":")
        return {**out, **txn_placeholders(self.producer, HostPort(host, int(port)))} if ours else out

    def arrivals_after_half_send(self) -> dict[bytes, int]:
        """Each check-back seen on the producer connection: ms from its message's half send."""
        out = {}
        for frame, at in self.conn("main").arrivals:
            cmd, _ = decode(frame)
            sent = self.half_sent.get(cmd.ext.get("msgId", ""))
            if cmd.code == RequestCode.CHECK_TRANSACTION_STATE and sent is not None:
                out[frame] = round((at - sent) * 1000)
        return out


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


PHASES = {"main": (LiveReplay, main_scenario), "transactions": (LiveTxnReplay, txn_scenario)}


def record_run(namesrv: str, broker: str, vectors: dict[str, dict], phase: str = "main") -> LiveReplay:
    kind, scenario = PHASES[phase]
    r = kind(namesrv, broker, vectors, new_run_id())
    try:
        scenario(r)
    finally:
        r.close()
    return r


def files_of(first: LiveReplay, second: LiveReplay, vectors: dict[str, dict], version: str) -> dict[str, dict]:
    out = {}
    context = getattr(first, "context", {})
    arrived = first.arrivals_after_half_send() if isinstance(first, LiveTxnReplay) else {}
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
            doc["server_requests_seen"] = [{**t, "frame_hex": f.hex(), **({"arrived_ms_after_half_send": arrived[f]}
                                                                          if f in arrived else {})}
                                           for t, f in zip(pushed_trees(outcome.pushed), outcome.pushed)]
        if name in context:
            doc["context"] = context[name]
        if outcome.frame is None and rec["request"]["header"].get("flag", 0) & 2:
            doc["no_response"] = "oneway request (flag 2 = RPC_ONEWAY): the server sends no answer and none came"
        elif outcome.frame is None:
            doc["no_response"] = "nothing came back"
        out[name] = doc
    return out


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.apache.record", description=__doc__.split("\n\n")[0])
    p.add_argument("--namesrv", required=True)
    p.add_argument("--broker", required=True, help="the master of broker-a")
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--version", required=True, help="the broker's release, for the files")
    p.add_argument("--phases", choices=sorted(PHASES), default="main",
                   help="main: the requests of apache-broker-5 (default); transactions: the txn_* exchanges of "
                        "apache-broker-txn (start the broker with transactionTimeOut=2000, "
                        "transactionCheckInterval=3000, transactionCheckMax=3)")
    args = p.parse_args(argv)
    if args.phases == "main":
        vectors = {n: v for n, v in apache5_vectors().items() if v["run_id"] == RECORDED_RUN}
    else:
        vectors = txn_vectors()
    first = record_run(args.namesrv, args.broker, vectors, args.phases)
    second = record_run(args.namesrv, args.broker, vectors, args.phases)
    args.out.mkdir(parents=True, exist_ok=True)
    for name, doc in files_of(first, second, vectors, args.version).items():
        (args.out / f"{name}.json").write_text(json.dumps(doc, indent=2, sort_keys=False) + "\n")
    print(f"{len(first.outcomes)} exchanges recorded into {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
