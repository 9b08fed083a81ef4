"""Faults under load: the sidecar or the broker killed with SIGKILL while a producer sends
at a steady rate and an orderly query (a Spark driver in a subprocess, local[2,4] so Spark
retries failed tasks) streams the topic into parquet with a checkpoint.

The setup is bench/chaos.py's ``Rig``: broker subprocess on a fixed data directory and
NameServer port, producer thread (only acknowledged sends count), driver subprocess with an
auto-started sidecar in a private directory. After each fault the sink (read through its
``_spark_metadata`` log) must hold every acknowledged message exactly once (key
topic+broker+queue+offset) with the body the producer sent there, and the group's offsets
on the broker must not pass what the checkpoint committed. (Driver kills are
tests/streaming's subject.)
"""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
import time
from pathlib import Path
from typing import Iterator

import pytest

from bench.chaos import Rig
from bench.common import batch_end_offsets, committed_batches, sidecar_pid
from tests.deploy import sidecars
from tests.deploy.checks import assert_invariants, wait

LOCK_EXPIRY = 60.0      # seconds a broker keeps the lock of a client that stopped renewing


@pytest.fixture(scope="module")
def rig() -> Iterator[Rig]:
    work = Path(tempfile.mkdtemp(prefix="rmq-faults-"))
    r = Rig(work)
    try:
        r.start()
        yield r
    finally:
        r.close()
        shutil.rmtree(work, ignore_errors=True)


def _advanced_everywhere_after(rig: Rig, t_wall: float) -> bool:
    """A batch planned after ``t_wall`` (wall clock) committed and moved every queue."""
    chk = rig.driver.checkpoint
    done = committed_batches(chk)
    for prev, b in zip(done, done[1:]):
        if (chk / "offsets" / str(b)).stat().st_mtime < t_wall:
            continue
        start, end = batch_end_offsets(chk, prev), batch_end_offsets(chk, b)
        if end and all(end[q] > start.get(q, 0) for q in end):
            return True
    return False


def test_sidecar_killed_mid_batch_is_replaced_and_the_query_goes_on(rig: Rig) -> None:
    d = rig.sidecar_dir
    old = sidecar_pid(d)
    assert old is not None, "no sidecar answers before the fault"
    spawned_before = sidecars.started_pids(d)
    driver_starts, failed_before = rig.driver.starts, rig.driver.task_failures()
    rig.wait(rig.mid_batch, 60, "a micro-batch under way")
    t_kill = time.monotonic()
    os.kill(old, signal.SIGKILL)

    # the next use (a task's pull or the driver's next call) spawns exactly one new sidecar
    new = wait(lambda: (p := sidecar_pid(d)) not in (None, old) and p, 60, "a new sidecar")
    t_up = time.time()
    assert sidecars.started_pids(d) == spawned_before + [new]

    # It takes the queue locks back at once (same lock owner): batches planned after the
    # query's next lock refresh (every second) move every queue, long before the broker
    # would expire the dead sidecar's locks.
    rig.wait(lambda: _advanced_everywhere_after(rig, t_up + 1.5), 30,
             "a batch planned after the lock refresh moving every queue")
    assert time.monotonic() - t_kill < LOCK_EXPIRY / 2
    assert sum(s.rows for s in sidecars.served(d, latest_only=True)) > 0, "the new sidecar served no reads"
    assert sidecar_pid(d) == new
    # the query went on in the same driver (failed tasks, if a pull was cut, were retried)
    assert rig.driver.alive() and rig.driver.starts == driver_starts
    print(f"sidecar kill: {rig.driver.task_failures() - failed_before} task(s) failed and were retried")
    assert_invariants(rig)


def test_broker_killed_and_restarted_on_its_data_loses_nothing(rig: Rig) -> None:
    broker_addr = rig.broker.broker_addrs["broker-a"]
    rig.wait(rig.mid_batch, 60, "a micro-batch under way")
    before = rig.producer.acked()
    log_mark = len(rig.driver.log_text())
    rig.broker.kill()
    # While the broker is down the query either waits or fails; it fails (task retries
    # exhausted, or planning cannot read offsets) within seconds at most.
    deadline = time.monotonic() + 20
    while rig.driver.alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    failed = not rig.driver.alive()
    rig.broker.start()
    assert rig.broker.broker_addrs["broker-a"] == broker_addr, "the broker came back on another port"
    if failed:
        log = rig.driver.log_text()[log_mark:]
        assert "StreamingQueryException" in log, log[-3000:]
        error = log[log.index("StreamingQueryException"):]
        assert broker_addr in error, f"the query's error does not name the broker {broker_addr}:\n{error[:3000]}"
    # every message acknowledged before the kill gets read (a failed driver is started
    # again on its checkpoint), and everything after it too
    rig.wait_caught_up(before, 120)
    print(f"broker kill: the query {'failed and was restarted' if failed else 'waited'}; "
          f"{rig.producer.failures} sends failed meanwhile")
    assert_invariants(rig)
