"""Per-host lifecycle: auto spawn under a file lock, stale sockets, permissions, versions,
idle exit, and the foreground command. Every sidecar started here is stopped by pid."""

from __future__ import annotations

import os
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Iterator

import pytest

import rocketmq_spark
from rocketmq_spark.sidecar import connect
from rocketmq_spark.sidecar.client import SidecarClient
from rocketmq_spark.sidecar.errors import (SidecarUnavailable, SidecarVersionMismatch,
                                           UnsafeRuntimeDir)
from rocketmq_spark.sidecar.model import HealthInfo
from rocketmq_spark.sidecar.server import SidecarServer
from rocketmq_spark.sidecar.service import SidecarService
from rocketmq_spark.sidecar.spawn import ENV_DIR, LOG_NAME, SOCKET_NAME
from tests.processes import alive

ROOT = Path(__file__).resolve().parents[2]



def wait_until(pred: Callable[[], bool], timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.02)
    return pred()


@pytest.fixture()
def pids() -> Iterator[list[int]]:
    started: list[int] = []
    yield started
    for pid in started:
        if alive(pid):
            os.kill(pid, signal.SIGTERM)
    for pid in started:
        wait_until(lambda: not alive(pid), 10)


@pytest.fixture()
def rt(tmp_path: Path) -> Path:
    d = tmp_path / "rt"      # created by the code under test
    return d


def test_two_processes_spawn_exactly_one(rt: Path, pids: list[int]) -> None:
    script = ("import sys\nfrom rocketmq_spark.sidecar import connect\n"
              "print(connect('auto', runtime_dir=sys.argv[1]).health().pid)\n")
    procs = [subprocess.Popen([sys.executable, "-c", script, str(rt)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, cwd=ROOT) for _ in range(2)]
    outs = [p.communicate(timeout=120) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err
    got = [int(out.strip()) for out, _ in outs]
    pids.extend(set(got))
    assert got[0] == got[1] and alive(got[0])
    log = (rt / LOG_NAME).read_text()
    starts = [ln for ln in log.splitlines() if ln.startswith("sidecar listening on ")]
    assert len(starts) == 1, log
    assert stat.S_IMODE(rt.stat().st_mode) == 0o700
    assert stat.S_IMODE((rt / SOCKET_NAME).stat().st_mode) == 0o600
    assert stat.S_IMODE((rt / LOG_NAME).stat().st_mode) == 0o600


def test_env_dir_stale_socket_and_reuse(rt: Path, pids: list[int], monkeypatch) -> None:
    rt.mkdir(mode=0o700)
    sock = rt / SOCKET_NAME
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(sock))
    s.close()                        # the file stays, nobody listens: stale
    os.chmod(sock, 0o600)
    old_inode = sock.stat().st_ino
    monkeypatch.setenv(ENV_DIR, str(rt))
    client = connect()
    h = client.health()
    pids.append(h.pid)
    assert h.pid != os.getpid() and alive(h.pid)
    assert sock.stat().st_ino != old_inode
    assert connect("auto").health().pid == h.pid     # a live one is reused


def test_group_accessible_dir_is_refused(rt: Path) -> None:
    rt.mkdir()
    os.chmod(rt, 0o755)
    with pytest.raises(UnsafeRuntimeDir) as e:
        connect("auto", runtime_dir=rt)
    assert str(rt) in str(e.value) and "0755" in str(e.value)
    assert not (rt / SOCKET_NAME).exists()


def test_open_socket_file_is_refused(rt: Path) -> None:
    rt.mkdir(mode=0o700)
    sock = rt / SOCKET_NAME
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(sock))
    s.close()
    os.chmod(sock, 0o666)
    with pytest.raises(UnsafeRuntimeDir, match="socket"):
        connect("auto", runtime_dir=rt)


