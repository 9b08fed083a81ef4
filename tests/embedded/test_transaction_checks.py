"""Transactional messages beyond the recorded session: when check-backs come (a fake clock
drives the broker's rounds), where they go, immunity times, restarts in process and
``kill -9`` of a broker subprocess, and our own client end to end over TCP."""

from __future__ import annotations

import json
import signal
import threading
import time
from pathlib import Path
from typing import Iterator

import pytest

from rocketmq_spark.client import ClientConfig, MQClient
from rocketmq_spark.embedded import EmbeddedCluster, FakeClock
from rocketmq_spark.embedded.half_messages import CHECK_GROUP
from rocketmq_spark.errors import ConfigError
from rocketmq_spark.remoting.codes import (SCHEDULE_TOPIC, TRANS_CHECK_MAX_TIME_TOPIC, TRANS_HALF_TOPIC, RequestCode,
                                           ResponseCode, TransactionState)
from rocketmq_spark.remoting.command import RemotingCommand
from rocketmq_spark.remoting.headers import SendMessageRequestHeader
from rocketmq_spark.remoting.message import decode_messages, encode_properties, parse_offset_msg_id
from rocketmq_spark.remoting.route import MessageQueue
from tests.embedded.test_durability import broker_addr, start_broker
from tests.embedded.txn_session import checks_of, probe
from tests.embedded.wire import Wire, heartbeat, max_offset, messages, pull, req, send_msg, wait_for

GROUP = "txpg"
TOPIC = "txt"


def send_half(w: Wire, body: bytes, *, born: int, group: str = GROUP, topic: str = TOPIC, queue_id: int = 1,
              props: dict[str, str] | None = None) -> tuple[int, int, str]:
    """A half message as the Java producer sends it: (commit-log offset, half offset, offset msgId)."""
    ans = send_msg(w, topic, body, queue_id=queue_id, group=group, sys_flag=4, extra={"bornTimestamp": born},
                   props={"TRAN_MSG": "true", "PGROUP": group, **(props or {})})
    assert ans.code == 0, ans.remark
    return parse_offset_msg_id(ans.ext["msgId"])[1], int(ans.ext["queueOffset"]), ans.ext["msgId"]


def end(w: Wire, clo: int, half_offset: int, state: int, *, group: str = GROUP,
        from_check: bool = False) -> RemotingCommand:
    """END_TRANSACTION as a normal request (the Java producer sends it oneway)."""
    return w.request(req(RequestCode.END_TRANSACTION, {
        "producerGroup": group, "tranStateTableOffset": half_offset, "commitLogOffset": clo,
        "commitOrRollback": state, "msgId": "x", "fromTransactionCheck": str(from_check).lower()}))


@pytest.fixture()
def clock() -> FakeClock:
    return FakeClock(1_800_000_000_000)


@pytest.fixture()
def txc(tmp_path: Path, clock: FakeClock) -> Iterator[EmbeddedCluster]:
    with EmbeddedCluster(tmp_path / "data", clock=clock, topics={TOPIC: 4}, transaction_timeout_ms=2000,
                         transaction_check_interval_ms=3000, transaction_check_max=3) as c:
        yield c


def next_round(c: EmbeddedCluster, clock: FakeClock, ms: int = 3000) -> None:
    service = c.brokers["broker-a"].transaction_checks
    done = service.rounds
    clock.advance(ms)
    assert service.wait_rounds(done + 1)


def test_first_check_back_waits_for_the_transaction_timeout(txc: EmbeddedCluster, clock: FakeClock) -> None:
    with Wire(txc.broker_addrs["broker-a"]) as w:
        heartbeat(w, "p1", producer_group=GROUP)
        clock.advance(1500)
        send_half(w, b"young", born=clock.now_ms())
        next_round(txc, clock, 1500)       # the first round: the message is 1500 ms old
        probe(w)
        assert checks_of(w) == []
        next_round(txc, clock)             # 4500 ms old
        w.wait_pushed(lambda c: c.code == RequestCode.CHECK_TRANSACTION_STATE)
        [check] = checks_of(w)
        assert decode_messages(check.body)[0].properties["TRANSACTION_CHECK_TIMES"] == "1"


