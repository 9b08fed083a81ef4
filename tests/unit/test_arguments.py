"""The argument types every command line of the package shares (rocketmq_spark/arguments.py)."""

from __future__ import annotations

import argparse

import pytest

from rocketmq_spark.arguments import at_least


@pytest.mark.parametrize("kind,least,most,text,value", [
    (int, 0, None, "0", 0),
    (int, 1, None, "12", 12),
    (int, 1, 256, "256", 256),
    (float, 0.001, None, "0.5", 0.5),
])
def test_values_in_bounds_are_taken(kind: type, least: float, most: float | None, text: str, value: float) -> None:
    got = at_least(least, most=most, kind=kind)(text)
    assert got == value and type(got) is kind


@pytest.mark.parametrize("kind,least,most,text,message", [
    (int, 1, None, "0", "expected an integer >= 1, got '0'"),
    (int, 0, None, "-1", "expected an integer >= 0, got '-1'"),
    (int, 0, None, "many", "expected an integer >= 0, got 'many'"),
    (int, 0, None, "1.5", "expected an integer >= 0, got '1.5'"),
    (int, 1, 1024, "1025", "expected an integer in 1..1024, got '1025'"),
    (int, 1, 1024, "0", "expected an integer in 1..1024, got '0'"),
    (float, 0.001, None, "0", "expected a number >= 0.001, got '0'"),
    (float, 0.001, None, "soon", "expected a number >= 0.001, got 'soon'"),
    (float, 0.001, None, "nan", "expected a number >= 0.001, got 'nan'"),
])
def test_values_out_of_bounds_name_what_is_expected(kind: type, least: float, most: float | None, text: str,
                                                    message: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError) as exc:
        at_least(least, most=most, kind=kind)(text)
    assert str(exc.value) == message