def test_dir_of_another_user_is_refused(tmp_path: Path) -> None:
    if os.geteuid() == 0:
        d = tmp_path / "theirs"
        d.mkdir(mode=0o700)
        os.chown(d, 65534, 65534)
    else:
        d = Path("/")                  # owned by root, not by us
    with pytest.raises(UnsafeRuntimeDir, match="owned by uid"):
        connect("auto", runtime_dir=d)


class OtherVersion(SidecarService):
    def health(self) -> HealthInfo:
        h = super().health()
        return HealthInfo("0.0.0-other", h.api, h.pid, h.uptime_ms)


def test_other_version_is_a_clear_error(rt: Path) -> None:
    rt.mkdir(mode=0o700)
    server = SidecarServer(f"unix:{rt / SOCKET_NAME}", service=OtherVersion())
    try:
        with pytest.raises(SidecarVersionMismatch) as e:
            connect("auto", runtime_dir=rt)
        text = str(e.value)
        assert str(rt / SOCKET_NAME) in text and "0.0.0-other" in text
        assert rocketmq_spark.__version__ in text and "stop" in text
    finally:
        server.stop(grace=0)
    assert not (rt / SOCKET_NAME).exists()   # the server removed its socket


def test_idle_exit_then_respawn(rt: Path, pids: list[int]) -> None:
    first = connect("auto", runtime_dir=rt, idle_timeout=0.5).health().pid
    pids.append(first)
    assert wait_until(lambda: not alive(first), 30), "the sidecar did not exit when idle"
    assert not (rt / SOCKET_NAME).exists()
    second = connect("auto", runtime_dir=rt, idle_timeout=0.5).health().pid
    pids.append(second)
    assert second != first


def test_explicit_address_does_not_spawn(tmp_path: Path) -> None:
    client = connect("unix:" + str(tmp_path / "nobody.sock"))
    with pytest.raises(SidecarUnavailable):
        client.health(timeout=2)
    assert not (tmp_path / "nobody.sock").exists()
    with pytest.raises(ValueError, match="neither"):
        connect("no-port-here")


