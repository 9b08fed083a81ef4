"""Embedded brokers in processes of their own (``rocketmq-spark broker --join``), for tests
that kill one with SIGKILL and start it again on its directory."""

from __future__ import annotations

import os
import re
import selectors
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
START_TIMEOUT = 60.0


@dataclass
class JoinedBroker:
    """One broker process: ``start`` (again after ``kill``) on the same ``data_dir``."""

    namesrv: str
    name: str
    broker_id: int
    data_dir: Path
    extra: tuple[str, ...] = ()
    proc: subprocess.Popen | None = None
    addr: str = ""
    log: Path = field(init=False)

    def __post_init__(self) -> None:
        self.log = self.data_dir.parent / f"{self.data_dir.name}.log"

    def start(self) -> "JoinedBroker":
        assert not self.running(), f"{self.name}-{self.broker_id} runs already"
        with open(self.log, "ab") as err:        # the child keeps its own descriptor
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "rocketmq_spark.cli", "broker", "--join", self.namesrv, "--broker-name",
                 self.name, "--broker-id", str(self.broker_id), "--data-dir", str(self.data_dir), *self.extra],
                stdout=subprocess.PIPE, stderr=err, cwd=ROOT, text=True)
        assert self.proc.stdout is not None
        with selectors.DefaultSelector() as sel:
            sel.register(self.proc.stdout, selectors.EVENT_READ)
            ready = sel.select(timeout=START_TIMEOUT)
        line = self.proc.stdout.readline() if ready else ""
        match = re.search(rf"{re.escape(self.name)}=(\S+) brokerId={self.broker_id} ", line)
        if not match:
            self.kill()
            raise AssertionError(f"{self.name}-{self.broker_id} did not start: {line!r}; log: {self.log.read_text()}")
        self.addr = match.group(1)
        return self

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL, as a machine that dies."""
        if self.proc is not None:
            if self.proc.poll() is None:
                os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(30)
            assert self.proc.stdout is not None
            self.proc.stdout.close()

    def stop(self) -> int | None:
        """SIGTERM: the broker unregisters and exits; its exit code."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.kill()
            code = None
        assert self.proc.stdout is not None
        self.proc.stdout.close()
        return code
