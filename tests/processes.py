"""Processes of this machine found by what they are, not by asking them (a process busy or
slow on a loaded machine may not answer a health call in time; /proc always does).

    kill_all(pids_in(sidecar_dir, b"rocketmq_spark.sidecar.cli"))
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

from tests.waiting import wait_until


def pids_in(directory: Path, marker: bytes) -> list[int]:
    """Live processes working in ``directory`` (their cwd) whose command line holds
    ``marker``: a sidecar runs in its directory, an executor in its work directory."""
    want = directory.resolve()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if Path(os.readlink(entry / "cwd")) != want:
                continue
            if marker in (entry / "cmdline").read_bytes() and alive(int(entry.name)):
                found.append(int(entry.name))
        except OSError:          # gone meanwhile, or not ours to read
            continue
    return found


def alive(pid: int) -> bool:
    """Running (a zombie is not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def kill_all(pids: list[int], timeout: float = 30.0) -> list[int]:
    """SIGKILL ``pids`` and wait until none runs; the pids signalled."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    wait_until(lambda: not any(alive(p) for p in pids), timeout, f"processes {pids} to die")
    return pids
