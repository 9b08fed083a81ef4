"""bench/chaos.py's ``Rig`` with its driver spark-submitted to a Spark standalone master, and
what a worker's directories tell about the executors it ran.

    rig = ClusterRig(work, master_url=cluster.master_url).start()
    pid = executor_pid(executor_dir(worker_work, app_id, 0))

The broker subprocess, the producer thread and the invariant check are the Rig's own; only
the driver differs: ``spark-submit --master spark://...`` in client deploy mode (in a
process group of its own, with the Rig's driver sidecar directory), running the same
orderly query as ``chaos.py drive`` — its tasks run on the cluster's executors, which read
through their worker host's sidecar.

``python tests/deploy/cluster_rig.py drive ...`` is the driver script itself (used
internally; bench/chaos.py's driver pins ``local[2,4]``, so it cannot go to a cluster).
"""

from __future__ import annotations

import argparse
import fcntl
import os
import re
import struct
import subprocess
import sys
import termios
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.chaos import Driver, Producer, Rig, run_query  # noqa: E402
from bench.common import committed_batches  # noqa: E402
from tests.deploy import sidecars  # noqa: E402
from tests.deploy.standalone import base_env, submit_command  # noqa: E402
from tests.processes import pids_in  # noqa: E402

EXECUTOR_CLASS = "org.apache.spark.executor.CoarseGrainedExecutorBackend"
_RUNNING = re.compile(r"Running task \S+ in stage \S+ \(TID (\d+)\)")
# a task's end as its executor logs it: done, failed, or killed
_ENDED = re.compile(r"(?:Finished|Exception in|killed) task \S+ in stage \S+ \(TID (\d+)\)")


# ------------------------------------------------------------------ the driver script

def drive(argv: list[str]) -> int:
    """The orderly query of ``chaos.py drive``, on whatever master spark-submit gave."""
    p = argparse.ArgumentParser(prog="cluster_rig.py drive")
    for a in ("--namesrv", "--checkpoint", "--out"):
        p.add_argument(a, required=True)
    p.add_argument("--trigger-ms", type=int, default=500)
    p.add_argument("--pull-batch-size", type=int, default=32)
    args = p.parse_args(argv)
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.appName("rocketmq-executor-kill").getOrCreate()
    run_query(spark, args.namesrv, args.checkpoint, args.out, args.trigger_ms, args.pull_batch_size)
    return 0


class ClusterDriver(Driver):
    """The Rig's driver as ``spark-submit --master MASTER_URL cluster_rig.py drive ...``."""

    def __init__(self, work: Path, namesrv: str, sidecar_dir: Path, master_url: str, *,
                 trigger_ms: int = 500, pull_batch_size: int = 32) -> None:
        super().__init__(work, namesrv, sidecar_dir, trigger_ms=trigger_ms,
                         pull_batch_size=pull_batch_size)
        self.master_url = master_url

    def start(self) -> None:
        local = self.work / "spark-local"
        local.mkdir(parents=True, exist_ok=True)
        cmd = submit_command(self.master_url, Path(__file__).resolve(), [
            "drive", "--namesrv", self.namesrv, "--checkpoint", str(self.checkpoint),
            "--out", str(self.out), "--trigger-ms", str(self.trigger_ms),
            "--pull-batch-size", str(self.pull_batch_size)], local_dir=local)
        env = {**base_env(), "ROCKETMQ_SPARK_SIDECAR_DIR": str(self.sidecar_dir)}
        with open(self.log, "ab") as out:
            out.write(f"\n==== driver start {self.starts + 1} ====\n".encode())
            out.flush()
            self.proc = subprocess.Popen(cmd, cwd=local, env=env, stdin=subprocess.DEVNULL,
                                         stdout=out, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        self.starts += 1


@dataclass
class ClusterRig(Rig):
    """A ``Rig`` whose driver runs its query on the standalone cluster at ``master_url``."""

    master_url: str = ""

    def start(self, timeout: float = 180.0) -> "ClusterRig":
        from rocketmq_spark.client import ClientConfig, MQClient

        if not self.master_url.startswith("spark://"):
            raise ValueError(f"master_url must be a spark:// URL, got {self.master_url!r}")
        self.broker.start()
        self.admin = MQClient(ClientConfig.parse(self.broker.namesrv_addr, request_timeout=2.0))
        self.producer = Producer(self.broker.namesrv_addr).start()
        self.driver = ClusterDriver(self.work, self.broker.namesrv_addr, self.sidecar_dir,
                                    self.master_url, trigger_ms=self.trigger_ms,
                                    pull_batch_size=self.pull_batch_size)
        self.driver.start()
        self.wait(lambda: committed_batches(self.driver.checkpoint) and self.rows_committed() > 0,
                  timeout, "the first committed batch with rows")
        return self


# ------------------------------------------------------------------ a worker's executors

def app_dirs(worker_work: Path) -> list[Path]:
    """The applications' directories in a worker's work directory (``app-*``)."""
    return sorted(p for p in worker_work.iterdir() if p.name.startswith("app-")) \
        if worker_work.is_dir() else []


def executor_dirs(app_dir: Path) -> list[Path]:
    """One directory per executor the worker launched for the application (named by id)."""
    return sorted((p for p in app_dir.iterdir() if p.name.isdigit()), key=lambda p: int(p.name)) \
        if app_dir.is_dir() else []


def executor_pid(executor_dir: Path) -> int | None:
    """Pid of the live CoarseGrainedExecutorBackend JVM working in ``executor_dir`` (a worker
    starts each executor there), or None. Matching the directory, not the application id,
    keeps other Spark clusters on the machine out of it."""
    found = pids_in(executor_dir, EXECUTOR_CLASS.encode())
    return found[0] if found else None


def running_tasks(executor_dir: Path) -> set[int]:
    """TIDs the executor's log (its ``stderr`` file) shows started and not ended."""
    log = executor_dir / "stderr"
    text = log.read_text(errors="replace") if log.exists() else ""
    return {int(t) for t in _RUNNING.findall(text)} - {int(t) for t in _ENDED.findall(text)}


def unread_output(pid: int) -> int:
    """Bytes process ``pid`` wrote to its stdout and stderr pipes that their reader has not
    taken yet (0 for a descriptor that is not a pipe, or a process gone). A worker copies an
    executor's output into its ``stdout`` / ``stderr`` files from such pipes, so a line the
    executor wrote can be missing from its file for a while; the count is read with FIONREAD
    on a second read end opened through /proc, which takes nothing out of the pipe."""
    unread = 0
    for fd in (1, 2):
        path = f"/proc/{pid}/fd/{fd}"
        try:
            if not os.readlink(path).startswith("pipe:"):
                continue
            r = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        except OSError:
            continue
        try:
            unread += struct.unpack("i", fcntl.ioctl(r, termios.FIONREAD, b"\0" * 4))[0]
        finally:
            os.close(r)
    return unread


def served_since(sidecar_dir: Path, mark: int) -> list[sidecars.Served]:
    """Ranges the sidecars of ``sidecar_dir`` logged after the first ``mark`` characters of
    their log (``len(sidecars.log_text(d))`` taken earlier)."""
    text = sidecars.log_text(sidecar_dir)[mark:]
    return [sidecars.Served(m[1], m[2], int(m[3]), int(m[4]), int(m[5]), m[6], int(m[7]))
            for m in sidecars._SERVED.finditer(text)]


if __name__ == "__main__":
    if sys.argv[1:2] != ["drive"]:
        sys.exit(f"usage: {sys.argv[0]} drive --namesrv ADDR --checkpoint DIR --out DIR")
    sys.exit(drive(sys.argv[2:]))
