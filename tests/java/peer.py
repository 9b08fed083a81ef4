"""RocketMQ's own Java client as a test peer: tests/java/Peer.java, compiled with javac at
test time against the Maven classpath of ``rocketmq-client`` (and ``rocketmq-tools``) of
each release under test, and run as a subprocess that prints one JSON object a line.

``JavaPeer(version, workdir)`` compiles once per release and session (classes under the
work directory, the classpath cached by tests/apache/maven.py); ``run(...)`` runs one
command to its end and returns its events; ``start(...)`` runs one in the background (the
orderly ``member``) with its events read by a thread. The Java client's own log lines
share stdout: only lines that are a JSON object starting with ``{"event"`` are events.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from tests.apache.maven import classpath

SOURCE = Path(__file__).parent / "Peer.java"
# the releases of the Java client the tests run: the last 4.x served, the newest 5.x served
VERSIONS = ("4.9.8", "5.5.0")


def java_available() -> str | None:
    """Why the Java peer cannot run here, or None."""
    for tool in ("java", "javac", "mvn"):
        if shutil.which(tool) is None:
            return f"{tool} is not on the PATH"
    return None


def major(version: str) -> int:
    return int(version.split(".", 1)[0])


@dataclass(frozen=True)
class Received:
    """One message a Java consumer received."""

    topic: str
    broker: str
    queue_id: int
    queue_offset: int
    msg_id: str
    keys: str | None
    tags: str | None
    body: bytes
    properties: dict[str, str]
    reconsume_times: int
    thread: str

    @classmethod
    def of(cls, e: dict[str, Any]) -> "Received":
        return cls(e["topic"], e["broker"], e["queue_id"], e["queue_offset"], e["msg_id"], e["keys"],
                   e["tags"], base64.b64decode(e["body"]), e["properties"], e["reconsume_times"], e["thread"])


class JavaPeerError(AssertionError):
    """The Java program failed (its error and the tail of its output are in the message)."""


def _events(lines: Sequence[str]) -> list[dict[str, Any]]:
    out = []
    for line in lines:
        if line.startswith('{"event"'):
            out.append(json.loads(line))
    return out


class Background:
    """A Java peer running on its own, its events collected as they come."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc
        self.events: list[dict[str, Any]] = []
        self.lines: list[str] = []
        self._mutex = threading.Lock()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._mutex:
                self.lines.append(line)
                self.events.extend(_events([line]))

    def snapshot(self) -> list[dict[str, Any]]:
        with self._mutex:
            return list(self.events)

    def wait_for(self, predicate: Callable[[list[dict[str, Any]]], bool], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not predicate(self.snapshot()):
            if self.proc.poll() is not None:
                self._reader.join(5)
                if predicate(self.snapshot()):
                    return
                raise JavaPeerError(f"the Java peer exited ({self.proc.returncode}) before {what}: "
                                    f"{''.join(self.lines[-20:])}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"{what}: not within {timeout:.0f} s")
            time.sleep(0.05)

    def stop(self, timeout: float = 60.0) -> None:
        """Close its stdin (the member shuts its consumer down) and wait for it."""
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._reader.join(5)

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()
        self._reader.join(5)


class JavaPeer:
    def __init__(self, version: str, workdir: Path) -> None:
        missing = java_available()
        if missing is not None:
            raise JavaPeerError(f"the Java peer needs a JDK 17 and Maven: {missing}")
        self.version = version
        self.cp = classpath([f"org.apache.rocketmq:rocketmq-client:{version}",
                             f"org.apache.rocketmq:rocketmq-tools:{version}"])
        self.classes = workdir / f"classes-{version}"
        self.home = workdir / f"home-{version}"    # the client's logs go under ~/logs
        self.home.mkdir(parents=True, exist_ok=True)
        if not (self.classes / "Peer.class").exists():
            self.classes.mkdir(parents=True, exist_ok=True)
            done = subprocess.run(["javac", "-nowarn", "-d", str(self.classes), "-cp", self.cp, str(SOURCE)],
                                  capture_output=True, text=True, timeout=300)
            if done.returncode != 0:
                raise JavaPeerError(f"javac of {SOURCE} against rocketmq-client {version} failed:\n{done.stderr}")

    def _command(self, args: Sequence[str]) -> list[str]:
        return ["java", "-Xmx256m", "-XX:TieredStopAtLevel=1", f"-Duser.home={self.home}",
                "-Drocketmq.client.logUseSlf4j=false", "-cp", f"{self.classes}{os.pathsep}{self.cp}",
                "Peer", *map(str, args)]

    def run(self, *args: object, timeout: float = 240.0) -> list[dict[str, Any]]:
        done = subprocess.run(self._command([str(a) for a in args]), capture_output=True, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL)
        events = _events(done.stdout.splitlines())
        if done.returncode != 0:
            raise JavaPeerError(f"Java peer {' '.join(map(str, args))} (client {self.version}) exited "
                                f"{done.returncode}: {[e for e in events if e['event'] == 'failed']}\n"
                                f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
        return events

    def start(self, *args: object) -> Background:
        proc = subprocess.Popen(self._command([str(a) for a in args]), stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        return Background(proc)

    # ------------------------------------------------------------ shortcuts

    def produce(self, namesrv: str, topic: str, mode: str, count: int, body_size: int = 0,
                compress: str = "default") -> list[dict[str, Any]]:
        events = self.run("produce", namesrv, topic, mode, count, body_size, compress)
        assert events and events[-1]["event"] == "done", events[-3:]
        return events

    def consume(self, namesrv: str, topic: str, group: str, kind: str, expected: int,
                timeout_s: int = 120) -> list[Received]:
        events = self.run("consume", namesrv, topic, group, kind, expected, timeout_s, timeout=timeout_s + 120)
        end = events[-1] if events else {"event": "nothing"}
        received = [Received.of(e) for e in events if e["event"] == "msg"]
        if end["event"] != "done":
            raise JavaPeerError(f"Java {kind} consumer got {len(received)} of {expected} messages: {end}")
        return received

    def admin(self, namesrv: str, what: str, arg: str) -> dict[str, Any]:
        events = self.run("admin", namesrv, what, arg)
        assert events and events[-1]["event"] == what, events
        return events[-1]
