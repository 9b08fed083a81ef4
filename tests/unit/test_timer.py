"""Timer messages without I/O: the precedence of the three properties, the time a broker
keeps (rounded down to the second), the MESSAGE_ILLEGAL cases, detecting a timer store."""

from __future__ import annotations

import pytest

from rocketmq_spark.remoting import timer

NOW = 1_700_000_000_500


@pytest.mark.parametrize("props, want", [
    ({"TIMER_DELIVER_MS": "1700000009000"}, 1_700_000_009_000),
    ({"TIMER_DELAY_MS": "2500"}, NOW + 2500),
    ({"TIMER_DELAY_SEC": "3"}, NOW + 3000),
    # seconds first, then ms, then the time (HookUtils.transformTimerMessage)
    ({"TIMER_DELIVER_MS": "1", "TIMER_DELAY_MS": "7", "TIMER_DELAY_SEC": "2"}, NOW + 2000),
    ({"TIMER_DELIVER_MS": "1", "TIMER_DELAY_MS": "7"}, NOW + 7),
])
def test_the_time_asked_for(props, want):
    assert timer.is_timed(props)
    assert timer.deliver_ms(props, NOW) == want


@pytest.mark.parametrize("raw", ["soon", " 5", "1_000", "", "1.5"])
def test_a_value_that_is_not_a_long_is_illegal(raw):
    with pytest.raises(timer.TimerIllegal, match="is not a number"):
        timer.deliver_ms({"TIMER_DELAY_MS": raw}, NOW)


def test_the_wheel_time_is_rounded_down_and_bounded():
    assert timer.wheel_time(NOW + 1700, NOW) == 1_700_000_002_000
    assert timer.wheel_time(1_700_000_003_000, NOW) == 1_700_000_002_000   # on the second: one earlier
    assert timer.wheel_time(NOW, NOW) is None                              # not ahead: at once
    assert timer.wheel_time(NOW - 10, NOW) is None
    assert timer.wheel_time(NOW + 259_200_000, NOW) is not None
    with pytest.raises(timer.TimerIllegal):
        timer.wheel_time(NOW + 259_200_001, NOW)
    assert "max delay 259200000ms" in timer.illegal_remark()


def test_a_delivered_copy_and_plain_messages_are_not_timed():
    assert not timer.is_timed({"TIMER_DELIVER_MS": "5", "TIMER_OUT_MS": "4"})
    assert not timer.is_timed({"KEYS": "k"})


def test_a_timer_store_shows_in_the_runtime_info():
    assert timer.has_timers({"brokerVersionDesc": "V5_5_0", "timerReadBehind": "0", "timerOffsetBehind": "0"})
    assert not timer.has_timers({"brokerVersionDesc": "V4_9_7", "scheduleMessageOffset_1": "1,1"})
