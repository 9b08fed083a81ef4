"""5.x timer messages in the embedded broker, over TCP with an injected clock: held in
rmq_sys_wheel_timer, then written to their queue one second after TIMER_OUT_MS (as 5.5.0),
with what the delivered copy carries; MESSAGE_ILLEGAL cases; a delay level wins; a time in
the past is stored at once; waiting messages survive a restart; ``timers=False`` ignores
the properties as 4.x does; the runtime info says which."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rocketmq_spark.embedded import EmbeddedCluster
from rocketmq_spark.embedded.clock import FakeClock
from rocketmq_spark.remoting.codes import RequestCode
from tests.embedded.wire import Wire, max_offset, messages, pull, req, send_msg
from tests.waiting import wait_until

START = 1_700_000_000_300          # .300 s: TIMER_OUT_MS is rounded down to the second
WHEEL = "rmq_sys_wheel_timer"


def runtime(w: Wire) -> dict[str, str]:
    return json.loads(w.request(req(RequestCode.GET_BROKER_RUNTIME_INFO, {})).body)["table"]


@pytest.fixture()
def clock() -> FakeClock:
    return FakeClock(START)


@pytest.fixture()
def timed(tmp_path: Path, clock: FakeClock):  # type: ignore[no-untyped-def]
    c = EmbeddedCluster(tmp_path / "data", namesrv_port=0, topics={"T": 2}, clock=clock).start()
    try:
        yield c
    finally:
        c.stop()


def test_a_timer_message_waits_in_the_wheel_then_arrives_at_its_time(timed, clock) -> None:
    with Wire(timed.broker_addrs["broker-a"]) as w:
        ans = send_msg(w, "T", b"later", queue_id=1, tags="A", props={"TIMER_DELIVER_MS": str(START + 4500)})
        assert ans.code == 0
        assert int(ans.ext["queueOffset"]) == 0                # the wheel's offset, as 5.x answers
        assert max_offset(w, "T", 1) == 0 and max_offset(w, WHEEL, 0) == 1
        [held] = messages(pull(w, "g", WHEEL, 0, 0))
        assert held.properties["TIMER_OUT_MS"] == str(START - 300 + 4000)
        assert (held.properties["REAL_TOPIC"], held.properties["REAL_QID"]) == ("T", "1")
        assert runtime(w)["timerOffsetBehind"] == "1"

        clock.advance(4699)                                    # TIMER_OUT_MS + 1 s not reached yet
        assert max_offset(w, "T", 1) == 0
        clock.advance(1)
        wait_until(lambda: max_offset(w, "T", 1) == 1, 10, "the timer message in T/1")
        [got] = messages(pull(w, "g", "T", 1, 0))
        assert (got.body, got.tags) == (b"later", "A")
        p = got.properties
        assert p["TIMER_DELIVER_MS"] == str(START + 4500) and p["TIMER_OUT_MS"] == str(START + 3700)
        # as 5.5.0: the enqueue time on the second, WAIT as sent
        assert p["TIMER_ENQUEUE_MS"] == str(START - 300) and p["TIMER_DEQUEUE_MS"] == str(START + 4700)
        assert p["WAIT"] == "true"
        assert (p["REAL_TOPIC"], p["REAL_QID"]) == ("T", "1")
        assert got.properties["UNIQ_KEY"] == held.properties["UNIQ_KEY"]
        wait_until(lambda: runtime(w)["timerOffsetBehind"] == "0", 10, "the wheel emptied")


@pytest.mark.parametrize("props, at", [
    ({"TIMER_DELAY_MS": "2000"}, START + 2000),
    ({"TIMER_DELAY_SEC": "2"}, START + 2000),
    ({"TIMER_DELIVER_MS": str(START - 1)}, None),              # in the past: at once
])
def test_delay_ms_delay_sec_and_a_past_time(timed, clock, props, at) -> None:
    with Wire(timed.broker_addrs["broker-a"]) as w:
        assert send_msg(w, "T", b"x", props=props).code == 0
        if at is not None:
            assert max_offset(w, "T", 0) == 0
            clock.set(at // 1000 * 1000 + 1000)
        wait_until(lambda: max_offset(w, "T", 0) == 1, 10, "the message in T/0")
        assert ("TIMER_OUT_MS" in messages(pull(w, "g", "T", 0, 0))[0].properties) == (at is not None)


@pytest.mark.parametrize("value", ["soon", str(START + 259_200_000 + 1)])
def test_a_bad_or_too_distant_time_is_message_illegal(timed, value) -> None:
    with Wire(timed.broker_addrs["broker-a"]) as w:
        ans = send_msg(w, "T", b"x", props={"TIMER_DELIVER_MS": value})
        assert ans.code == 13
        assert ans.remark.startswith("timer message illegal, the delay time should not be bigger than "
                                     "the max delay 259200000ms")
        assert max_offset(w, WHEEL, 0) == 0 and max_offset(w, "T", 0) == 0


def test_a_delay_level_wins_and_drops_the_timer(timed) -> None:
    with Wire(timed.broker_addrs["broker-a"]) as w:
        assert send_msg(w, "T", b"x", props={"DELAY": "1", "TIMER_DELAY_SEC": "60"}).code == 0
        assert max_offset(w, WHEEL, 0) == 0
        [held] = messages(pull(w, "g", "SCHEDULE_TOPIC_XXXX", 0, 0))
        assert "TIMER_DELAY_SEC" not in held.properties


def test_waiting_messages_survive_a_restart_and_are_delivered_once(tmp_path: Path, clock) -> None:
    c = EmbeddedCluster(tmp_path / "data", namesrv_port=0, topics={"T": 1}, clock=clock).start()
    try:
        with Wire(c.broker_addrs["broker-a"]) as w:
            for i, delay in enumerate((1000, 5000, 3000)):
                send_msg(w, "T", b"m%d" % i, props={"TIMER_DELAY_MS": str(delay)})
            clock.advance(2000)                                # the first is due, the others wait
            wait_until(lambda: max_offset(w, "T", 0) == 1, 10, "the first timer message")
        c.stop()
        c = EmbeddedCluster(tmp_path / "data", namesrv_port=0, topics={"T": 1}, clock=clock).start()
        with Wire(c.broker_addrs["broker-a"]) as w:
            assert runtime(w)["timerOffsetBehind"] == "2"
            clock.advance(10_000)
            wait_until(lambda: max_offset(w, "T", 0) == 3, 10, "the other two after the restart")
            assert [m.body for m in messages(pull(w, "g", "T", 0, 0))] == [b"m0", b"m2", b"m1"]
        c.stop()
        c = EmbeddedCluster(tmp_path / "data", namesrv_port=0, topics={"T": 1}, clock=clock).start()
        with Wire(c.broker_addrs["broker-a"]) as w:
            assert runtime(w)["timerOffsetBehind"] == "0"
            assert max_offset(w, "T", 0) == 3                  # nothing delivered twice
    finally:
        c.stop()


def test_without_timers_the_properties_are_ignored_as_on_4x(tmp_path: Path) -> None:
    with EmbeddedCluster(tmp_path / "data", namesrv_port=0, topics={"T": 1}, timers=False) as c, \
            Wire(c.broker_addrs["broker-a"]) as w:
        assert "timerReadBehind" not in runtime(w)
        assert send_msg(w, "T", b"x", props={"TIMER_DELAY_SEC": "3600"}).code == 0
        [got] = messages(pull(w, "g", "T", 0, 0))
        assert got.properties["TIMER_DELAY_SEC"] == "3600" and "TIMER_OUT_MS" not in got.properties
