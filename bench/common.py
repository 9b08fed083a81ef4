"""Shared by the benchmarks: an embedded broker in a subprocess, timing, tables."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


@contextmanager
def broker_process(data_dir: str | None = None, *, flush: str = "async",
                   extra: tuple[str, ...] = ()) -> Iterator[str]:
    """``rocketmq-spark broker`` in its own process; yields the NameServer address."""
    tmp = tempfile.mkdtemp(prefix="rmq-bench-") if data_dir is None else data_dir
    proc = subprocess.Popen(
        [sys.executable, "-m", "rocketmq_spark.cli", "broker", "--namesrv-port", "0",
         "--data-dir", tmp, "--flush", flush, *extra],
        stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 60
        addr = None
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                raise RuntimeError("broker exited before it was ready")
            if "nameServer=" in line:
                addr = line.split("nameServer=", 1)[1].split()[0]
                break
        if addr is None:
            raise RuntimeError("broker did not start within 60 s")
        yield addr
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()


class Timer:
    def __enter__(self) -> "Timer":
        self.start = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.seconds = time.perf_counter() - self.start


def table(rows: list[dict[str, object]]) -> str:
    if not rows:
        return "(no rows)"
    cols = list(rows[0])
    widths = {c: max(len(c), *(len(_fmt(r[c])) for r in rows)) for c in cols}
    lines = [" | ".join(c.ljust(widths[c]) for c in cols), "-+-".join("-" * widths[c] for c in cols)]
    lines += [" | ".join(_fmt(r[c]).rjust(widths[c]) for c in cols) for r in rows]
    return "\n".join(lines)


def _fmt(v: object) -> str:
    return f"{v:,.1f}" if isinstance(v, float) else str(v)


def env_int(name: str, default: int) -> int:
    return int(os.environ.get(name, default))
