"""The recorded transaction session (``vectors/apache-broker-txn``) replayed on an embedded
broker, so that tests can compare every answer and check-back with Apache 4.9.8's.

The 40 exchanges are sent in the order they were recorded (their opaques), each as its
recorded frame with this run's names (the recording's run id swapped for one of the same
length, so batch bodies stay valid), born timestamps from the fake clock and the
commit-log offsets our broker gave (``clo``: recorded offset -> ours). Time moves as it
did: the broker runs with the recorded settings (transactionTimeOut 2000 ms,
transactionCheckInterval 3000 ms, transactionCheckMax 3) on a FakeClock that the
session moves by one interval before each recorded check-back answer. A oneway request,
or one Apache never answers, is followed by a probe on the same connection: once the
probe's answer is in, the request was handled and any answer to it would be in too.
Queue offsets need no mapping: a fresh broker gives the recording's first run's offsets.
"""

from __future__ import annotations

import random
import string
from dataclasses import dataclass, field
from pathlib import Path

from rocketmq_spark.embedded import EmbeddedCluster, FakeClock
from rocketmq_spark.remoting.codes import FLAG_ONEWAY, RequestCode
from rocketmq_spark.remoting.command import RemotingCommand, decode
from rocketmq_spark.remoting.message import parse_offset_msg_id
from tests.embedded.wire import Wire, req, send_msg
from tests.txn_recording import (CHECK_ANSWERS, CHECK_MAX, INTERVAL_MS, NEVER_ANSWERED, ORDER, OTHER_CONNECTION,
                                 PLAIN_BODY, PLAIN_PROPERTIES, PLAIN_SUFFIX, RECORDED_RUN, TIMEOUT_MS, V)
from tests.vectors import map_commit_log_offset


def new_run_id() -> str:
    return "".join(random.choices(string.ascii_lowercase + string.digits, k=len(RECORDED_RUN)))


@dataclass
class TxnSession:
    cluster: EmbeddedCluster
    clock: FakeClock
    run: str
    producer: Wire
    other: Wire
    answers: dict[str, RemotingCommand | None] = field(default_factory=dict)
    checks: dict[str, RemotingCommand] = field(default_factory=dict)   # answer name -> the check it answers
    clo: dict[int, int] = field(default_factory=dict)                   # recorded commit-log offset -> ours
    plain_clo: int = -1

    @property
    def broker(self):  # noqa: ANN201 - the Broker
        return self.cluster.brokers["broker-a"]

    def rename(self, text: str) -> str:
        return text.replace(RECORDED_RUN, self.run)

    def ours(self, recorded: int) -> int:
        """Our commit-log offset for a recorded one (or one inside it, or past the end)."""
        return map_commit_log_offset(self.clo, recorded)

    def request(self, name: str) -> RemotingCommand:
        """The recorded request of ``name`` with this run's names, clock and offsets."""
        cmd, _ = decode(bytes.fromhex(V[name]["request"]["frame_hex"]))
        ext = {k: self.rename(v) for k, v in cmd.ext.items()}
        if cmd.code in (RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE):
            ext["g"] = str(self.clock.now_ms())
        if cmd.code == RequestCode.END_TRANSACTION:
            ext["commitLogOffset"] = str(self.ours(int(ext["commitLogOffset"])))
        return RemotingCommand(code=cmd.code, flag=cmd.flag, ext_fields=ext if cmd.ext_fields is not None else None,
                               body=cmd.body.replace(RECORDED_RUN.encode(), self.run.encode()),
                               language=cmd.language, version=cmd.version, serialize_type=cmd.serialize_type)

    def exchange(self, name: str) -> RemotingCommand | None:
        conn = self.other if name in OTHER_CONNECTION else self.producer
        cmd = self.request(name)
        opaque = conn.send(cmd)
        if cmd.flag & FLAG_ONEWAY or name in NEVER_ANSWERED:
            probe(conn)
            answer = conn.answer(opaque, timeout=0.2) if conn.has_answer(opaque) else None
        else:
            answer = conn.answer(opaque)
        self.answers[name] = answer
        recorded = V[name]["response"]
        if answer is not None and recorded is not None and "msgId" in answer.ext:
            for theirs, mine in zip(recorded["extFields"]["msgId"].split(","), answer.ext["msgId"].split(",")):
                self.clo[parse_offset_msg_id(theirs)[1]] = parse_offset_msg_id(mine)[1]
        return answer

    def check_round(self, answer_name: str) -> RemotingCommand:
        """Move the clock one interval, let the broker's round run, return the check-back
        it sent for ``answer_name`` (the recorded END_TRANSACTION that answers it)."""
        seen = sum(1 for p in self.producer.pushed if p.code == RequestCode.CHECK_TRANSACTION_STATE)
        rounds = self.broker.transaction_checks.rounds
        self.clock.advance(INTERVAL_MS)
        assert self.broker.transaction_checks.wait_rounds(rounds + 1)
        self.producer.wait_pushed(lambda _c: len(checks_of(self.producer)) > seen)
        check = checks_of(self.producer)[seen]
        self.checks[answer_name] = check
        recorded = V[answer_name]["server_requests_seen"][0]
        self.clo[int(recorded["extFields"]["commitLogOffset"])] = int(check.ext["commitLogOffset"])
        return check


def checks_of(w: Wire) -> list[RemotingCommand]:
    return [p for p in list(w.pushed) if p.code == RequestCode.CHECK_TRANSACTION_STATE]


def probe(conn: Wire) -> None:
    """A request answered after everything sent before it on ``conn`` was handled."""
    assert conn.request(req(RequestCode.GET_MAX_OFFSET, {"topic": "TBW102", "queueId": 0})).code == 0


def run_session(data_dir: Path) -> TxnSession:
    """Start a broker with the recorded settings and replay the whole recording on it."""
    clock = FakeClock(1_795_636_600_000)
    cluster = EmbeddedCluster(data_dir, clock=clock, transaction_timeout_ms=TIMEOUT_MS,
                              transaction_check_interval_ms=INTERVAL_MS, transaction_check_max=CHECK_MAX).start()
    addr = cluster.broker_addrs["broker-a"]
    s = TxnSession(cluster, clock, new_run_id(), Wire(addr), Wire(addr))
    # Before the first recorded exchange: an ordinary message to another topic, at
    # commit-log offset 0 (what txn_end_offset_of_normal_message names).
    plain = send_msg(s.producer, s.rename(f"rec_{RECORDED_RUN}_{PLAIN_SUFFIX}"), PLAIN_BODY, queue_id=0,
                     props=PLAIN_PROPERTIES, uniq=False)
    s.clo[0] = s.plain_clo = parse_offset_msg_id(plain.ext["msgId"])[1]
    for name in ORDER:
        if name in CHECK_ANSWERS:
            s.check_round(name)
        s.exchange(name)
    return s


def close_session(s: TxnSession) -> None:
    s.producer.close()
    s.other.close()
    s.cluster.stop()
