"""``connect``: find the host's sidecar, starting one when needed (``sidecar="auto"``).

Auto mode uses a private runtime directory: ``$ROCKETMQ_SPARK_SIDECAR_DIR``, else
``$XDG_RUNTIME_DIR/rocketmq-spark``, else ``/tmp/rocketmq-spark-<uid>``. It must be owned by
the current user and closed to group and others (0700); the socket ``sidecar.sock`` is 0600.
Under a file lock in that directory (so concurrent Spark workers start exactly one):

  * a sidecar that answers Health with our version is used;
  * one of another version is an error naming the socket and both versions;
  * a socket nobody answers on is stale: it is removed and a sidecar is spawned detached
    (``python -m rocketmq_spark.sidecar.cli``, own session, output in ``sidecar.log``),
    then polled with backoff until it answers.

``sidecar="host:port"`` (or ``unix:PATH``) connects to a sidecar someone else runs.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import grpc

import rocketmq_spark
from rocketmq_spark.errors import RocketMQError
from rocketmq_spark.sidecar.client import SidecarClient
from rocketmq_spark.sidecar.errors import (SidecarStartError, SidecarVersionMismatch,
                                           UnsafeRuntimeDir)
from rocketmq_spark.sidecar.model import HealthInfo
from rocketmq_spark.sidecar.address import parse_address

ENV_DIR = "ROCKETMQ_SPARK_SIDECAR_DIR"
SOCKET_NAME = "sidecar.sock"
LOCK_NAME = "sidecar.lock"
LOG_NAME = "sidecar.log"
AUTO_IDLE_TIMEOUT = 300.0
PROBE_TIMEOUT = 2.0


def default_runtime_dir() -> Path:
    env = os.environ.get(ENV_DIR)
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    if xdg and Path(xdg).is_dir():
        return Path(xdg) / "rocketmq-spark"
    return Path("/tmp") / f"rocketmq-spark-{os.getuid()}"


def _check_private(path: Path, mode: int, what: str) -> None:
    st = path.lstat()
    if st.st_uid != os.geteuid():
        raise UnsafeRuntimeDir(f"sidecar {what} {str(path)!r} is owned by uid {st.st_uid}, not by "
                               f"the current user (uid {os.geteuid()}); refusing to use it")
    if stat.S_IMODE(st.st_mode) & 0o077:
        raise UnsafeRuntimeDir(f"sidecar {what} {str(path)!r} has mode "
                               f"{stat.S_IMODE(st.st_mode):04o}; it must not be accessible to "
                               f"group or others (expected {mode:04o}): chmod {mode:o} it or "
                               f"choose another directory with {ENV_DIR}")


def private_runtime_dir(path: Path | str | None = None) -> Path:
    """Create (0700) or check the runtime directory."""
    d = Path(path).expanduser() if path is not None else default_runtime_dir()
    d = d.absolute()
    try:
        d.mkdir(mode=0o700, parents=True)
    except FileExistsError:
        pass
    if not d.is_dir() or d.is_symlink():
        raise UnsafeRuntimeDir(f"sidecar runtime directory {str(d)!r} is not a directory")
    _check_private(d, 0o700, "runtime directory")
    return d


def _probe(address: str) -> HealthInfo | None:
    """Health of the sidecar at ``address``, or None when nothing answers. A channel of its
    own: it connects at once, where a shared one may be waiting out a reconnect backoff."""
    channel = grpc.insecure_channel(address)
    try:
        return SidecarClient(address, channel=channel).health(timeout=PROBE_TIMEOUT)
    except RocketMQError:
        return None
    finally:
        channel.close()


def _check_version(info: HealthInfo, sock: Path) -> None:
    if info.version != rocketmq_spark.__version__:
        raise SidecarVersionMismatch(
            f"a sidecar of rocketmq_spark {info.version} (pid {info.pid}) listens on {sock}, but "
            f"this process is rocketmq_spark {rocketmq_spark.__version__}; stop that sidecar "
            f"(kill {info.pid}) so a matching one can start, or point {ENV_DIR} elsewhere")


class _Reaper(threading.Thread):
    """Waits for a spawned sidecar so it does not linger as a zombie while we live."""

    def __init__(self, proc: subprocess.Popen) -> None:
        super().__init__(name="rocketmq-sidecar-reaper", daemon=True)
        self.proc = proc

    def run(self) -> None:
        self.proc.wait()


def _package_root() -> str:
    return str(Path(rocketmq_spark.__file__).resolve().parent.parent)


def spawn_sidecar(directory: Path, *, idle_timeout: float = AUTO_IDLE_TIMEOUT) -> subprocess.Popen:
    """Start a detached sidecar listening on ``directory/sidecar.sock``."""
    sock = directory / SOCKET_NAME
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (_package_root(), env.get("PYTHONPATH")) if p)
    log_fd = os.open(directory / LOG_NAME, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "rocketmq_spark.sidecar.cli", "--listen", f"unix:{sock}",
             "--idle-timeout", f"{idle_timeout:g}"],
            stdin=subprocess.DEVNULL, stdout=log_fd, stderr=subprocess.STDOUT,
            start_new_session=True, close_fds=True, cwd=str(directory), env=env)
    finally:
        os.close(log_fd)
    _Reaper(proc).start()
    return proc


def _log_tail(directory: Path, lines: int = 20) -> str:
    try:
        text = (directory / LOG_NAME).read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def _wait_ready(proc: subprocess.Popen, address: str, directory: Path, timeout: float) -> HealthInfo:
    deadline = time.monotonic() + timeout
    delay = 0.02
    while True:
        info = _probe(address)
        if info is not None:
            return info
        if proc.poll() is not None:
            raise SidecarStartError(f"the sidecar exited with code {proc.returncode} before "
                                    f"answering on {address}; its log "
                                    f"({directory / LOG_NAME}) ends with:\n{_log_tail(directory)}")
        if time.monotonic() >= deadline:
            raise SidecarStartError(f"the sidecar (pid {proc.pid}) did not answer on {address} "
                                    f"within {timeout:g} s; see {directory / LOG_NAME}")
        time.sleep(delay)
        delay = min(delay * 2, 0.5)


def ensure_sidecar(runtime_dir: Path | str | None = None, *,
                   idle_timeout: float = AUTO_IDLE_TIMEOUT, start_timeout: float = 60.0) -> str:
    """The address of this host's sidecar, started if none runs; see the module doc."""
    d = private_runtime_dir(runtime_dir)
    sock = d / SOCKET_NAME
    address = str(parse_address(f"unix:{sock}"))

    def live() -> HealthInfo | None:
        if not sock.exists():
            return None
        _check_private(sock, 0o600, "socket")
        return _probe(address)

    info = live()                                  # fast path: no lock when it runs
    if info is None:
        import filelock   # here: most processes find the sidecar running (8 ms of imports)

        lock = filelock.FileLock(str(d / LOCK_NAME), timeout=start_timeout + 30, mode=0o600)
        try:
            with lock:
                info = live()
                if info is None:
                    sock.unlink(missing_ok=True)   # stale: nothing answers on it
                    proc = spawn_sidecar(d, idle_timeout=idle_timeout)
                    info = _wait_ready(proc, address, d, start_timeout)
        except filelock.Timeout:
            raise SidecarStartError(f"another process holds {d / LOCK_NAME} (starting a sidecar) "
                                    f"for more than {lock.timeout:g} s") from None
    _check_version(info, sock)
    return address


def connect(sidecar: str = "auto", *, runtime_dir: Path | str | None = None,
            idle_timeout: float = AUTO_IDLE_TIMEOUT) -> SidecarClient:
    """A client of the sidecar: ``"auto"`` (this host's, started on demand), ``host:port`` or
    ``unix:PATH`` (one already running; nothing is started)."""
    if sidecar.strip().lower() == "auto":
        return SidecarClient(ensure_sidecar(runtime_dir, idle_timeout=idle_timeout))
    return SidecarClient(sidecar)
