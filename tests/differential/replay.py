"""Replaying the recorded Apache exchanges against an embedded cluster, in recorded order.

The recordings (``vectors/apache-broker``) come from two runs of a driver: the main run
and the ACL run. Their request opaques give the order the exchanges were made in; the
gaps between opaques are requests the driver made without keeping them (more sends,
heartbeats of the lock clients, an offset commit, ...), which ``scenario`` rebuilds from
what the recordings show (the stored messages of later pulls, the consume stats, the
NOTIFY_CONSUMER_IDS_CHANGED pushes).

``Replay`` sends each recorded request frame with the recorded run id replaced by a
fresh one (so every topic, group and client name is new to the cluster), recorded
commit-log offsets replaced by ours (learnt pairwise from send answers and pulled
messages) and, for ACL requests, the signature recomputed the way the recorded one was
made (right, without the body, or kept when it was wrong on purpose). The cluster runs
on a ``FakeClock`` that follows the recording's timeline (store times of the recorded
messages, born times of sends, subVersions of pulls), so timestamp searches can be sent
unchanged. Each answer is kept as an ``Outcome`` with the raw frames the server pushed
on that connection meanwhile.
"""

from __future__ import annotations

import itertools
import json
import re
import secrets
import socket
import struct
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

from rocketmq_spark.client.acl import signature
from rocketmq_spark.embedded import EmbeddedCluster
from rocketmq_spark.embedded.broker import Broker
from rocketmq_spark.embedded.clock import FakeClock
from rocketmq_spark.remoting.codes import SERIALIZE_JSON, MessageSysFlag, RequestCode
from rocketmq_spark.remoting.command import RemotingCommand, decode, encode
from rocketmq_spark.remoting.message import decode_properties, encode_properties, parse_offset_msg_id
from tests.differential.compare import message_tree, pushed_trees
from tests.vectors import README as VECTORS_README
from tests.vectors import map_commit_log_offset
from tests.waiting import wait_until

RECORDED_BROKER = "127.0.0.1:10911"
RECORDED_NAMESRV = "127.0.0.1:9876"
MAIN_RUN = "090824r0"
ACL_RUN = "090328r0"
ACL_SECRET = "12345678"
SILENCE_WAIT = 0.5  # how long a request Apache never answered waits for our answer
SEGMENT_SIZE = 64 * 1024  # small commit-log segments: the deletion exchanges need a roll
R = RequestCode
SENDS = {R.SEND_MESSAGE, R.SEND_MESSAGE_V2, R.SEND_BATCH_MESSAGE}
OFFSET_FIELDS = {R.VIEW_MESSAGE_BY_ID: "offset", R.CONSUMER_SEND_MSG_BACK: "offset",
                 R.END_TRANSACTION: "commitLogOffset"}  # extFields naming a commit-log offset


def plain_acl_yml() -> str:
    """The plain_acl.yml the ACL recordings were made with (from the vectors' README)."""
    text = VECTORS_README.read_text()
    match = re.search(r"```yaml\n(.*?)```", text, re.S)
    assert match, "the README no longer shows the plain_acl.yml"
    return match.group(1)


def new_run_id() -> str:
    return "t" + secrets.token_hex(4)[:7]  # as long as the recorded ones: frame sizes stay close


# ---------------------------------------------------------------- raw connection

