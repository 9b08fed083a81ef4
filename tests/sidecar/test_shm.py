"""Record batches handed over in shared-memory files: grouping, flow control, clean-up."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pytest

from rocketmq_spark.sidecar import shm
from rocketmq_spark.sidecar.readahead import readahead
from tests.waiting import wait_until


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
    for path in shm.batch_files(batches(10), tmp_path, per_file=4, first=4):
        got = shm.read_batches(path)      # the reader takes each file as it comes
        rows.append(sum(b.num_rows for b in got))
    assert rows == [12, 12, 6]
    assert files_in(tmp_path) == []


def test_the_first_file_holds_fewer_batches_so_the_reader_starts_sooner(tmp_path: Path) -> None:
    got = [shm.read_batches(path) for path in shm.batch_files(batches(10), tmp_path, per_file=4)]
    assert [len(g) for g in got] == [1, 4, 4, 1]          # FIRST_FILE_BATCHES, then per_file
    assert [b.column(0)[0].as_py() for g in got for b in g] == list(range(0, 30, 3))


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


def test_a_batch_that_cannot_be_serialized_leaves_no_file(tmp_path: Path) -> None:
    class Broken:
        schema = batches(1)[0].schema

        def serialize(self) -> bytes:
            raise ValueError("not serializable")

    with pytest.raises(ValueError, match="not serializable"):
        shm.write_batches([batches(1)[0], Broken()], tmp_path)
    assert list(tmp_path.glob(f"{shm.PREFIX}*")) == []


def test_a_batch_source_failing_mid_file_leaves_no_file(tmp_path: Path) -> None:
    # Each batch goes into its file as soon as it is made, so a file is half written when
    # the source fails; it is removed with the one handed out but never taken, and the
    # error reaches the reader.
    on_disk: list[int] = []

    def failing():
        yield from batches(3)
        on_disk.append(len(list(tmp_path.glob(f"{shm.PREFIX}*"))))
        raise RuntimeError("the pulls failed")

    gen = shm.batch_files(failing(), tmp_path, per_file=4)
    next(gen)                                                  # one batch: FIRST_FILE_BATCHES
    with pytest.raises(RuntimeError, match="the pulls failed"):
        next(gen)
    assert on_disk == [2]                   # the first file, and the second with two batches in
    assert list(tmp_path.glob(f"{shm.PREFIX}*")) == []


def test_files_written_ahead_in_a_thread_are_removed_when_the_reader_stops(tmp_path: Path) -> None:
    # The sidecar writes files in a thread of their own (readahead): here the writer has
    # written every file before the reader stops: it took the first file, got the second
    # one's path but never took it, and never got the third's.
    made = readahead(shm.batch_files(batches(3), tmp_path, per_file=1, first=1, ahead=4), 4,
                     discard=shm.discard)
    first = next(made)
    wait_until(lambda: len(files_in(tmp_path)) == 3, 10, "the writer to write every file")
    shm.read_batches(first)
    next(made)
    made.close()
    # the writer's thread may hand over the last path only now: it removes it itself
    wait_until(lambda: files_in(tmp_path) == [], 10, "the files never taken to be removed")


def test_a_file_the_reader_took_stays_when_its_stream_closes(tmp_path: Path) -> None:
    made = readahead(shm.batch_files(batches(2), tmp_path, per_file=1, first=1), 4, discard=shm.discard)
    reader = shm.FileReader()
    held = reader.take(next(made))          # its batches still held by the reader
    wait_until(lambda: len(files_in(tmp_path)) == 1, 10, "the writer to write the second file")
    made.close()
    assert [b.column(0).to_pylist() for b in held] == [[0, 1, 2]]
    wait_until(lambda: files_in(tmp_path) == [], 10, "the second file, never taken, to be removed")
    assert len(list(tmp_path.glob(f"{shm.PREFIX}*{shm.TAKEN}"))) == 1     # the first stays
    del held
    reader.close()


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


# ---------------------------------------------------------------- files handed back for reuse

def names(directory: Path) -> list[str]:
    """The kinds (suffixes) of the batch files in ``directory``."""
    return sorted(p.suffix for p in directory.glob(f"{shm.PREFIX}*"))


def test_a_file_handed_back_is_written_over_and_gives_only_its_new_batches(tmp_path: Path) -> None:
    reader = shm.FileReader()
    first = shm.write_batches(batches(8, rows=100), tmp_path)
    inode = os.stat(first).st_ino
    assert [b.num_rows for b in reader.take(first)] == [100] * 8   # dropped at once
    reader.release()
    assert names(tmp_path) == [".free"]
    second = shm.write_batches(batches(2), tmp_path)               # smaller, over the old bytes
    assert os.stat(second).st_ino == inode and second != first
    assert oct(os.stat(second).st_mode & 0o777) == "0o600"
    got = reader.take(second)
    assert [b.column(0).to_pylist() for b in got] == [[0, 1, 2], [3, 4, 5]]
    del got
    reader.close()
    assert names(tmp_path) == [".free"]


def test_a_file_whose_batches_are_still_held_is_not_written_over(tmp_path: Path) -> None:
    reader = shm.FileReader()
    held = reader.take(shm.write_batches(batches(2), tmp_path))[1]
    reader.take(shm.write_batches(batches(1), tmp_path))           # checks the first: still held
    assert names(tmp_path) == [".taken", ".taken"]
    third = shm.write_batches(batches(3), tmp_path)                # no free file: a new one
    assert names(tmp_path) == [".arrow", ".taken", ".taken"]
    reader.take(third)
    reader.close()                    # the held one is unlinked; its mapping stays readable
    assert names(tmp_path) == [".free", ".free"]
    assert held.column(0).to_pylist() == [3, 4, 5]


def test_free_files_past_the_pool_or_unused_too_long_are_removed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    reader = shm.FileReader()
    paths = [shm.write_batches(batches(1), tmp_path) for _ in range(shm.POOL_MAX + 2)]
    for p in paths:
        reader.take(p)
    reader.close()
    assert names(tmp_path) == [".free"] * (shm.POOL_MAX + 2)
    shm.write_batches(batches(1), tmp_path)
    assert names(tmp_path) == [".arrow"] + [".free"] * (shm.POOL_MAX - 1)
    monkeypatch.setattr(shm, "FREE_SECONDS", -1.0)
    shm.write_batches(batches(1), tmp_path)                         # all too old: a new file
    assert names(tmp_path) == [".arrow", ".arrow"]


def test_a_file_from_a_sidecar_that_does_not_reuse_files_is_unlinked(tmp_path: Path) -> None:
    plain = tmp_path / f"{shm.PREFIX}old{shm.SUFFIX}"
    os.rename(shm.write_batches(batches(2), tmp_path), plain)
    reader = shm.FileReader()
    assert len(reader.take(str(plain))) == 2
    reader.close()
    assert names(tmp_path) == []
    with pytest.raises(ValueError, match="not a batch file"):
        reader.take(str(tmp_path / "secrets.arrow"))


def test_sweep_and_a_closing_sidecar_remove_taken_and_free_files(tmp_path: Path) -> None:
    reader = shm.FileReader()
    kept = reader.take(shm.write_batches(batches(1), tmp_path))
    reader.take(shm.write_batches(batches(1), tmp_path))
    reader.take(shm.write_batches(batches(1), tmp_path))
    assert names(tmp_path) == [".free", ".taken", ".taken"]
    for p in tmp_path.iterdir():
        os.utime(p, (1000.0, 1000.0))
    assert shm.sweep(tmp_path, now=1000.0 + shm.STALE_SECONDS + 1) == 3
    del kept
    reader.close()                    # what it held is gone already: nothing to hand back
    assert names(tmp_path) == []
    paths = [shm.write_batches(batches(1), tmp_path) for _ in range(2)]
    for p in paths:
        reader.take(p)
    reader.close()
    assert shm.drop_free(tmp_path) == 2 and names(tmp_path) == []


def test_messages_encoded_in_advance_and_batches_make_one_stream(tmp_path: Path) -> None:
    from rocketmq_spark.remoting.message import MessageExt, encode_message
    from rocketmq_spark.sidecar import columnar

    data = b"".join(encode_message(MessageExt(topic="t", body=b"b%d" % i, queue_offset=i)) for i in range(6))
    window = columnar.Window(0, 6, broker="broker-a")
    got = columnar.encode_parts([data], window, -1, 100)
    assert got is not None and got[0] is not None
    batch, _ = columnar.decode_parts([data], window)
    path = shm.write_batches([got[0], batch, got[0]], tmp_path)
    read = shm.FileReader().take(path)
    assert [b.equals(batch) for b in read] == [True, True, True]
