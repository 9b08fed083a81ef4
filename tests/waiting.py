"""Waiting on a condition in tests: poll, never a fixed sleep as synchronisation."""

from __future__ import annotations

import time
from typing import Any, Callable


class WaitTimeout(AssertionError, TimeoutError):
    """A condition not met in time: a test failure (AssertionError) that code waiting in
    rounds can catch as a TimeoutError."""


def wait_until(pred: Callable[[], Any], timeout: float = 30.0, what: str = "condition",
               poll: float = 0.05) -> Any:
    """``pred()``'s first truthy value, polled every ``poll`` s; ``WaitTimeout`` naming
    ``what`` once ``timeout`` seconds have passed."""
    deadline = time.monotonic() + timeout
    while True:
        got = pred()
        if got:
            return got
        if time.monotonic() >= deadline:
            raise WaitTimeout(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(poll)


def await_finished(q: Any, timeout: float) -> Any:
    """Wait for a query that ends by itself (Trigger.AvailableNow); stop it if it does not
    within ``timeout``. AssertionError when it timed out or failed; else the query."""
    try:
        assert q.awaitTermination(timeout), f"query did not finish within {timeout:g} s"
    finally:
        if q.isActive:
            q.stop()
    if q.exception() is not None:
        raise AssertionError(f"query failed: {q.exception()}")
    return q