def test_resolved_half_messages_are_never_checked(txc: EmbeddedCluster, clock: FakeClock) -> None:
    with Wire(txc.broker_addrs["broker-a"]) as w:
        heartbeat(w, "p1", producer_group=GROUP)
        a = send_half(w, b"commit", born=clock.now_ms())
        b = send_half(w, b"rollback", born=clock.now_ms())
        assert end(w, a[0], a[1], TransactionState.COMMIT).code == 0
        ans = end(w, b[0], b[1], TransactionState.ROLLBACK)
        assert (ans.code, ans.remark) == (0, "not set any response code")
        for _ in range(3):
            next_round(txc, clock)
        probe(w)
        assert checks_of(w) == []
        assert [m.body for m in messages(pull(w, "g", TOPIC, 1, 0))] == [b"commit"]


def test_check_backs_go_round_the_groups_connections(txc: EmbeddedCluster, clock: FakeClock) -> None:
    addr = txc.broker_addrs["broker-a"]
    with Wire(addr) as w1, Wire(addr) as w2, Wire(addr) as consumer:
        heartbeat(w1, "p1", producer_group=GROUP)
        heartbeat(w2, "p2", producer_group=GROUP)
        heartbeat(consumer, "c1", "cg", {TOPIC: "*"})
        for i in range(4):
            send_half(w1, b"m%d" % i, born=clock.now_ms())
        next_round(txc, clock)
        wait_for(lambda: len(checks_of(w1)) + len(checks_of(w2)) == 4)
        assert len(checks_of(w1)) == len(checks_of(w2)) == 2
        assert checks_of(consumer) == []


def test_no_live_producer_no_check_back_but_the_count_grows(txc: EmbeddedCluster, clock: FakeClock) -> None:
    addr = txc.broker_addrs["broker-a"]
    gone = Wire(addr)
    heartbeat(gone, "p1", producer_group=GROUP)
    gone.close()
    broker = txc.brokers["broker-a"]
    wait_for(lambda: broker.clients.producer_channels(GROUP) == [])
    with Wire(addr) as w:
        send_half(w, b"orphan", born=clock.now_ms())
        for _ in range(3):
            next_round(txc, clock)
        assert checks_of(w) == []
        moved = messages(pull(w, "g", TRANS_CHECK_MAX_TIME_TOPIC, 0, 0))
        assert [(m.body, m.properties["TRANSACTION_CHECK_TIMES"]) for m in moved] == [(b"orphan", "3")]
        # The group is still known, with no connection; a group nobody registered is not.
        ans = w.request(req(RequestCode.GET_PRODUCER_CONNECTION_LIST, {"producerGroup": GROUP}))
        assert (ans.code, ans.body) == (0, b'{"connectionSet":[]}')
        ans = w.request(req(RequestCode.GET_PRODUCER_CONNECTION_LIST, {"producerGroup": "nobody"}))
        assert (ans.code, ans.remark) == (ResponseCode.SYSTEM_ERROR, "the producer group[nobody] not exist")


def test_producer_connection_list_follows_heartbeats_and_unregistering(txc: EmbeddedCluster) -> None:
    def listed(w: Wire) -> list[str] | str:
        ans = w.request(req(RequestCode.GET_PRODUCER_CONNECTION_LIST, {"producerGroup": GROUP}))
        return [c["clientId"] for c in json.loads(ans.body)["connectionSet"]] if ans.code == 0 else str(ans.remark)

    with Wire(txc.broker_addrs["broker-a"]) as w:
        assert listed(w) == f"the producer group[{GROUP}] not exist"
        heartbeat(w, "p1", producer_group=GROUP)
        assert listed(w) == ["p1"]
        ans = w.request(req(RequestCode.UNREGISTER_CLIENT, {"clientID": "p1", "producerGroup": GROUP}))
        assert ans.code == 0
        assert listed(w) == f"the producer group[{GROUP}] not exist"


