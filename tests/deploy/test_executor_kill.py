"""An executor killed with SIGKILL in the middle of a micro-batch, on a Spark standalone
cluster: the master launches a replacement and the lost tasks run again from the same
offsets, so the stream loses and duplicates nothing.

Setup: a standalone master and one worker (tests/deploy/standalone.py) standing for a host
with a sidecar directory of its own; bench/chaos.py's broker subprocess and steady producer;
the chaos driver's orderly query into parquet with a checkpoint, spark-submitted to the
master in client mode (tests/deploy/cluster_rig.py), so its tasks run on the worker's
executor and read through that host's sidecar, while the driver holds the queue locks
through a sidecar of its own.

After the first three batches, once a batch is planned and not committed, the executor's
JVM (CoarseGrainedExecutorBackend, found by its working directory in the worker's work
directory) is frozen (SIGSTOP); if its log shows one of the batch's tasks started and not
ended, it gets SIGKILL (otherwise SIGCONT, and again at the next chance). Then: the worker runs a second executor for
the application, the driver logs the lost executor and the lost task, the same driver
commits that batch, the host's sidecar serves the batch's ranges again from the same start
offsets, and after the producer stops the sink (read through its ``_spark_metadata`` log)
holds every acknowledged message exactly once with the body sent at its position, each
queue in offset order within every committed file, with the group's offsets on the broker
never past the checkpoint.
"""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
import time
from pathlib import Path
from typing import Callable, Iterator, TypeVar

import pytest

from bench.chaos import LOST_WITH_EXECUTOR, TOPIC
from bench.common import batch_end_offsets, committed_batches
from tests.deploy import sidecars
from tests.deploy.checks import assert_invariants, assert_queue_order, wait
from tests.deploy.cluster_rig import (ClusterRig, app_dirs, executor_dirs, executor_pid, running_tasks,
                                      served_since, unread_output)
from tests.deploy.standalone import SparkStandalone
from tests.spark_session import stop_sidecar

HOST = "host-1"
WARM_BATCHES = 3        # batches committed before the kill: tasks are warm, the stream steady
KILL_ATTEMPTS = 3       # executor kills tried until one loses a running task
T = TypeVar("T")


class Setup:
    def __init__(self, root: Path) -> None:
        self.root = root
        # short: a Unix socket path is limited to 107 bytes
        self.host_sidecar = Path(tempfile.mkdtemp(prefix="rmq-ek-sc-"))
        self.host_sidecar.chmod(0o700)
        hosts = {HOST: {"ROCKETMQ_SPARK_SIDECAR_DIR": str(self.host_sidecar)}}
        self.cluster = SparkStandalone(root / "spark", hosts, cores=2, memory="1g")
        self.worker_work = root / "spark" / HOST / "work"
        self.rig: ClusterRig | None = None

    def close(self) -> None:
        steps: list[Callable[[], object]] = [self.cluster.stop, lambda: stop_sidecar(self.host_sidecar)]
        if self.rig is not None:
            steps.insert(0, self.rig.close)     # driver (ends the application) before the cluster
        for step in steps:
            try:
                step()
            except Exception:  # noqa: BLE001 - tear down the rest regardless
                pass
        shutil.rmtree(self.host_sidecar, ignore_errors=True)


@pytest.fixture
def setup() -> Iterator[Setup]:
    root = Path(tempfile.mkdtemp(prefix="rmq-ekill-"))
    s = Setup(root)
    try:
        s.cluster.start()
        s.rig = ClusterRig(root / "rig", master_url=s.cluster.master_url)
        s.rig.start()
        yield s
    finally:
        s.close()
        shutil.rmtree(root, ignore_errors=True)


def _kill_mid_task(rig: ClusterRig, pid: int, executor: Path, timeout: float = 90.0) -> int:
    """SIGKILL the executor ``pid`` while a task is in progress on it; returns the id of the
    batch it belongs to.

    A warm task lasts a fraction of a second, so the executor is first frozen (SIGSTOP) and
    checked while frozen: a task whose "Running task" line is in the executor's log and
    whose "Finished task" line is not has not reported to the driver (an executor logs the
    line before it sends the result), so it is certainly lost. If no task is, the executor
    goes on (SIGCONT) and the check is repeated."""
    deadline = time.monotonic() + timeout
    while True:
        rig.wait(lambda: len(committed_batches(rig.driver.checkpoint)) >= WARM_BATCHES
                 and rig.mid_batch() and running_tasks(executor), deadline - time.monotonic(),
                 f"a task of a micro-batch after the first {WARM_BATCHES} running on the executor")
        os.kill(pid, signal.SIGSTOP)
        _wait_output_logged(pid, executor, deadline)
        # the driver is not frozen: the batch id is read after the tasks are known
        # unfinished, so it is the batch they belong to
        if running_tasks(executor) and rig.mid_batch():
            batch = _last_planned(rig.driver.checkpoint)
            os.kill(pid, signal.SIGKILL)
            return batch
        os.kill(pid, signal.SIGCONT)


