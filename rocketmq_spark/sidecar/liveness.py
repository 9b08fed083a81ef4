"""Whether a client's process still runs, as the sidecar on the same host sees it.

A lock registration is a lease (``locks``): a reader that dies stops renewing it, and its
queues come free when the lease lapses (90 s) and then the broker's lock expires (60 s).
When the reader runs on the sidecar's host, the sidecar can see sooner that it is gone: a
``ProcessRef`` names the process (pid and start time) and where its pid means that process
(the kernel's boot id and the pid namespace). ``alive`` answers True or False when the ref
was taken in the sidecar's own namespace, and None (cannot tell) anywhere else: another
host, another container, a system without /proc, or a process that /proc hides from the
sidecar (``hidepid``, another user's).
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")


@dataclass(frozen=True)
class ProcessRef:
    boot_id: str        # /proc/sys/kernel/random/boot_id
    pid_namespace: int  # inode of /proc/self/ns/pid
    pid: int
    start_ticks: int    # field 22 of /proc/PID/stat: the start time, in clock ticks after boot


def _boot_id(proc: Path) -> str:
    return (proc / "sys/kernel/random/boot_id").read_text().strip()


def _namespace(proc: Path) -> int:
    return os.stat(proc / "self/ns/pid").st_ino


_EXITED = ("Z", "X")   # states (field 3) of a process of which only its exit status is left


def _stat(pid: int, proc: Path) -> tuple[str, int] | None:
    """(state, start time in clock ticks after boot) of process ``pid``, or None when /proc
    shows no such process."""
    try:
        text = (proc / str(pid) / "stat").read_text()
    except OSError:          # none, or hidden from us
        return None
    # the command name (field 2) is in parentheses and may hold spaces and ')'
    fields = text[text.rindex(")") + 2:].split()
    return fields[0], int(fields[19])   # fields 3 and 22 (fields count from 1)


def start_ticks(pid: int, proc: Path = PROC) -> int | None:
    """The start time of process ``pid``, or None when there is none (or only its exit
    status is left: a zombie)."""
    st = _stat(pid, proc)
    return None if st is None or st[0] in _EXITED else st[1]


@functools.lru_cache(maxsize=1)
def here(proc: Path = PROC) -> tuple[str, int] | None:
    """(boot id, pid namespace) of this process, or None without /proc."""
    try:
        return _boot_id(proc), _namespace(proc)
    except OSError:
        return None


def current(proc: Path = PROC) -> ProcessRef | None:
    """This process, or None where it cannot be named."""
    return _named(os.getpid(), proc)


@functools.lru_cache(maxsize=4)
def _named(pid: int, proc: Path) -> ProcessRef | None:
    where, ticks = here(proc), start_ticks(pid, proc)
    if where is None or ticks is None:
        return None
    return ProcessRef(where[0], where[1], pid, ticks)


def alive(ref: ProcessRef, proc: Path = PROC) -> bool | None:
    """Whether ``ref`` still runs; None when it was taken elsewhere (another host or pid
    namespace), where its pid means nothing here."""
    if here(proc) != (ref.boot_id, ref.pid_namespace):
        return None
    st = _stat(ref.pid, proc)
    if st is None:
        return _unseen(ref.pid)
    return st[0] not in _EXITED and st[1] == ref.start_ticks


def _unseen(pid: int) -> bool | None:
    """A pid /proc does not show: gone (False) when there is no such process, None when
    there is one that /proc hides from us (``hidepid``: another user's)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return None
    return None
