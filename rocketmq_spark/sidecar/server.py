"""The sidecar's gRPC server: listening (Unix socket or TCP), activity tracking, idle exit.

``serve(address, idle_timeout)`` runs until it is stopped or, with ``idle_timeout > 0``,
until no RPC has been in flight and none has arrived for that many seconds (a Pull stream
counts as in flight until it ends). Unix sockets are created 0600 and removed on exit
(unless another sidecar has replaced them meanwhile).
"""

from __future__ import annotations

import logging
import os
import socket
import stat
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable

import grpc

from rocketmq_spark.sidecar.address import GRPC_OPTIONS, Address, parse_address  # noqa: F401 (re-exported)
from rocketmq_spark.sidecar.errors import SidecarStartError
from rocketmq_spark.sidecar.service import SidecarService
from rocketmq_spark.sidecar.servicer import SidecarServicer
from rocketmq_spark.sidecar.v1 import sidecar_pb2_grpc as pb_grpc

log = logging.getLogger(__name__)

FIRST_CALL_WAIT = 30.0     # seconds an idle sidecar waits for its first call, whatever its idle timeout

_SERVER_OPTIONS = GRPC_OPTIONS + (("grpc.so_reuseport", 0),)


class Activity:
    """RPCs in flight, the time of the last start or end of one, and whether any came."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._mutex = threading.Lock()
        self._in_flight = 0
        self._last = clock()
        self.called = False

    def begin(self) -> None:
        with self._mutex:
            self._in_flight += 1
            self._last = self._clock()
            self.called = True

    def end(self) -> None:
        with self._mutex:
            self._in_flight -= 1
            self._last = self._clock()

    @property
    def in_flight(self) -> int:
        return self._in_flight

    def idle_for(self) -> float:
        with self._mutex:
            return 0.0 if self._in_flight else self._clock() - self._last


class _ActivityInterceptor(grpc.ServerInterceptor):
    def __init__(self, activity: Activity) -> None:
        self.activity = activity

    def _wrap(self, behavior: Callable[[Any, grpc.ServicerContext], Any]) -> Callable[..., Any]:
        activity = self.activity

        def tracked(request: Any, context: grpc.ServicerContext) -> Any:
            activity.begin()
            if not context.add_callback(activity.end):   # already over
                activity.end()
            return behavior(request, context)
        return tracked

    def intercept_service(self, continuation: Callable[..., Any], details: Any) -> Any:
        h = continuation(details)
        if h is None:
            return None
        ser = dict(request_deserializer=h.request_deserializer,
                   response_serializer=h.response_serializer)
        if h.unary_unary:
            return grpc.unary_unary_rpc_method_handler(self._wrap(h.unary_unary), **ser)
        if h.unary_stream:
            return grpc.unary_stream_rpc_method_handler(self._wrap(h.unary_stream), **ser)
        if h.stream_unary:
            return grpc.stream_unary_rpc_method_handler(self._wrap(h.stream_unary), **ser)
        return grpc.stream_stream_rpc_method_handler(self._wrap(h.stream_stream), **ser)


def _claim_socket_path(path: Path) -> None:
    """Refuse a socket someone listens on; remove a stale one (gRPC would replace it
    silently, cutting off a live server)."""
    if not path.exists() and not path.is_symlink():
        return
    if not stat.S_ISSOCK(path.lstat().st_mode):
        raise SidecarStartError(f"cannot listen on {path}: it exists and is not a socket")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.settimeout(2.0)
        probe.connect(str(path))
    except OSError:
        path.unlink(missing_ok=True)          # nobody accepts: stale
        return
    finally:
        probe.close()
    raise SidecarStartError(f"another process already listens on {path}; stop it first")


class SidecarServer:
    """A started gRPC server with the sidecar servicer."""

    def __init__(self, address: str, *, service: SidecarService | None = None,
                 max_workers: int = 64) -> None:
        self.service = service or SidecarService()
        self.activity = Activity()
        addr = parse_address(address)
        self._server = grpc.server(ThreadPoolExecutor(max_workers=max_workers,
                                                      thread_name_prefix="sidecar-rpc"),
                                   interceptors=[_ActivityInterceptor(self.activity)],
                                   options=_SERVER_OPTIONS)
        pb_grpc.add_SidecarServicer_to_server(SidecarServicer(self.service), self._server)
        self._socket_inode: int | None = None
        self.socket_path = addr.path
        if addr.path is not None:                 # shared-memory files fall back to its directory
            self.service.runtime_dir = addr.path.parent
        self.address = self._bind(addr)
        self._server.start()
        self._stopped = False

    def _bind(self, addr: Address) -> str:
        if addr.path is None:
            port = self._add_port(addr.target)
            host = addr.target.rpartition(":")[0]
            return f"{host}:{port}"
        addr.path.parent.mkdir(parents=True, exist_ok=True)
        _claim_socket_path(addr.path)
        old = os.umask(0o177)          # the socket file is born 0600
        try:
            self._add_port(addr.target)
        finally:
            os.umask(old)
        os.chmod(addr.path, 0o600)
        self._socket_inode = addr.path.stat().st_ino
        return addr.target

    def _add_port(self, target: str) -> int:
        try:
            port = self._server.add_insecure_port(target)
        except RuntimeError as exc:
            raise SidecarStartError(f"cannot listen on {target}: {exc}") from None
        if not port:
            raise SidecarStartError(f"cannot listen on {target}")
        return port

    def remove_socket(self) -> None:
        """Remove our Unix socket file, unless another server has replaced it."""
        p = self.socket_path
        if p is None or self._socket_inode is None:
            return
        try:
            if p.stat().st_ino == self._socket_inode:
                p.unlink()
        except FileNotFoundError:
            pass
        self._socket_inode = None

    def stop(self, grace: float = 2.0) -> None:
        if self._stopped:
            return
        self._stopped = True
        self.remove_socket()           # new clients start a new sidecar from now on
        self._server.stop(grace).wait()
        self.service.close()

    def wait_idle(self, idle_timeout: float, stop: threading.Event) -> str:
        """Block until ``stop`` is set ("stopped") or the server idled ``idle_timeout``
        seconds ("idle"; never when ``idle_timeout <= 0``). Until its first call it waits
        at least ``FIRST_CALL_WAIT``: the client that started it may be slow to come (a
        loaded host), and must not find it gone."""
        while True:
            if idle_timeout > 0:
                limit = idle_timeout if self.activity.called else max(idle_timeout, FIRST_CALL_WAIT)
                left = limit - self.activity.idle_for()
                if left <= 0:
                    return "idle"
                tick = min(max(left, 0.01), 1.0)
            else:
                tick = 1.0
            if stop.wait(tick):
                return "stopped"
            try:
                self.service.trim_batch_files()     # its pool of files does not outlive the reads
            except OSError as exc:
                log.debug("trimming the batch files kept for reuse failed: %s", exc)


def serve(address: str, idle_timeout: float = 0.0, *, service: SidecarService | None = None,
          on_ready: Callable[[str], None] | None = None,
          stop: threading.Event | None = None) -> str:
    """Run a sidecar until ``stop`` is set or it idles ``idle_timeout`` seconds (0 = never).
    Calls ``on_ready(bound_address)`` once listening. Returns why it ended."""
    stop = stop or threading.Event()
    server = SidecarServer(address, service=service)
    try:
        log.info("sidecar listening on %s (pid %d, idle timeout %s)", server.address,
                 os.getpid(), f"{idle_timeout:g} s" if idle_timeout > 0 else "never")
        if on_ready is not None:
            on_ready(server.address)
        reason = server.wait_idle(idle_timeout, stop)
        log.info("sidecar exiting: %s", reason)
        return reason
    finally:
        server.stop()