def test_immunity_time_holds_check_backs_back(tmp_path: Path, clock: FakeClock) -> None:
    """CHECK_IMMUNITY_TIME_IN_SECONDS=10: no check-back while younger; each round puts a copy
    back naming the first offset (TRAN_PREPARED_QUEUE_OFFSET, WAIT=false); older, it is
    checked back. As in 4.9.8, an op message for the first offset only counts while the
    check progress has not passed that offset, so a commit made once copies exist does
    not spare them a check-back (the producer's answer decides)."""
    with EmbeddedCluster(tmp_path / "d", clock=clock, topics={TOPIC: 4}, transaction_timeout_ms=2000,
                         transaction_check_interval_ms=3000, transaction_check_max=15) as c, \
            Wire(c.broker_addrs["broker-a"]) as w:
        heartbeat(w, "p1", producer_group=GROUP)
        held = send_half(w, b"held", born=clock.now_ms(), props={"CHECK_IMMUNITY_TIME_IN_SECONDS": "10"})
        committed = send_half(w, b"committed", born=clock.now_ms(),
                              props={"CHECK_IMMUNITY_TIME_IN_SECONDS": "10"})
        for _ in range(3):                  # 3, 6, 9 s old
            next_round(c, clock)
        probe(w)
        assert checks_of(w) == []
        copies = messages(pull(w, "g", TRANS_HALF_TOPIC, 0, 2))
        assert [(m.body, m.properties["TRAN_PREPARED_QUEUE_OFFSET"], m.properties["WAIT"]) for m in copies] == \
            [(b"held", "0", "false"), (b"committed", "1", "false")] * 3
        assert end(w, committed[0], committed[1], TransactionState.COMMIT).code == 0
        next_round(c, clock)                # 12 s old: both are asked about
        wait_for(lambda: len(checks_of(w)) == 2)
        bodies = [decode_messages(chk.body)[0] for chk in checks_of(w)]
        assert [(m.body, m.properties["TRANSACTION_CHECK_TIMES"]) for m in bodies] == \
            [(b"held", "4"), (b"committed", "4")]
        assert held[1] == 0


def test_commit_honours_delay_and_ignores_it_while_pending(txc: EmbeddedCluster, clock: FakeClock) -> None:
    with Wire(txc.broker_addrs["broker-a"]) as w:
        clo, offset, _ = send_half(w, b"later", born=clock.now_ms(), props={"DELAY": "1"})
        assert max_offset(w, TRANS_HALF_TOPIC, 0) == 1 and max_offset(w, SCHEDULE_TOPIC, 0) == 0
        assert end(w, clo, offset, TransactionState.COMMIT).code == 0
        assert max_offset(w, SCHEDULE_TOPIC, 0) == 1 and max_offset(w, TOPIC, 1) == 0


def test_end_transaction_checks_its_header(txc: EmbeddedCluster) -> None:
    with Wire(txc.broker_addrs["broker-a"]) as w:
        ans = w.request(req(RequestCode.END_TRANSACTION, {"tranStateTableOffset": 0, "commitLogOffset": 0,
                                                          "commitOrRollback": 8, "msgId": "x"}))
        assert (ans.code, ans.remark) == (ResponseCode.SYSTEM_ERROR, "the custom field <producerGroup> is null")


def test_settings_are_checked() -> None:
    with pytest.raises(ConfigError, match="interval"):
        EmbeddedCluster("/nonexistent", transaction_check_interval_ms=0)
    with pytest.raises(ConfigError, match="timeout"):
        EmbeddedCluster("/nonexistent", transaction_timeout_ms=-1)


