"""What a sidecar runtime directory tells about the sidecars that ran in it.

The sidecar's log (``sidecar.log``, appended to by every sidecar spawned there) has one
``sidecar listening on ... (pid N, ...)`` line per start and one ``served pull TOPIC/BROKER/Q
[START, END) group G: N rows`` line per range it read to the end.
"""

from __future__ import annotations

import os
import re
import signal
from dataclasses import dataclass
from pathlib import Path

from bench.common import sidecar_pid as live_pid  # noqa: F401 - re-exported

_START = re.compile(r"sidecar listening on \S+ \(pid (\d+),")
_SERVED = re.compile(r"served pull (\S+)/(\S+)/(\d+) \[(\d+), (\d+)\) group (\S+): (\d+) rows")


@dataclass(frozen=True)
class Served:
    topic: str
    broker: str
    queue_id: int
    start: int
    end: int
    group: str
    rows: int


def log_text(d: Path) -> str:
    p = d / "sidecar.log"
    return p.read_text(errors="replace") if p.exists() else ""


def started_pids(d: Path) -> list[int]:
    """Pids of the sidecars that started in ``d``, in order."""
    return [int(m.group(1)) for m in _START.finditer(log_text(d))]


def served(d: Path, *, latest_only: bool = False) -> list[Served]:
    """Ranges the sidecars of ``d`` read to the end (``latest_only``: the last one started)."""
    text = log_text(d)
    if latest_only:
        starts = list(_START.finditer(text))
        text = text[starts[-1].end():] if starts else ""
    return [Served(m[1], m[2], int(m[3]), int(m[4]), int(m[5]), m[6], int(m[7]))
            for m in _SERVED.finditer(text)]


def kill9(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