def _wait_output_logged(pid: int, executor: Path, deadline: float) -> None:
    """Wait until all the frozen executor ``pid`` wrote is in its log file: its output pipes
    are empty and the file stopped growing. The worker copies the output from a pipe, so a
    task's "Finished task" line (logged before the result is sent) can still be in the pipe
    when the executor stops, its result already on the way to the driver."""
    log = executor / "stderr"
    last = [-1]

    def logged() -> bool:
        size = log.stat().st_size if log.exists() else 0
        settled, last[0] = size == last[0], size
        return unread_output(pid) == 0 and settled

    wait(logged, max(deadline - time.monotonic(), 1.0), "the frozen executor's output in its log")


def _last_planned(checkpoint: Path) -> int:
    d = checkpoint / "offsets"
    return max((int(p.name) for p in d.iterdir() if p.name.isdigit()), default=-1) if d.is_dir() else -1


def test_executor_killed_mid_batch_is_replaced_and_its_tasks_run_again_from_the_same_offsets(
        setup: Setup) -> None:
    rig = setup.rig
    assert rig is not None
    chk = rig.driver.checkpoint
    apps = wait(lambda: app_dirs(setup.worker_work), 60, "the application's directory on the worker")
    assert len(apps) == 1, apps
    app = apps[0]
    assert [p.name for p in executor_dirs(app)] == ["0"]
    failed_before = rig.driver.task_failures()

    # A task lost with its executor is logged at INFO when Spark does not blame the task
    # (bench/chaos.py _log_lost_tasks; CI once failed on a log without it). Should a kill
    # still lose no task, another follows on the replacement, up to KILL_ATTEMPTS.
    for attempt in range(KILL_ATTEMPTS):
        victim_dir = app / str(attempt)
        victim = wait(lambda: executor_pid(victim_dir), 120, "the executor's JVM")

        # a batch planned (offsets/N), not committed, with a task running on the executor
        batch = _kill_mid_task(rig, victim, victim_dir)
        assert batch not in committed_batches(chk), "the batch was committed before the kill"

        # the master has the worker launch a replacement executor for the application
        replacement = app / str(attempt + 1)
        wait(lambda: executor_pid(replacement), 120, "a replacement executor")
        # reads logged from here on are the replacement's (the killed task's Python worker saw
        # its JVM go long before the master had a new one started)
        mark = len(sidecars.log_text(setup.host_sidecar))
        assert executor_pid(victim_dir) is None, "the killed executor is still running"
        assert [p.name for p in executor_dirs(app)] == [str(n) for n in range(attempt + 2)]

        # the same driver (rig.wait fails if it exits) commits the batch the kill interrupted
        rig.wait(lambda: batch in committed_batches(chk), 120, f"batch {batch} to commit")
        log = rig.driver.log_text()
        assert f"Lost executor {victim_dir.name} " in log, log[-3000:]
        if rig.driver.task_failures() > failed_before:
            break
        print(f"executor kill {attempt + 1}: batch {batch} committed with no task lost; killing again")
    else:
        pytest.fail(f"none of {KILL_ATTEMPTS} executor kills lost a task:\n{log[-3000:]}")
    # Spark blamed the task ("Lost task ... ExecutorLostFailure") or only its executor
    assert "ExecutorLostFailure" in log or LOST_WITH_EXECUTOR in log, log[-3000:]
    assert rig.driver.starts == 1

    # its tasks ran again from the same offsets: every range of the batch was read through
    # the host's sidecar, some of them again after the kill
    start, end = batch_end_offsets(chk, batch - 1), batch_end_offsets(chk, batch)
    ranges = {(b, q, start.get((TOPIC, b, q), 0), e) for (_, b, q), e in end.items()
              if e > start.get((TOPIC, b, q), 0)}
    assert ranges, f"batch {batch} read nothing"
    served = {(s.broker, s.queue_id, s.start, s.end) for s in sidecars.served(setup.host_sidecar)}
    after = {(s.broker, s.queue_id, s.start, s.end) for s in served_since(setup.host_sidecar, mark)}
    assert ranges <= served, f"ranges of batch {batch} never read: {sorted(ranges - served)}"
    assert ranges & after, (f"no range of batch {batch} was read again after the kill: "
                            f"{sorted(ranges)} vs {sorted(after)[:20]}")
    assert all(s >= start.get((TOPIC, b, q), 0) for b, q, s, _ in after), \
        f"the replacement read offsets from before batch {batch}: {sorted(after)[:20]}"
    assert sidecars.served(rig.sidecar_dir) == [], "the driver's sidecar served reads"

    # everything acknowledged is in the sink exactly once, in queue order per file, and the
    # broker's group offsets are not ahead of the checkpoint
    rig.producer.stop()
    assert_invariants(rig)
    assert assert_queue_order(rig.driver.out) >= 1
    print(f"executor kill: batch {batch}, {rig.driver.task_failures() - failed_before} task(s) lost "
          f"and run again, {len(rig.producer.acked())} messages acknowledged")

