"""What every deployment test checks after a fault, and how it waits (shared by
test_faults, test_executor_kill and test_cluster_mode)."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from bench.chaos import BodyCheck, Rig, covers
from bench.common import committed_end, file_sink_files
from tests.waiting import wait_until as wait  # noqa: F401 - the deployment tests' name for it


def assert_invariants(rig: Rig) -> None:
    """Everything acknowledged so far is committed, in the sink exactly once with the body
    the producer sent at its position (nothing else there but sends whose outcome is
    unknown), and the broker's group offsets are not ahead of the checkpoint."""
    acked = rig.producer.acked()
    rig.wait_caught_up(acked, 120)
    c = rig.check(acked)
    assert covers(committed_end(rig.driver.checkpoint), acked)
    assert c.lost == 0, f"{c.lost} acknowledged messages are missing from the sink"
    assert c.duplicated == 0, f"{c.duplicated} rows are duplicates"
    assert c.broker_ahead == 0, "the group's offsets on the broker passed the checkpoint"
    assert c.rows >= len(acked)
    # positions alone pass a reader that returns the wrong bytes at the right offsets
    assert_bodies(c.bodies)


def assert_bodies(check: BodyCheck, what: str = "") -> None:
    """A body check (``compare_bodies`` / ``compare_digests``) of ``what`` found nothing
    wrong; the failure names how many rows and the first few, with expected and observed
    digests."""
    prefix = f"{what}: " if what else ""
    assert check.ok, prefix + check.report()
    assert check.rows > 0, f"{prefix}the body check compared no rows"


def assert_queue_order(sink: Path) -> int:
    """In every file the sink committed, each queue's rows are in offset order; returns
    the number of files checked. (Orderly mode reads one partition per queue, and a
    partition is written as one file in the order it was read.)"""
    import pyarrow.parquet as pq

    checked = 0
    for f in file_sink_files(sink):
        t = pq.read_table(f, columns=["broker", "queue_id", "queue_offset"])
        per_queue: dict[tuple[str, int], list[int]] = defaultdict(list)
        for b, q, o in zip(*(t.column(c).to_pylist() for c in ("broker", "queue_id", "queue_offset"))):
            per_queue[(b, q)].append(o)
        for queue, offs in per_queue.items():
            assert offs == sorted(offs), f"{f.name}: {queue} out of order: {offs[:20]}"
            assert offs == list(range(offs[0], offs[0] + len(offs))), f"{f.name}: {queue} has gaps"
        checked += 1
    return checked