def test_restart_keeps_queues_progress_and_unindexed_messages(tmp_path: Path, clock: FakeClock) -> None:
    """Stopped and started again (in process): the half queue, the check progress and the
    counts go on; a sysFlag-4 message without TRAN_MSG stays out of the consume queue."""
    c = EmbeddedCluster(tmp_path / "d", clock=clock, topics={TOPIC: 4}, transaction_timeout_ms=2000,
                        transaction_check_interval_ms=3000, transaction_check_max=15).start()
    try:
        addr = c.broker_addrs["broker-a"]
        with Wire(addr) as w:
            heartbeat(w, "p1", producer_group=GROUP)
            half = send_half(w, b"pending", born=clock.now_ms())
            assert send_msg(w, TOPIC, b"flag only", queue_id=3, sys_flag=4).code == 0
            next_round(c, clock)
            w.wait_pushed(lambda cmd: cmd.code == RequestCode.CHECK_TRANSACTION_STATE)
        c.stop()
        c.start()
        addr = c.broker_addrs["broker-a"]
        with Wire(addr) as w:
            assert max_offset(w, TOPIC, 3) == 0 and max_offset(w, TRANS_HALF_TOPIC, 0) == 2
            progress = w.request(req(RequestCode.QUERY_CONSUMER_OFFSET, {
                "consumerGroup": CHECK_GROUP, "topic": TRANS_HALF_TOPIC, "queueId": 0}))
            assert progress.ext["offset"] == "1"
            heartbeat(w, "p1", producer_group=GROUP)
            next_round(c, clock)
            check = w.wait_pushed(lambda cmd: cmd.code == RequestCode.CHECK_TRANSACTION_STATE)
            assert check.ext["tranStateTableOffset"] == "2"
            assert decode_messages(check.body)[0].properties["TRANSACTION_CHECK_TIMES"] == "2"
            assert end(w, half[0], half[1], TransactionState.COMMIT).code == 0
            assert [m.body for m in messages(pull(w, "g", TOPIC, 1, 0))] == [b"pending"]
    finally:
        c.stop()


# ---------------------------------------------------------------- our client, over TCP

def test_our_client_end_to_end(tmp_path: Path) -> None:
    """MQClient registers a producer group, sends half messages, commits one itself and
    answers the broker's check-back for the other with COMMIT: both arrive, once each."""
    with EmbeddedCluster(tmp_path / "d", topics={TOPIC: 4}, transaction_timeout_ms=300,
                         transaction_check_interval_ms=1000) as c, \
            MQClient(ClientConfig.parse(c.namesrv_addr, request_timeout=5.0)) as client:
        addr = c.broker_addrs["broker-a"]
        asked: list[RemotingCommand] = []

        def on_check(_address: str, cmd: RemotingCommand) -> None:
            asked.append(cmd)
            threading.Thread(target=client.invoke, args=(addr, RequestCode.END_TRANSACTION, {
                "producerGroup": GROUP, "tranStateTableOffset": cmd.ext["tranStateTableOffset"],
                "commitLogOffset": cmd.ext["commitLogOffset"], "msgId": cmd.ext["msgId"],
                "commitOrRollback": str(TransactionState.COMMIT), "fromTransactionCheck": "true"})).start()

        client.set_request_handler(RequestCode.CHECK_TRANSACTION_STATE, on_check)
        client.heartbeat(producer_groups=[GROUP], addresses=[addr])
        sent = {}
        for body in (b"committed by us", b"committed on check-back"):
            props = encode_properties({"TRAN_MSG": "true", "PGROUP": GROUP, "UNIQ_KEY": body.hex()[:32].upper()})
            header = SendMessageRequestHeader(GROUP, TOPIC, queue_id=2, sys_flag=4,
                                              born_timestamp=int(time.time() * 1000), properties=props)
            ans = client.invoke(addr, RequestCode.SEND_MESSAGE_V2, header.to_v2_ext(), body)
            sent[body] = (parse_offset_msg_id(ans.ext["msgId"])[1], int(ans.ext["queueOffset"]))
        clo, offset = sent[b"committed by us"]
        client.invoke(addr, RequestCode.END_TRANSACTION, {
            "producerGroup": GROUP, "tranStateTableOffset": str(offset), "commitLogOffset": str(clo),
            "msgId": "x", "commitOrRollback": str(TransactionState.COMMIT), "fromTransactionCheck": "false"})
        mq = MessageQueue(TOPIC, "broker-a", 2)
        wait_for(lambda: client.max_offset(mq) == 2, 10)
        service = c.brokers["broker-a"].transaction_checks
        assert service.wait_rounds(service.rounds + 2)   # two more rounds: nothing else may arrive
        got = client.pull(mq, 0, group="g").messages
        assert sorted(m.body for m in got) == [b"committed by us", b"committed on check-back"]
        assert client.max_offset(mq) == 2
        assert [decode_messages(a.body)[0].body for a in asked] == [b"committed on check-back"]


