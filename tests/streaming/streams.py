"""Helpers of the streaming proofs: the source, checkpoints, a paced producer, the
driver subprocess."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from rocketmq_spark.remoting.route import MessageQueue
from rocketmq_spark.spark.offsets import QueueOffsetMap, from_json
from rocketmq_spark.structs import Message
from tests.waiting import await_finished, wait_until  # noqa: F401 - wait_until: used by the tests

ROOT = Path(__file__).resolve().parents[2]
DRIVER = Path(__file__).with_name("stream_driver.py")


def source(spark: Any, namesrv: str, topic: str, group: str, **options: Any) -> Any:
    r = (spark.readStream.format("rocketmq").option("nameServer", namesrv)
         .option("topic", topic).option("consumerGroup", group))
    for k, v in options.items():
        r = r.option(k, str(v))
    return r.load()


def run_available_now(df: Any, *, checkpoint: str, path: str | None = None,
                      foreach_batch: Callable[[Any, int], None] | None = None,
                      timeout: float = 120.0) -> Any:
    """``df`` with Trigger.AvailableNow to completion (parquet at ``path`` or foreachBatch)."""
    w = df.writeStream.option("checkpointLocation", checkpoint).trigger(availableNow=True)
    w = w.foreachBatch(foreach_batch) if foreach_batch else w.format("parquet").option("path", path)
    return await_finished(w.start(), timeout)


def input_rows(q: Any) -> int:
    return sum(p["numInputRows"] for p in q.recentProgress)


# ------------------------------------------------------------------ checkpoints

def _batch_ids(d: Path) -> list[int]:
    if not d.is_dir():
        return []
    return sorted(int(p.name) for p in d.iterdir() if p.name.isdigit())


def committed_batches(checkpoint: str | Path) -> list[int]:
    """Batch ids in the checkpoint's commits/ (each one fully written to the sink)."""
    return _batch_ids(Path(checkpoint) / "commits")


def batch_end(checkpoint: str | Path, batch_id: int) -> QueueOffsetMap:
    """The end offsets of batch ``batch_id`` (offsets/N: version, metadata, one line per source)."""
    lines = (Path(checkpoint) / "offsets" / str(batch_id)).read_text().splitlines()
    assert lines[0] == "v1", lines[0]
    return from_json(json.loads(lines[2]))


def last_committed_end(checkpoint: str | Path) -> tuple[int, QueueOffsetMap]:
    done = committed_batches(checkpoint)
    assert done, f"no committed batch in {checkpoint}"
    return done[-1], batch_end(checkpoint, done[-1])


def group_offsets(mq: Any, group: str, queues: list[MessageQueue]) -> dict[MessageQueue, int | None]:
    return {q: mq.query_consumer_offset(group, q) for q in queues}


# ------------------------------------------------------------------ producing

@dataclass(frozen=True)
class Stored:
    queue: MessageQueue
    offset: int
    body: bytes


class PacedProducer:
    """Sends small batches round robin over ``queues`` from a thread until stopped."""

    def __init__(self, mq: Any, queues: list[MessageQueue], *, batch: int = 5,
                 pause: float = 0.02, salt: str = "p") -> None:
        self.mq, self.queues, self.batch, self.pause, self.salt = mq, queues, batch, pause, salt
        self.sent: list[Stored] = []
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="paced-producer", daemon=True)

    def _run(self) -> None:
        i = 0
        try:
            while not self._stop.is_set():
                q = self.queues[i % len(self.queues)]
                bodies = [f"{self.salt}-{i}-{k}".encode() + bytes([k, 0, 255]) for k in range(self.batch)]
                r = self.mq.send_batch([Message(q.topic, b) for b in bodies], queue=q)
                assert r.status == "SEND_OK", r
                self.sent.extend(Stored(r.queue, r.queue_offset + k, b) for k, b in enumerate(bodies))
                i += 1
                self._stop.wait(self.pause)
        except BaseException as exc:  # noqa: BLE001 - reported by stop()
            self.error = exc

    def __enter__(self) -> "PacedProducer":
        self._thread.start()
        return self

    def stop(self) -> list[Stored]:
        self._stop.set()
        self._thread.join(30)
        if self.error is not None:
            raise AssertionError(f"the producer failed: {self.error!r}") from self.error
        return list(self.sent)

    def __exit__(self, *exc: object) -> None:
        self.stop()


# ------------------------------------------------------------------ the driver subprocess

class DriverProcess:
    """``python stream_driver.py ...``: a Spark driver of its own (local[2]), in its own
    process group so that SIGKILL takes its JVM and Python workers with it."""

    def __init__(self, args: list[str], log: Path, *, script: Path | None = None,
                 env_extra: dict[str, str] | None = None) -> None:
        env = {**os.environ, **(env_extra or {})}
        env.setdefault("PYSPARK_PYTHON", sys.executable)
        env.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
        self.log = log
        self._out = open(log, "wb")
        self.proc = subprocess.Popen([sys.executable, str(script or DRIVER), *args], cwd=ROOT, env=env,
                                     stdout=self._out, stderr=subprocess.STDOUT,
                                     start_new_session=True)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def check_alive(self) -> None:
        if not self.alive():
            raise AssertionError(f"the driver exited with {self.proc.returncode}:\n{self.tail()}")

    def tail(self, n: int = 40) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])

    def kill(self) -> None:
        """SIGKILL to the whole process group (the group id is the driver's pid)."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(30)
        self._out.close()