class Conn:
    """One TCP connection keeping the raw frames: answers by opaque, pushed requests in order."""

    def __init__(self, addr: str) -> None:
        host, _, port = addr.rpartition(":")
        self.sock = socket.create_connection((host, int(port)), timeout=5)
        self.sock.settimeout(None)
        self._cond = threading.Condition()
        self._answers: dict[int, tuple[bytes, float]] = {}
        self._pushed: list[bytes] = []
        self.arrivals: list[tuple[bytes, float]] = []  # every pushed request with when it came, kept
        self._closed = False
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _exactly(self, n: int) -> bytes:
        out = b""
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise EOFError
            out += chunk
        return out

    def _read(self) -> None:
        try:
            while True:
                head = self._exactly(4)
                frame = head + self._exactly(struct.unpack(">i", head)[0])
                cmd, _ = decode(frame)
                with self._cond:
                    if cmd.is_response:
                        self._answers[cmd.opaque] = (frame, time.monotonic())
                    else:
                        self._pushed.append(frame)
                        self.arrivals.append((frame, time.monotonic()))
                    self._cond.notify_all()
        except (OSError, EOFError):
            pass
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def send(self, frame: bytes) -> float:
        """Write ``frame``; the time the write began (an answer can be read before it returns)."""
        at = time.monotonic()
        self.sock.sendall(frame)
        return at

    def answer(self, opaque: int, timeout: float) -> tuple[bytes, float] | None:
        deadline = time.monotonic() + timeout
        with self._cond:
            while opaque not in self._answers:
                left = deadline - time.monotonic()
                if left <= 0 or self._closed:
                    return None
                self._cond.wait(left)
            return self._answers.pop(opaque)

    def pushed(self, at_least: int = 0, timeout: float = 1.0) -> list[bytes]:
        """Take the requests pushed so far (waiting a little for ``at_least`` of them)."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while len(self._pushed) < at_least and not self._closed and time.monotonic() < deadline:
                self._cond.wait(deadline - time.monotonic())
            out, self._pushed = self._pushed, []
            return out

    def wait_pushed(self, match: Callable[[bytes], bool], timeout: float) -> tuple[bytes, float] | None:
        """The first pushed request since the last ``pushed()`` that ``match`` accepts, with when
        it came; left in place (the exchange it came during keeps it)."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                found = next((f for f in self._pushed if match(f)), None)
                if found is not None:
                    return found, next(at for f, at in reversed(self.arrivals) if f is found)
                left = deadline - time.monotonic()
                if left <= 0 or self._closed:
                    return None
                self._cond.wait(left)

    def close(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
        self._thread.join(2)


# ---------------------------------------------------------------- replay

@dataclass
class Outcome:
    name: str
    request_code: int
    frame: bytes | None
    pushed: list[bytes]
    elapsed_ms: float
    extra: dict[str, float] = field(default_factory=dict)


class Replay:
    recorded_broker, recorded_namesrv = RECORDED_BROKER, RECORDED_NAMESRV

    def __init__(self, cluster: EmbeddedCluster, clock: FakeClock, vectors: dict[str, dict], run: str,
                 new_run: str, *, secret: str | None = None) -> None:
        self.cluster = cluster
        self.clock = clock
        self.v = {n: d for n, d in vectors.items() if d["run_id"] == run}
        self.run, self.new_run = run, new_run
        self.secret = secret
        self.conns: dict[str, Conn] = {}
        self.phys: dict[int, int] = {}  # recorded commit-log offset -> ours
        self.outcomes: dict[str, Outcome] = {}
        self._opaques = itertools.count(1_000_000)
        self.recorded_messages = self._recorded_originals()

    @property
    def broker(self) -> Broker:
        return self.cluster.brokers["broker-a"]

    def name(self, suffix: str) -> str:
        """A run-specific name: ``rec_<new run>_<suffix>``."""
        return f"rec_{self.new_run}_{suffix}"

    def conn(self, key: str) -> Conn:
        if key not in self.conns:
            addr = self.cluster.namesrv_addr if key == "ns" else self.broker.addr
            self.conns[key] = Conn(addr)
        return self.conns[key]

    def close(self) -> None:
        for c in self.conns.values():
            c.close()

    def replacements(self, ours: bool) -> dict[str, str]:
        """Placeholders for the run-specific names and the server addresses."""
        if ours:
            return {self.new_run: "<RUN>", self.broker.addr: "<BROKER>", self.cluster.namesrv_addr: "<NAMESRV>"}
        return {self.run: "<RUN>", self.recorded_broker: "<BROKER>", self.recorded_namesrv: "<NAMESRV>"}

    # ------------------------------------------------------------ what the recording tells

    def _recorded_originals(self) -> dict[str, dict[str, Any]]:
        """UNIQ_KEY -> the recorded message as first stored (no retry/DLQ/delayed copy, no
        commit of a half message: 5.x drops REAL_TOPIC from those)."""
        out: dict[str, dict[str, Any]] = {}
        for vec in self.v.values():
            for m in (vec.get("response") or {}).get("messages") or []:
                props = m["properties"]
                if m["reconsumeTimes"] == 0 and "REAL_TOPIC" not in props and not m["topic"].startswith("%") \
                        and not m["sysFlag"] & MessageSysFlag.TRANSACTION_COMMIT_TYPE:
                    out.setdefault(props.get("UNIQ_KEY", ""), m)
        return out

    def time_hint(self, vec: dict[str, Any]) -> int | None:
        """When the recorded request was made, as far as the request shows it."""
        req = vec["request"]
        ext = req["header"].get("extFields") or {}
        code = req["code"]
        if code in SENDS:
            props = decode_properties(ext.get("properties", ext.get("i", "")))
            stored = self.recorded_messages.get(props.get("UNIQ_KEY", ""))
            if stored is not None:
                return int(stored["storeTimestamp"])
            born = ext.get("bornTimestamp", ext.get("g"))
            return int(born) if born else None
        if code == R.PULL_MESSAGE and "subVersion" in ext:
            return int(ext["subVersion"])
        if code == R.HEART_BEAT and isinstance(req.get("body"), dict):
            versions = [s["subVersion"] for c in req["body"].get("consumerDataSet", [])
                        for s in c.get("subscriptionDataSet", [])]
            return max(versions) if versions else None
        return None

    def advance(self, ms: int | None) -> None:
        if ms is not None and ms > self.clock.now_ms():
            self.clock.set(ms)

    def map_phys(self, recorded: int) -> int:
        """Ours for a recorded commit-log offset (``tests.vectors.map_commit_log_offset``)."""
        try:
            return map_commit_log_offset(self.phys, recorded)
        except KeyError as exc:
            raise AssertionError(str(exc)) from None

    def learn(self, theirs: RemotingCommand | None, ours: RemotingCommand | None, code: int) -> None:
        """Pair recorded commit-log offsets with ours (send answers, stored messages)."""
        if theirs is None or ours is None or theirs.code != 0 or ours.code != 0:
            return
        if code in SENDS:
            a, b = theirs.ext.get("msgId", ""), ours.ext.get("msgId", "")
            for x, y in zip(a.split(","), b.split(",")):
                if x and y:
                    self.phys[parse_offset_msg_id(x)[1]] = parse_offset_msg_id(y)[1]
        elif code in (R.PULL_MESSAGE, R.VIEW_MESSAGE_BY_ID):
            for x, y in zip(message_tree(theirs.body), message_tree(ours.body)):
                self.phys[x["commitLogOffset"]] = y["commitLogOffset"]

    # ------------------------------------------------------------ request frames

    def request_frame(self, name: str) -> bytes:
        req = self.v[name]["request"]
        if "frame_hex" in req:
            frame = bytes.fromhex(req["frame_hex"])
        else:  # stored as prefix + hash only: the same header and a body of the same size
            header = req["header_text"].encode()
            body = bytes.fromhex(req["body_hex_prefix"])
            body += bytes(req["body_len"] - len(body))
            frame = struct.pack(">iI", 4 + len(header) + len(body), len(header)) + header + body
        word = struct.unpack(">I", frame[4:8])[0]
        header, body = frame[8:8 + (word & 0xFFFFFF)], frame[8 + (word & 0xFFFFFF):]
        if body[:1] == b"{" or req["code"] == R.SEND_BATCH_MESSAGE:  # run ids are as long as ours: sizes hold
            body = body.replace(self.run.encode(), self.new_run.encode())
        if word >> 24 != SERIALIZE_JSON:
            cmd, _ = decode(frame)
            ext = {k: v.replace(self.run, self.new_run) for k, v in cmd.ext.items()}
            return encode(replace(cmd, ext_fields=ext, body=body))
        text = header.decode().replace(self.run, self.new_run)
        ext = json.loads(text).get("extFields") or {}
        key = OFFSET_FIELDS.get(req["code"], "")
        if key in ext:
            text = _replace_value(text, key, ext[key], str(self.map_phys(int(ext[key]))))
        if "Signature" in ext:
            text = _replace_value(text, "Signature", ext["Signature"], self._resign(name, ext, body))
        header = text.encode()
        return struct.pack(">iI", 4 + len(header) + len(body), word & 0xFF000000 | len(header)) + header + body

    def _resign(self, name: str, ext: dict[str, Any], body: bytes) -> str:
        """The signature made the way the recorded one was: right, without the body, or kept."""
        assert self.secret is not None, f"{name} is signed but no secret was given"
        recorded = decode(bytes.fromhex(self.v[name]["request"]["frame_hex"]))[0]
        sign_ext = {k: str(v) for k, v in ext.items()}
        if recorded.ext["Signature"] == signature(recorded.ext, recorded.body, self.secret):
            return signature(sign_ext, body, self.secret)
        if recorded.ext["Signature"] == signature(recorded.ext, b"", self.secret):
            return signature(sign_ext, b"", self.secret)
        return str(ext["Signature"])

    # ------------------------------------------------------------ exchanges

    def x(self, name: str, conn: str | None = None, *,
          while_waiting: Callable[[], dict[str, float]] | None = None) -> Outcome:
        """Replay the recorded exchange ``name`` and keep what came back."""
        vec = self.v[name]
        assert name not in self.outcomes, f"{name} replayed twice"
        self.advance(self.time_hint(vec))
        c = self.conn(conn or ("ns" if vec["server"] == "namesrv" else "main"))
        opaque = vec["request"]["header"]["opaque"]
        sent = c.send(self.request_frame(name))
        extra = while_waiting() if while_waiting else {}
        got = c.answer(opaque, 20.0) if vec["response"] is not None else self.unanswered(c, opaque)
        frame, at = got if got else (None, time.monotonic())
        if frame is not None and "woken_at" in extra:
            extra["answered_after_wake_ms"] = (at - extra.pop("woken_at")) * 1000
        recorded_pushes = len(vec.get("server_requests_seen") or [])
        pushed = c.pushed(at_least=recorded_pushes)
        out = Outcome(name, vec["request"]["code"], frame, pushed, (at - sent) * 1000, extra)
        self.outcomes[name] = out
        theirs = decode(bytes.fromhex(vec["response"]["frame_hex"]))[0] if vec["response"] else None
        self.learn(theirs, decode(frame)[0] if frame else None, vec["request"]["code"])
        return out

    def unanswered(self, c: Conn, opaque: int) -> tuple[bytes, float] | None:
        """Our answer (if any) to a request Apache never answered."""
        return c.answer(opaque, SILENCE_WAIT)

    def recorded_pushes(self, vec: dict[str, Any]) -> list[dict[str, Any]]:
        """The requests Apache pushed during ``vec``, as trees (``compare.pushed_trees``)."""
        return pushed_trees(bytes.fromhex(p["frame_hex"]) for p in vec.get("server_requests_seen") or [])

    def call(self, conn: str, code: int, ext: dict[str, Any] | None = None, body: bytes = b"",
             version: int = 409) -> RemotingCommand:
        """A request the recording made without keeping it (Java framing); must succeed."""
        c = self.conn(conn)
        opaque = next(self._opaques)
        cmd = RemotingCommand(code=int(code), opaque=opaque, body=body, language="JAVA", version=version,
                              ext_fields={k: str(v) for k, v in ext.items()} if ext is not None else None)
        c.send(encode(cmd))
        got = c.answer(opaque, 10.0)
        assert got is not None, f"no answer to the setup request {code} {ext}"
        c.pushed()  # the driver read these while waiting, as the recorder did
        answer, _ = decode(got[0])
        assert answer.code == 0, f"setup request {code} {ext} failed: {answer.code} {answer.remark}"
        return answer

    def send(self, conn: str, topic: str, body: bytes, props: dict[str, str], *, queue_id: int = 0,
             born: int | None = None) -> int:
        """A SEND_MESSAGE_V2 as the Java producer frames it; returns our commit-log offset."""
        stored = self.recorded_messages.get(props.get("UNIQ_KEY", ""))
        self.advance(int(stored["storeTimestamp"]) if stored else born)
        ext = {"a": self.name("pg"), "b": topic, "c": "TBW102", "d": "4", "e": str(queue_id), "f": "0",
               "g": str(born or self.clock.now_ms()), "h": "0", "i": encode_properties(props), "j": "0",
               "k": "false", "m": "false"}
        answer = self.call(conn, R.SEND_MESSAGE_V2, ext, body)
        ours = parse_offset_msg_id(answer.ext["msgId"])[1]
        if stored is not None:
            self.phys[int(stored["commitLogOffset"])] = ours
        return ours

    def resend_recorded(self, conn: str, message: dict[str, Any]) -> int:
        """Send again a message a recorded pull shows (its properties as sent: WAIT, no CLUSTER)."""
        props = {k: v for k, v in message["properties"].items() if k != "CLUSTER"}
        props["WAIT"] = "true"
        topic = message["topic"].replace(self.run, self.new_run)
        return self.send(conn, topic, bytes.fromhex(message["body_hex"]), props, queue_id=message["queueId"],
                         born=int(message["bornTimestamp"]))

    def heartbeat(self, conn: str, client: str, group: str) -> None:
        """A heartbeat like the recorded ``heart_beat_consumer``, for another client/group."""
        body = json.loads(json.dumps(self.v["heart_beat_consumer"]["request"]["body"]))
        body["clientID"] = f"127.0.0.1@{self.name(client)}"
        body["consumerDataSet"][0]["groupName"] = self.name(group)
        text = json.dumps(body, separators=(",", ":")).replace(self.run, self.new_run)
        self.call(conn, R.HEART_BEAT, None, text.encode())

    def segment_files(self) -> int:
        return sum(1 for _ in (Path(self.broker.root) / "commitlog").iterdir())

    # ------------------------------------------------------------ waits of the scenario
    # (a replay against a live broker, tests/apache/record.py, asks over the wire instead)

    def wait_held_pull(self) -> None:
        """Until the suspended pull just sent is held by the broker."""
        wait_until(lambda: self.broker.long_poll.held_count() == 1, 5.0, "the suspended pull to be held",
                   poll=0.005)

    def wait_max_offset(self, topic: str, queue_id: int, n: int, what: str) -> None:
        wait_until(lambda: self.broker.store.max_offset(topic, queue_id) == n, 5.0, what, poll=0.005)

    def delete_segments(self, trim: str, filler: str) -> bool:
        """Queue 0 of ``trim``: three messages in a commit-log segment that is then deleted,
        a fourth in a later one (fileReservedTime 0 on Apache). False where that cannot be
        done (a live broker)."""
        def roll() -> None:
            before = self.segment_files()
            while self.segment_files() == before:
                self.send("main", filler, bytes(16 * 1024), {"WAIT": "true"})

        roll()
        for i in range(3):
            self.send("main", trim, f"trim {i}".encode(), {"WAIT": "true", "TAGS": "TagTrim"})
        roll()
        fourth = self.send("main", trim, b"trim 3", {"WAIT": "true", "TAGS": "TagTrim"})
        self.broker.store.delete_segments_before(fourth)
        assert self.broker.store.min_offset(trim, 0) == 3, "the deletion should leave queue 0 starting at 3"
        return True


class LaterReplay(Replay):
    """The main run as ``tests/apache/record.py`` recorded it against a later release
    (``vectors/apache-broker-5.5``): the requests of the 5.1.3 run, names ``r5_<run>_*``,
    the retention exchanges left out (a live broker's segments cannot be deleted on
    demand). The recorded broker is the master of ``broker-a`` the recording's
    GET_BROKER_CLUSTER_INFO names."""

    recorded_namesrv = "127.0.0.1:39876"  # the NameServer's address appears in no answer of these runs

    def __init__(self, cluster: EmbeddedCluster, clock: FakeClock, vectors: dict[str, dict], run: str,
                 new_run: str) -> None:
        super().__init__(cluster, clock, vectors, run, new_run)
        info = self.v.get("cluster_info")
        if info is not None:
            self.recorded_broker = info["response"]["body"]["brokerAddrTable"]["broker-a"]["brokerAddrs"]["0"]

    def time_hint(self, vec: dict[str, Any]) -> int | None:
        """The request frames carry the first run's times (born times, subVersions); this run's
        are in its answers: a send's stored message, else the newest message an answer shows."""
        if vec["request"]["code"] in SENDS:
            return super().time_hint(vec)
        stored = [int(m["storeTimestamp"]) for m in (vec.get("response") or {}).get("messages") or []]
        return max(stored) if stored else None

    def name(self, suffix: str) -> str:
        """A run-specific name as the later recordings make them: ``r5_<run>_<suffix>``."""
        return f"r5_{self.new_run}_{suffix}"

    def x(self, name: str, conn: str | None = None, **kw: Any) -> Any:  # type: ignore[override]
        if name not in self.v:              # not part of the later recording
            return None
        return super().x(name, conn, **kw)

    def delete_segments(self, trim: str, filler: str) -> bool:
        return False


def with_ext(frame: bytes, values: dict[str, str]) -> bytes:
    """A JSON-serialised request frame with some extFields values replaced (the rest byte for byte)."""
    word = struct.unpack(">I", frame[4:8])[0]
    assert word >> 24 == SERIALIZE_JSON, "only JSON headers are edited"
    cmd, _ = decode(frame)
    text = frame[8:8 + (word & 0xFFFFFF)].decode()
    for key, value in values.items():
        text = _replace_value(text, key, cmd.ext[key], value)
    header, body = text.encode(), frame[8 + (word & 0xFFFFFF):]
    return struct.pack(">iI", 4 + len(header) + len(body), len(header)) + header + body


def _replace_value(text: str, key: str, old: Any, new: str) -> str:
    """Replace one extFields value in a JSON header text (the rest stays byte for byte)."""
    before = f'"{key}":{json.dumps(old)}'
    assert before in text, f"{before} not found in the header"
    return text.replace(before, f'"{key}":{json.dumps(new)}', 1)


# ---------------------------------------------------------------- the recorded runs, in order

def main_scenario(r: Replay) -> None:
    """The main run (090824r0): every exchange in opaque order, with the driver's unkept steps."""
    main = r.name("main")
    for name in ("cluster_info", "create_topic", "route_existing", "route_existing_version_399",
                 "route_existing_version_0", "route_existing_version_0_accept_standard_json", "route_unknown",
                 "route_default_topic_tbw102", "send_v1", "send_v2"):
        r.x(name)
    # opaques 11-15: five more messages in queue 0 (TagB, TagC, TagA, TagC, TagB), as pull_found shows
    for m in r.v["pull_found"]["response"]["messages"][1:]:
        r.resend_recorded("main", m)
    for name in ("send_batch", "send_to_bad_queue", "send_bad_topic_name", "send_auto_create",
                 "route_after_auto_create", "route_after_auto_create_later", "send_body_too_large",
                 "send_with_delay_level", "max_offset_queue3_right_after_delay_send", "pull_found",
                 "pull_found_tag_filtered", "pull_tag_filtered_none_match", "pull_max_msg_nums_2", "pull_no_new_msg",
                 "pull_offset_overflow_one", "pull_offset_overflow_badly", "pull_empty_queue_offset_0",
                 "pull_empty_queue_offset_5", "pull_queue_id_out_of_range", "pull_unknown_topic",
                 "pull_without_subscription_flag", "pull_long_poll_timeout"):
        r.x(name)

    def wake() -> dict[str, float]:  # opaque 39: another connection sends one message to queue 0
        r.wait_held_pull()
        woken_at = time.monotonic()
        r.resend_recorded("wake", r.v["pull_long_poll_woken"]["response"]["messages"][0])
        return {"woken_at": woken_at}

    r.x("pull_long_poll_woken", while_waiting=wake)
    for name in ("pull_with_commit_offset", "query_consumer_offset_after_pull_commit", "send_binary_body",
                 "send_compressed_body", "pull_binary_body", "min_offset", "max_offset",
                 "search_offset_by_timestamp_before_first", "search_offset_by_timestamp_between",
                 "search_offset_by_timestamp_between_nearer_later", "search_offset_by_timestamp_exact",
                 "search_offset_by_timestamp_after_last", "earliest_msg_storetime", "query_consumer_offset_new_group",
                 "query_consumer_offset_new_group_unknown_topic", "update_consumer_offset",
                 "query_consumer_offset_after_update"):
        r.x(name)
    # opaque 59: queue 1's offset committed at 1 (get_consume_stats shows it)
    r.call("main", R.UPDATE_CONSUMER_OFFSET, {"consumerGroup": r.name("cg"), "topic": main, "queueId": 1,
                                              "commitOffset": 1})
    r.x("update_consumer_offset_beyond_max")
    # the stats count the delayed message of queue 3, delivered a second after its send
    r.wait_max_offset(main, 3, 1, "the delayed message's delivery")
    for name in ("get_consume_stats", "get_consume_stats_with_topic", "get_consume_stats_unknown_group",
                 "topic_stats", "topic_stats_unknown_topic", "view_message_by_id", "consumer_connection_list_offline"):
        r.x(name)
    r.x("heart_beat_consumer", "A")
    r.x("consumer_list_by_group", "A")
    r.x("consumer_connection_list", "A")
    r.x("route_retry_topic")
    r.x("heart_beat_consumer_b_same_group", "B")
    r.x("consumer_list_by_group_two_clients", "A")
    r.x("pull_without_subscription_flag_registered_group")
    r.x("pull_without_subscription_flag_newer_subversion")
    # opaques 76, 77: clients A and B join the lock group (lock_batch_first sees B's join pushed to A)
    r.heartbeat("A", "A", "lg")
    r.heartbeat("B", "B", "lg")
    for name, conn in (("lock_batch_first", "A"), ("lock_batch_held_by_other", "B"), ("lock_batch_renew", "A"),
                       ("unlock_batch", "A"), ("unlock_batch_not_owner", "A"), ("lock_batch_after_unlock", "B"),
                       ("lock_batch_unknown_group", "A"), ("unregister_client", "A"),
                       ("consumer_list_after_unregister_one", "A")):
        r.x(name, conn)
    # opaque 87: B leaves the group too
    r.call("B", R.UNREGISTER_CLIENT, {"clientID": f"127.0.0.1@{r.name('B')}", "consumerGroup": r.name("cg")})
    r.x("consumer_list_after_unregister_all", "A")
    r.x("send_back_delay_level")
    r.x("route_retry_topic_after_send_back")
    retry = f"%RETRY%{r.name('rg')}"
    r.advance(r.time_hint(r.v["pull_retry_topic"]))  # the 1 s delay level passes on the broker's clock
    r.wait_max_offset(retry, 0, 1, "the send-back copy in the retry topic")
    for name in ("pull_retry_topic", "send_back_to_dlq", "route_dlq_topic", "pull_dlq_topic", "update_dlq_topic_perm",
                 "pull_dlq_topic_after_perm_update", "send_back_retry_message_past_max",
                 "send_back_maxreconsume_0_version_0", "max_offset_dlq_after_version_0_send_back",
                 "send_back_bad_offset", "pull_after_delay_level", "unknown_request_code",
                 "unknown_request_code_namesrv", "send_to_namesrv", "missing_required_field",
                 "missing_required_field_query_offset", "missing_required_field_send_v2", "bad_field_type",
                 "rocketmq_serialization", "rocketmq_serialization_namesrv", "max_offset_unknown_topic",
                 "max_offset_version_0", "heart_beat_empty_body", "all_topic_list", "topic_config_all",
                 "broker_runtime_info"):
        r.x(name)
    # opaques 118-121: queue 0 of a new topic gets three messages in one commit-log segment
    # and a fourth in a later one; the older segments are deleted (fileReservedTime 0 on Apache)
    deleted = r.delete_segments(r.name("trim"), r.name("filler"))
    for name in ("min_offset_after_deletion", "pull_offset_too_small", "query_consumer_offset_new_group_min_above_0",
                 "earliest_msg_storetime_after_deletion"):
        if deleted:
            r.x(name)
    r.x("numeric_ext_field_value")


def acl_scenario(r: Replay) -> None:
    """The ACL run (090328r0), against a broker started with the README's plain_acl.yml."""
    for name in sorted(r.v, key=lambda n: r.v[n]["request"]["header"]["opaque"]):
        r.x(name)
