"""Gates: hold chosen requests at the broker's door, for fault tests.

A test puts a ``Gate`` on a broker (``broker.gates.append(gate)``) to stop the world at an
exact point: the first ``after`` requests that ``match`` pass, the next one waits (its
connection's reader blocks, so nothing after it on that connection is handled either) until
the test ``open()``s the gate, and the test learns it is waiting (``wait_held``). A held
request whose connection closed meanwhile (its client was killed) is dropped, never handled:
the request never reached the broker, as far as anyone can tell. Nothing holds while no gate
is set.
"""

from __future__ import annotations

import threading
from typing import Callable

from rocketmq_spark.remoting.command import RemotingCommand

Match = Callable[[RemotingCommand], bool]


class Gate:
    def __init__(self, match: Match, *, after: int = 0) -> None:
        self.match = match
        self.after = after
        self.passed = 0
        self._held = threading.Event()
        self._open = threading.Event()
        self._mutex = threading.Lock()

    def admit(self, cmd: RemotingCommand, gone: Callable[[], bool]) -> bool:
        """True to handle ``cmd``; blocks while it is held; False when its connection closed
        or its peer hung up (``gone``) meanwhile."""
        if self._open.is_set() or not self.match(cmd):
            return True
        with self._mutex:
            if self.passed < self.after:
                self.passed += 1
                return True
        self._held.set()
        while not self._open.wait(0.05):
            if gone():
                return False
        return not gone()

    def wait_held(self, timeout: float) -> bool:
        return self._held.wait(timeout)

    def open(self) -> None:
        self._open.set()
