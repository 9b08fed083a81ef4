"""Sending again while a broker answers busy (SYSTEM_BUSY: nothing was stored): pauses that
grow to a second, within a bound; any other error at once."""

from __future__ import annotations

import pytest

from rocketmq_spark.client.busy import is_busy, while_busy
from rocketmq_spark.errors import BrokerError

BUSY = BrokerError(2, "[TIMEOUT_CLEAN_QUEUE]broker busy, start flow control for a while")


class Clock:
    def __init__(self) -> None:
        self.now = 0.0
        self.pauses: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.pauses.append(seconds)
        self.now += seconds


def test_busy_answers_are_retried_with_growing_pauses_until_one_succeeds() -> None:
    c = Clock()
    answers = [BUSY] * 6 + ["stored"]

    def attempt() -> str:
        a = answers.pop(0)
        if isinstance(a, Exception):
            raise a
        return a
    assert while_busy(attempt, timeout=60, sleep=c.sleep, clock=c) == "stored"
    assert c.pauses == [0.05, 0.1, 0.2, 0.4, 0.8, 1.0]


def test_an_earlier_busy_answer_pauses_first_and_a_lasting_one_is_raised_at_the_bound() -> None:
    c = Clock()
    calls = []

    def attempt() -> str:
        calls.append(c.now)
        raise BUSY
    with pytest.raises(BrokerError, match="broker busy"):
        while_busy(attempt, BUSY, timeout=5, sleep=c.sleep, clock=c)
    assert calls[0] == 0.05 and c.now <= 5 and len(calls) == len(c.pauses)


def test_other_errors_are_not_retried() -> None:
    c = Clock()
    for err in (BrokerError(13, "the message is illegal"), BrokerError(1, "system error")):
        calls = []

        def attempt() -> str:
            calls.append(1)
            raise err
        with pytest.raises(BrokerError) as info:
            while_busy(attempt, sleep=c.sleep, clock=c)
        assert info.value is err and calls == [1] and not is_busy(err)
    with pytest.raises(BrokerError, match="illegal"):
        while_busy(lambda: "never", BrokerError(13, "the message is illegal"), sleep=c.sleep, clock=c)
    assert c.pauses == []
