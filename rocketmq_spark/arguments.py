"""Argument types shared by the package's command lines (the client's subcommands, the
embedded cluster, the example jobs): a bad value is argparse's one-line usage error,
naming the option and what it takes."""

from __future__ import annotations

import argparse
from typing import Callable


def at_least(least: float, *, most: float | None = None, kind: type = int) -> Callable[[str], float]:
    """An argparse type: a number of ``kind`` (int or float) of at least ``least`` (and at
    most ``most``, when given)."""
    what = "an integer" if kind is int else "a number"
    expected = f"{what} >= {least}" if most is None else f"{what} in {least}..{most}"

    def parse(text: str) -> float:
        try:
            value = kind(text)
        except ValueError:
            value = None
        if value is None or not value >= least or (most is not None and not value <= most):  # NaN too
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")
        return value
    return parse
