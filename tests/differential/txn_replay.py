"""The transaction recordings (``vectors/apache-broker-txn``) replayed for the differential suite.

The 40 ``txn_*`` exchanges were recorded against a second 4.9.8 broker (its own ports:
``C6DF`` in offset msgIds) with transactionTimeOut 2000, transactionCheckInterval 3000
and transactionCheckMax 3 (``tests.txn_recording``); the embedded cluster gets the same
settings. ``TxnReplay`` is a ``Replay``: recorded frames with a fresh run id, commit-log
offsets mapped (END_TRANSACTION's ``commitLogOffset`` too), the fake clock following the
recorded timeline (a half message is stored when Apache stored it: the first check-back
shows it), the requests pushed meanwhile kept per exchange. An exchange Apache never
answered is followed by a probe on the same connection (the broker handles a connection's
requests in order, so any answer to it comes first, or, were it held for a flush, within
``LATE_ANSWER`` seconds).

The check-backs depend on when the broker's check rounds run, so the replay runs them when
Apache did. From the second check of a message on, a check-back's body is the copy the
previous round made, stored when that round ran: two of them give one round's time and
the spacing of rounds (interval + round time, 3002 ms). The clock moves through each
round of that grid, waiting for the round to be done and the next one scheduled
(``RoundClock``), and the broker starts one interval before the first round after the
first exchange. A check-back names the copy its round made, an offset no answer pairs
with ours: it maps as far past the nearest paired offset as in the recording, so where
the copies, op messages or commits before it are not where Apache put them, its
``commitLogOffset`` and ``offsetMsgId`` differ from ours.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from rocketmq_spark.embedded import EmbeddedCluster
from rocketmq_spark.embedded.clock import FakeClock
from rocketmq_spark.embedded.transactions import TransactionCheckService
from rocketmq_spark.remoting.codes import TRANS_HALF_TOPIC, RequestCode
from rocketmq_spark.remoting.command import RemotingCommand, decode, encode
from rocketmq_spark.remoting.message import (PROP_TRANSACTION_CHECK_TIMES, HostPort, offset_msg_id,
                                             parse_offset_msg_id)
from tests.differential.replay import Conn, Replay, new_run_id, with_ext
from tests.txn_recording import (CHECK_ANSWERS, CHECK_MAX, INTERVAL_MS, ORDER, OTHER_CONNECTION, PLAIN_BODY, PLAIN_PROPERTIES,
                                 PLAIN_SUFFIX, RECORDED_BROKER, RECORDED_NAMESRV, TIMEOUT_MS, V)

CHECK = RequestCode.CHECK_TRANSACTION_STATE
PROBE_EXT = {"topic": "TBW102", "queueId": 0}
LATE_ANSWER = 0.1


def _checks(vec: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in vec.get("server_requests_seen") or [] if p["code"] == CHECK]


def recorded_rounds(vectors: dict[str, dict] = V) -> tuple[int, int]:
    """(the time of one of Apache's check rounds, the time from one round to the next)."""
    copies = sorted({m["storeTimestamp"] for vec in vectors.values() for p in _checks(vec) for m in p["messages"]
                     if int(m["properties"][PROP_TRANSACTION_CHECK_TIMES]) > 1})
    assert len(copies) >= 2, "two check-backs of copies are needed to time the rounds"
    period = copies[1] - copies[0]
    assert period >= INTERVAL_MS and all((t - copies[0]) % period == 0 for t in copies), copies
    return copies[0], period


def start_ms(vectors: dict[str, dict] = V) -> int:
    """One interval before the first round after the first exchange (a half send's born time)."""
    first = min(int(vectors[n]["request"]["header"]["extFields"]["g"]) for n in ORDER
                if vectors[n]["request"]["code"] == RequestCode.SEND_MESSAGE_V2)
    anchor, period = recorded_rounds(vectors)
    first_round = anchor + ((first - anchor) // period + 1) * period
    return first_round - INTERVAL_MS


class RoundClock(FakeClock):
    """A FakeClock that notes when the check service read it after its last round: that
    read schedules the next round (``due = now + interval``), so the clock may move on."""

    def __init__(self, start: int) -> None:
        super().__init__(start)
        self.service: TransactionCheckService | None = None
        self._read = threading.Condition()
        self.scheduled = 0  # rounds done when the check thread last read the clock

    def now_ms(self) -> int:
        now = super().now_ms()
        service = self.service
        if service is not None and threading.current_thread().name == service.thread_name:
            with self._read:
                self.scheduled = service.rounds
                self._read.notify_all()
        return now

    def wait_scheduled(self, rounds: int, timeout: float = 10.0) -> bool:
        with self._read:
            return self._read.wait_for(lambda: self.scheduled >= rounds, timeout)


class TxnReplay(Replay):
    recorded_broker, recorded_namesrv = RECORDED_BROKER, RECORDED_NAMESRV

    def __init__(self, cluster: EmbeddedCluster, clock: RoundClock, vectors: dict[str, dict], new_run: str) -> None:
        (run,) = {v["run_id"] for v in vectors.values() if v["name"] in ORDER}
        super().__init__(cluster, clock, vectors, run, new_run)
        # the broker as offset msgIds name it (its own ports for each recording)
        self.recorded_broker = str(parse_offset_msg_id(self.v["txn_send_half"]["response"]["extFields"]["msgId"])[0])
        self.round_clock = clock
        self.checks = self.broker.transaction_checks
        clock.service = self.checks
        self.anchor, self.period = recorded_rounds(self.v)
        self.due = clock.now_ms() + self.checks.config.check_interval_ms  # as the service computed it at start
        self._probes = iter(range(2_000_000, 3_000_000))

    # ------------------------------------------------------------ the clock and the rounds

    def _recorded_originals(self) -> dict[str, dict[str, Any]]:
        """Also the half messages as first stored: pulled from the half topic, or read by a first check."""
        out = super()._recorded_originals()
        for vec in self.v.values():
            pulled = [m for m in (vec.get("response") or {}).get("messages") or []
                      if m["topic"] == TRANS_HALF_TOPIC and PROP_TRANSACTION_CHECK_TIMES not in m["properties"]]
            checked = [m for p in _checks(vec) for m in p["messages"]
                       if m["properties"][PROP_TRANSACTION_CHECK_TIMES] == "1"]
            for m in pulled + checked:
                out.setdefault(m["properties"]["UNIQ_KEY"], m)
        return out

    def time_hint(self, vec: dict[str, Any]) -> int | None:
        """An answer to a check-back: when the check-back arrived."""
        checks = _checks(vec)
        if checks:
            return int(checks[-1]["messages"][0]["bornTimestamp"]) + int(checks[-1]["arrived_ms_after_half_send"])
        return super().time_hint(vec)

    def advance(self, ms: int | None) -> None:
        """Move the clock to ``ms`` through every recorded round before it."""
        if ms is None or ms <= self.clock.now_ms():
            return
        while (round_ms := self.next_round()) <= ms:
            self._round(round_ms)
        assert ms < self.due, f"moving the clock to {ms} would run a check round off Apache's ({self.due})"
        self.clock.set(ms)

    def next_round(self) -> int:
        """The first recorded round at or after the service's next one."""
        k = -((self.anchor - self.due) // self.period)  # ceil((due - anchor) / period)
        return self.anchor + k * self.period

    def _round(self, at: int) -> None:
        done = self.checks.rounds
        self.clock.set(at)
        assert self.checks.wait_rounds(done + 1), f"no check round ran at {at}"
        assert self.round_clock.wait_scheduled(done + 1), f"the round at {at} did not schedule the next"
        self.due = at + self.checks.config.check_interval_ms

    # ------------------------------------------------------------ exchanges

    def unanswered(self, c: Conn, opaque: int) -> tuple[bytes, float] | None:
        """A probe on the same connection: when its answer is in, any answer to ``opaque`` is too."""
        probe = next(self._probes)
        c.send(encode(RemotingCommand(code=int(RequestCode.GET_MAX_OFFSET), opaque=probe, language="JAVA",
                                      version=409, ext_fields={k: str(v) for k, v in PROBE_EXT.items()})))
        assert c.answer(probe, 10.0) is not None, "no answer to the probe"
        return c.answer(opaque, LATE_ANSWER)

    def request_frame(self, name: str) -> bytes:
        """An answer to a check-back echoes the offsets of our check-back for that message, as
        the Java client does (where our copies are not where Apache put them, the mapped
        recorded offsets would name something else); the mapped ones if none came."""
        frame = super().request_frame(name)
        if name not in CHECK_ANSWERS:
            return frame
        msg_id = self.v[name]["request"]["header"]["extFields"]["msgId"]

        def ours(pushed: bytes) -> bool:
            cmd, _ = decode(pushed)
            return cmd.code == CHECK and cmd.ext.get("msgId") == msg_id

        got = self.conn("main").wait_pushed(ours, 1.0)
        if got is None:
            return frame
        check = decode(got[0])[0].ext
        return with_ext(frame, {k: check[k] for k in ("commitLogOffset", "tranStateTableOffset")})

    # ------------------------------------------------------------ comparing

    def recorded_pushes(self, vec: dict[str, Any]) -> list[dict[str, Any]]:
        """Apache's check-backs with their commit-log offsets mapped to ours."""
        trees = super().recorded_pushes(vec)
        for tree in (t for t in trees if t["code"] == CHECK):
            ext = tree["extFields"]
            ext["commitLogOffset"] = str(self.map_phys(int(ext["commitLogOffset"])))
            host, offset = parse_offset_msg_id(ext["offsetMsgId"])
            ext["offsetMsgId"] = offset_msg_id(host, self.map_phys(offset))
            for m in tree.get("messages", []):
                m["commitLogOffset"] = self.map_phys(m["commitLogOffset"])
                if m["preparedTransactionOffset"]:
                    m["preparedTransactionOffset"] = self.map_phys(m["preparedTransactionOffset"])
        return trees

    def replacements(self, ours: bool) -> dict[str, str]:
        """Also the producer connection's address (born hosts) and the broker in offset msgIds."""
        out = super().replacements(ours)
        if ours:
            return {**out, **txn_placeholders(local_address(self.conn("main")),
                                              HostPort(self.broker.advertised_host, self.broker.port))}
        producer = self.v["txn_producer_connection_list"]["response"]["body"]["connectionSet"][0]["clientAddr"]
        host, _, port = self.recorded_broker.rpartition(":")
        return {**out, producer: "<PRODUCER>", offset_msg_id(HostPort(host, int(port)), 0)[:16]: "<BROKER_ID>"}


def local_address(c: Conn) -> str:
    host, port = c.sock.getsockname()[:2]
    return f"{host}:{port}"


def txn_placeholders(producer: str, broker: HostPort) -> dict[str, str]:
    """The producer connection's address (born hosts) and the broker in offset msgIds."""
    return {producer: "<PRODUCER>", offset_msg_id(broker, 0)[:16]: "<BROKER_ID>"}


def txn_scenario(r: TxnReplay) -> None:
    """The ordinary message before the first exchange (opaque 1), then every exchange in order."""
    r.phys[0] = r.send("main", r.name(PLAIN_SUFFIX), PLAIN_BODY, dict(PLAIN_PROPERTIES))
    for name in ORDER:
        r.x(name, "other" if name in OTHER_CONNECTION else "main")


@contextmanager
def txn_run(root: Path, vectors: dict[str, dict] = V) -> Iterator[TxnReplay]:
    """A cluster with the recorded settings on a ``RoundClock``, the whole session replayed on it
    (``vectors``: the 4.9.8 recordings, or another release's answers to the same requests)."""
    clock = RoundClock(start_ms(vectors))
    with EmbeddedCluster(root, clock=clock, transaction_timeout_ms=TIMEOUT_MS,
                         transaction_check_interval_ms=INTERVAL_MS, transaction_check_max=CHECK_MAX) as cluster:
        replay = TxnReplay(cluster, clock, vectors, new_run_id())
        try:
            txn_scenario(replay)
            yield replay
        finally:
            replay.close()