def _start_cli(*args: str) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([sys.executable, "-m", "rocketmq_spark.cli", "sidecar", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    line = proc.stdout.readline().strip()
    assert line.startswith("sidecar listening on "), (line, proc.stderr.read() if proc.poll() is not None else "")
    return proc, line.removeprefix("sidecar listening on ")


def test_cli_tcp_idle_timeout() -> None:
    proc, address = _start_cli("--listen", "127.0.0.1:0", "--idle-timeout", "1")
    try:
        host, _, port = address.rpartition(":")
        assert host == "127.0.0.1" and int(port) > 0
        assert SidecarClient(address).health().pid == proc.pid
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def test_cli_unix_socket_sigterm(tmp_path: Path) -> None:
    sock = tmp_path / "s.sock"
    proc, address = _start_cli("--listen", f"unix:{sock}")
    try:
        assert address == f"unix:{sock}"
        assert stat.S_IMODE(sock.stat().st_mode) == 0o600
        assert SidecarClient(address).health().pid == proc.pid
        proc.terminate()
        assert proc.wait(timeout=30) == 0
        assert not sock.exists()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def test_cli_rejects_bad_arguments() -> None:
    r = subprocess.run([sys.executable, "-m", "rocketmq_spark.cli", "sidecar", "--listen", "nonsense"],
                       capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert r.returncode == 1 and "nonsense" in r.stderr
    r = subprocess.run([sys.executable, "-m", "rocketmq_spark.cli", "sidecar", "--idle-timeout", "-1"],
                       capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert r.returncode == 2 and "-1" in r.stderr


def test_a_live_socket_is_not_taken_over(tmp_path: Path) -> None:
    from rocketmq_spark.sidecar.errors import SidecarStartError

    sock = tmp_path / "s.sock"
    first = SidecarServer(f"unix:{sock}")
    try:
        with pytest.raises(SidecarStartError, match="already listens"):
            SidecarServer(f"unix:{sock}")
        assert SidecarClient(f"unix:{sock}").health().pid == os.getpid()
    finally:
        first.stop(grace=0)
    (tmp_path / "plain").write_text("x")
    with pytest.raises(SidecarStartError, match="not a socket"):
        SidecarServer(f"unix:{tmp_path / 'plain'}")


def test_cli_default_socket_is_what_auto_finds(rt: Path, monkeypatch) -> None:
    monkeypatch.setenv(ENV_DIR, str(rt))
    proc = subprocess.Popen([sys.executable, "-m", "rocketmq_spark.cli", "sidecar"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        line = proc.stdout.readline().strip()
        assert line == f"sidecar listening on unix:{rt / SOCKET_NAME}"
        assert stat.S_IMODE(rt.stat().st_mode) == 0o700
        assert connect("auto").health().pid == proc.pid      # no second sidecar
        assert not (rt / LOG_NAME).exists()
    finally:
        proc.terminate()
        assert proc.wait(timeout=30) == 0


def test_a_restarted_sidecar_is_reachable_at_once(tmp_path: Path) -> None:
    address = f"unix:{tmp_path / 's.sock'}"
    first = SidecarServer(address)
    assert SidecarClient(address).health().pid == os.getpid()
    first.stop(grace=0)
    with pytest.raises(SidecarUnavailable):
        SidecarClient(address).health(timeout=5)
    second = SidecarServer(address)
    try:
        # a shared channel still in reconnect backoff would fail this call at once
        assert SidecarClient(address).health(timeout=5).pid == os.getpid()
    finally:
        second.stop(grace=0)


def test_a_new_channel_does_not_inherit_a_dead_sidecar_s_backoff(tmp_path: Path) -> None:
    """gRPC shares subchannels between channels with the same arguments: without a local
    subchannel pool, a fresh channel to a restarted sidecar failed at once with the dead
    one's error while the old subchannel waited out its reconnect backoff."""
    address = f"unix:{tmp_path / 's.sock'}"
    first = SidecarServer(address)
    client = SidecarClient(address)
    assert client.health().pid == os.getpid()
    first.stop(grace=0)
    with pytest.raises(SidecarUnavailable):        # the old subchannel now backs off
        client.health(timeout=2)
    second = SidecarServer(address)                # back at once, within that backoff
    try:
        assert SidecarClient(address).health(timeout=2).pid == os.getpid()
    finally:
        second.stop(grace=0)


def test_a_sidecar_waits_for_its_first_call_longer_than_its_idle_timeout() -> None:
    """A client slow to make its first call (a loaded host) finds its sidecar still there:
    before any call the idle exit waits FIRST_CALL_WAIT; after one, the idle timeout."""
    from types import SimpleNamespace

    from rocketmq_spark.sidecar.server import FIRST_CALL_WAIT, Activity

    now = [0.0]

    def clock() -> float:
        now[0] += 0.25
        return now[0]

    class NoWait:                       # the server's stop event, never set, never waiting
        def wait(self, _: float) -> bool:
            return False

    trims: list[float] = []           # the pool of batch files is trimmed at every tick
    server = SimpleNamespace(activity=Activity(clock),
                             service=SimpleNamespace(trim_batch_files=lambda: trims.append(now[0])))
    assert SidecarServer.wait_idle(server, 0.5, NoWait()) == "idle"  # type: ignore[arg-type]
    assert now[0] >= FIRST_CALL_WAIT and len(trims) >= FIRST_CALL_WAIT
    server.activity.begin()
    server.activity.end()
    called_at = now[0]
    assert SidecarServer.wait_idle(server, 0.5, NoWait()) == "idle"  # type: ignore[arg-type]
    assert 0.5 <= now[0] - called_at < 2


def test_the_sidecar_keeps_freed_memory_for_its_next_batches() -> None:
    # glibc (every Linux CI image here) takes both settings; the process keeps them
    import platform

    from rocketmq_spark.sidecar.cli import keep_freed_memory

    if platform.libc_ver()[0] != "glibc":
        assert keep_freed_memory() is False
        return
    assert keep_freed_memory() is True
