"""Record batches handed over in shared-memory files: grouping, flow control, clean-up."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pytest

from rocketmq_spark.sidecar import shm


def batches(n: int, rows: int = 3) -> list[pa.RecordBatch]:
    return [pa.record_batch({"i": pa.array(range(k * rows, (k + 1) * rows), pa.int64())})
            for k in range(n)]


def files_in(directory: Path) -> list[Path]:
    return sorted(directory.glob(f"{shm.PREFIX}*{shm.SUFFIX}"))


def test_a_file_holds_several_batches_and_is_gone_once_read(tmp_path: Path) -> None:
    path = shm.write_batches(batches(3), tmp_path)
    assert oct(os.stat(path).st_mode & 0o777) == "0o600"
    got = shm.read_batches(path)
    assert [b.column(0).to_pylist() for b in got] == [[0, 1, 2], [3, 4, 5], [6, 7, 8]]
    assert not os.path.exists(path)


def test_batches_are_grouped_per_file_and_the_rest_goes_last(tmp_path: Path) -> None:
    rows = []
    for path in shm.batch_files(batches(10), tmp_path, per_file=4):
        got = shm.read_batches(path)      # the reader takes each file as it comes
        rows.append(sum(b.num_rows for b in got))
    assert rows == [12, 12, 6]
    assert files_in(tmp_path) == []


def test_a_reader_that_takes_nothing_holds_the_writer_back(tmp_path: Path) -> None:
    waits: list[float] = []
    alive = iter([True] * 5 + [False])
    made = list(shm.batch_files(batches(20), tmp_path, per_file=1, ahead=3,
                                reader_alive=lambda: next(alive), sleep=waits.append))
    assert len(made) == 3                 # then it waited, found the reader gone and stopped
    assert waits == [0.0005, 0.001, 0.002, 0.004, 0.008]
    assert files_in(tmp_path) == []       # what the reader never took is removed


def test_the_writer_goes_on_as_soon_as_the_reader_takes_a_file(tmp_path: Path) -> None:
    gen = shm.batch_files(batches(6), tmp_path, per_file=1, ahead=2, sleep=lambda s: None)
    first, second = next(gen), next(gen)
    taken = shm.read_batches(first)
    third = next(gen)
    assert len(files_in(tmp_path)) == 2
    rest = [shm.read_batches(p) for p in [second, third]]
    rest += [shm.read_batches(p) for p in gen]
    assert [b.column(0)[0].as_py() for got in [taken, *rest] for b in got] == [0, 3, 6, 9, 12, 15]
    assert files_in(tmp_path) == []


def test_closing_mid_stream_removes_the_untaken_files(tmp_path: Path) -> None:
    gen = shm.batch_files(batches(8), tmp_path, per_file=2)
    shm.read_batches(next(gen))
    next(gen)
    assert len(files_in(tmp_path)) == 1
    gen.close()
    assert files_in(tmp_path) == []


def test_only_the_sidecars_files_are_read(tmp_path: Path) -> None:
    other = tmp_path / "secrets.arrow"
    other.write_bytes(b"x")
    with pytest.raises(ValueError, match="not a batch file"):
        shm.read_batches(str(other))
    assert other.exists()


def test_sweep_removes_only_stale_batch_files(tmp_path: Path) -> None:
    old = Path(shm.write_batches(batches(1), tmp_path))
    new = Path(shm.write_batches(batches(1), tmp_path))
    other = tmp_path / "keep.txt"
    other.write_text("x")
    os.utime(old, (1000.0, 1000.0))
    os.utime(other, (1000.0, 1000.0))
    assert shm.sweep(tmp_path, now=1000.0 + shm.STALE_SECONDS + 1) == 1
    assert not old.exists() and new.exists() and other.exists()
