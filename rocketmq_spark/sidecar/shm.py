"""Record batches handed over in shared memory, for a reader on the sidecar's host.

How this works. For a Pull with ``shared_memory``, the sidecar writes a few record batches
(``BATCHES_PER_FILE``) as one Arrow IPC stream into a file of its own in shared memory
(``/dev/shm`` when the host has it, else the sidecar's private directory), created with mode
0600, and sends only the file's path. The reader maps the file (``pa.memory_map``: no copy),
unlinks it at once (the mapping lives on until its batches are dropped) and reads the batches
straight out of the mapping. Bytes then cross no socket and are copied once, by the sidecar's
writer.

Flow control. gRPC's window bounds the paths in flight, not the files they name, so the
writer counts its own: at most ``FILES_AHEAD`` files the reader has not yet taken (unlinked)
exist at once, and the writer waits for the reader before making another. A slow reader
thus holds the sidecar's reading back instead of letting files pile up in RAM. A file the
reader never took (it went away mid-stream) is unlinked by the sidecar when the stream
ends, and any left after a crash is swept after ``STALE_SECONDS``.
"""

from __future__ import annotations

import logging
import os
import tempfile
import time
from pathlib import Path
from typing import Callable, Iterable, Iterator

import pyarrow as pa

log = logging.getLogger(__name__)

PREFIX = "rmq-spark-batch-"
BATCHES_PER_FILE = 4     # fewer files and messages per batch; the reader gets them a little later
FILES_AHEAD = 4          # files written but not yet taken by the reader, at most
_WAIT_FIRST = 0.0005     # waiting for the reader: first pause, doubled up to _WAIT_MOST
_WAIT_MOST = 0.01
SUFFIX = ".arrow"
STALE_SECONDS = 600.0
_SHM = Path("/dev/shm")


def shm_dir(fallback: Path) -> Path:
    """Where the files go: RAM-backed /dev/shm when writable, else ``fallback``."""
    if _SHM.is_dir() and os.access(_SHM, os.W_OK | os.X_OK):
        return _SHM
    return fallback


def write_batches(batches: list[pa.RecordBatch], directory: Path) -> str:
    """One file holding ``batches`` (at least one, of one schema) as an Arrow IPC stream."""
    fd, path = tempfile.mkstemp(prefix=PREFIX, suffix=SUFFIX, dir=directory)
    os.close(fd)
    try:
        with pa.OSFile(path, "wb") as sink, pa.ipc.new_stream(sink, batches[0].schema) as writer:
            for batch in batches:
                writer.write_batch(batch)
    except BaseException:
        _unlink(path)
        raise
    return path


def batch_files(batches: Iterable[pa.RecordBatch], directory: Path, *,
                per_file: int = BATCHES_PER_FILE, ahead: int = FILES_AHEAD,
                reader_alive: Callable[[], bool] = lambda: True,
                sleep: Callable[[float], None] = time.sleep) -> Iterator[str]:
    """Paths of files of up to ``per_file`` batches each, at most ``ahead`` of them untaken
    at a time. Stops early (no error) once ``reader_alive()`` is false; files it made but the
    reader did not take are removed when the generator ends, however it ends."""
    untaken: list[str] = []

    def room() -> bool:
        pause = _WAIT_FIRST
        while True:
            untaken[:] = [p for p in untaken if os.path.exists(p)]
            if len(untaken) < ahead:
                return True
            if not reader_alive():
                return False
            sleep(pause)
            pause = min(pause * 2, _WAIT_MOST)

    finished = False
    try:
        for group in _groups(batches, per_file):
            if not room():
                return
            untaken.append(write_batches(group, directory))
            yield untaken[-1]
        finished = True
    finally:
        if not finished:
            for path in untaken:
                _unlink(path)


def _groups(batches: Iterable[pa.RecordBatch], size: int) -> Iterator[list[pa.RecordBatch]]:
    """``batches`` in lists of ``size``, the last one shorter when they do not divide."""
    group: list[pa.RecordBatch] = []
    for batch in batches:
        group.append(batch)
        if len(group) == size:
            yield group
            group = []
    if group:
        yield group


def read_batches(path: str) -> list[pa.RecordBatch]:
    """The batches of a file ``write_batches`` made, zero-copy; the file is unlinked."""
    if not Path(path).name.startswith(PREFIX):
        raise ValueError(f"not a batch file of the sidecar: {path!r}")
    source = pa.memory_map(path, "r")
    _unlink(path)
    return list(pa.ipc.open_stream(source))


def sweep(directory: Path, now: float | None = None) -> int:
    """Remove this user's batch files older than STALE_SECONDS (a reader that crashed)."""
    limit = (time.time() if now is None else now) - STALE_SECONDS
    removed = 0
    for p in directory.glob(f"{PREFIX}*{SUFFIX}"):
        try:
            st = p.stat()
            if st.st_uid == os.getuid() and st.st_mtime < limit:
                p.unlink()
                removed += 1
        except OSError:
            continue
    return removed


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
