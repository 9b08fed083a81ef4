"""Whether a lock holder's process still runs, as the sidecar on its host sees it."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

from rocketmq_spark.sidecar import liveness
from rocketmq_spark.sidecar.liveness import ProcessRef


def test_this_process_is_alive() -> None:
    me = liveness.current()
    assert me is not None and liveness.alive(me) is True


def test_a_process_that_exited_is_gone() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                             stdin=subprocess.PIPE)
    ref = liveness._named(child.pid, liveness.PROC)
    assert ref is not None and liveness.alive(ref) is True
    child.kill()
    child.wait(10)
    assert liveness.alive(ref) is False


def test_an_exited_process_not_yet_reaped_is_gone() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                             stdin=subprocess.PIPE)
    try:
        ref = liveness._named(child.pid, liveness.PROC)
        assert ref is not None
        child.stdin.close()
        os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)   # exited, left unreaped
        assert Path(f"/proc/{child.pid}/stat").exists()
        assert liveness.alive(ref) is False
    finally:
        child.wait(10)


def test_a_reused_pid_is_not_the_same_process() -> None:
    me = liveness.current()
    assert me is not None
    assert liveness.alive(dataclasses.replace(me, start_ticks=me.start_ticks + 1)) is False


def test_elsewhere_cannot_be_told() -> None:
    me = liveness.current()
    assert me is not None
    assert liveness.alive(dataclasses.replace(me, boot_id="another-host")) is None
    assert liveness.alive(dataclasses.replace(me, pid_namespace=me.pid_namespace + 1)) is None


def test_the_start_time_is_read_past_a_command_name_with_spaces_and_parentheses(tmp_path: Path) -> None:
    (tmp_path / "42").mkdir()
    fields = ["S"] + [str(i) for i in range(4, 22)] + ["123456", "0", "0"]
    (tmp_path / "42" / "stat").write_text("42 (a) b (c) " + " ".join(fields) + "\n")
    assert liveness.start_ticks(42, tmp_path) == 123456
    assert liveness.start_ticks(43, tmp_path) is None
    (tmp_path / "42" / "stat").write_text("42 (x) " + " ".join(["Z"] + fields[1:]) + "\n")
    assert liveness.start_ticks(42, tmp_path) is None


def test_without_proc_nothing_is_named(tmp_path: Path) -> None:
    assert liveness._named(1, tmp_path) is None
    ref = ProcessRef("b", 1, 1, 1)
    assert liveness.alive(ref, tmp_path) is None


def test_a_pid_proc_does_not_show_is_gone_only_when_no_such_process_exists(tmp_path: Path) -> None:
    """With /proc mounted ``hidepid``, another user's processes have no entry: their pid
    exists, so they are not taken for gone (the lease applies instead)."""
    (tmp_path / "sys/kernel/random").mkdir(parents=True)
    (tmp_path / "sys/kernel/random/boot_id").write_text("boot\n")
    (tmp_path / "self/ns").mkdir(parents=True)
    (tmp_path / "self/ns/pid").write_text("")
    where = liveness.here(tmp_path)
    assert where is not None
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait(10)
    gone = ProcessRef(where[0], where[1], child.pid, 1)        # reaped: no such process
    assert liveness.alive(gone, tmp_path) is False
    hidden = ProcessRef(where[0], where[1], os.getpid(), 1)    # runs, but not in this /proc
    assert liveness.alive(hidden, tmp_path) is None