# ---------------------------------------------------------------- kill -9

def half_offsets_saved(data: Path) -> int:
    try:
        table = json.loads((data / "broker-a" / "config" / "consumerOffset.json").read_text())["offsetTable"]
    except (OSError, ValueError, KeyError):
        return -1
    return int(table.get(f"{TRANS_HALF_TOPIC}@{CHECK_GROUP}", {}).get("0", -1))


def test_kill_9_keeps_half_messages_and_check_progress(tmp_path: Path) -> None:
    """A broker subprocess SIGKILLed with two half messages pending, one already checked
    back: after the restart the other, committed, is delivered exactly once; the checked
    one is checked back again (its count goes on) and delivered once on COMMIT. (Check-backs
    the test leaves unanswered go on; they deliver nothing.)"""
    data, log = tmp_path / "data", tmp_path / "broker.log"
    flags = ("--transaction-timeout-ms", "2000", "--transaction-check-interval-ms", "300",
             "--transaction-check-max", "100", "--topic", f"{TOPIC}:4")
    proc, ns = start_broker(data, log, *flags)
    try:
        addr = broker_addr(ns, TOPIC)
        with Wire(addr) as w:
            heartbeat(w, "p1", producer_group=GROUP)
            now = int(time.time() * 1000)
            send_half(w, b"checked back", born=now - 60_000)      # due at once
            later = send_half(w, b"committed after the restart", born=now)
            check = w.wait_pushed(lambda cmd: cmd.code == RequestCode.CHECK_TRANSACTION_STATE, timeout=10)
            assert decode_messages(check.body)[0].body == b"checked back"
            assert wait_for(lambda: half_offsets_saved(data) >= 1, 10)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        proc, ns = start_broker(data, log, *flags)
        addr = broker_addr(ns, TOPIC)
        with Wire(addr) as w:
            heartbeat(w, "p2", producer_group=GROUP)
            assert end(w, later[0], later[1], TransactionState.COMMIT).code == 0    # by its send's offsets
            again = w.wait_pushed(lambda cmd: cmd.code == RequestCode.CHECK_TRANSACTION_STATE
                                  and decode_messages(cmd.body)[0].body == b"checked back", timeout=10)
            [body] = decode_messages(again.body)
            assert int(body.properties["TRANSACTION_CHECK_TIMES"]) >= 2
            assert int(again.ext["tranStateTableOffset"]) > int(check.ext["tranStateTableOffset"])
            assert end(w, int(again.ext["commitLogOffset"]), int(again.ext["tranStateTableOffset"]),
                       TransactionState.COMMIT, from_check=True).code == 0
            time.sleep(1.0)  # three more rounds: whatever they ask, nothing is delivered again
            probe(w)
            delivered = [m.body for m in messages(pull(w, "g", TOPIC, 1, 0))]
            assert sorted(delivered) == [b"checked back", b"committed after the restart"]
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(20)
