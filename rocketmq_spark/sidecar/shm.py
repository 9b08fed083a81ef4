"""Record batches handed over in shared memory, for a reader on the sidecar's host.

How this works. For a Pull with ``shared_memory``, the sidecar writes each record batch as a
whole Arrow IPC stream into a file of its own in shared memory (``/dev/shm`` when the host
has it, else the sidecar's private directory), created with mode 0600, and sends only the
file's path. The reader maps the file (``pa.memory_map``: no copy), unlinks it at once (the
mapping lives on until its batches are dropped) and reads the batch straight out of the
mapping. Bytes then cross no socket and are copied once, by the sidecar's writer. A file the
reader never took (it went away mid-stream) is unlinked by the sidecar when the stream is
cancelled, and any left after a crash is swept after ``STALE_SECONDS``.
"""

from __future__ import annotations

import logging
import os
import tempfile
import time
from pathlib import Path
from typing import Iterable, Iterator

import pyarrow as pa

log = logging.getLogger(__name__)

PREFIX = "rmq-spark-batch-"
SUFFIX = ".arrow"
STALE_SECONDS = 600.0
_SHM = Path("/dev/shm")


def shm_dir(fallback: Path) -> Path:
    """Where the files go: RAM-backed /dev/shm when writable, else ``fallback``."""
    if _SHM.is_dir() and os.access(_SHM, os.W_OK | os.X_OK):
        return _SHM
    return fallback


def write_batch(batch: pa.RecordBatch, directory: Path) -> str:
    fd, path = tempfile.mkstemp(prefix=PREFIX, suffix=SUFFIX, dir=directory)
    os.close(fd)
    try:
        with pa.OSFile(path, "wb") as sink, pa.ipc.new_stream(sink, batch.schema) as writer:
            writer.write_batch(batch)
    except BaseException:
        _unlink(path)
        raise
    return path


def batch_files(batches: Iterable[pa.RecordBatch], directory: Path) -> Iterator[str]:
    """One file per batch; on cancellation (the reader went away) the files it was given
    but may not have taken are removed."""
    given: list[str] = []
    done = False
    try:
        for batch in batches:
            path = write_batch(batch, directory)
            given.append(path)
            del given[:-4]          # a reader takes each file as it comes: only the last few can be left
            yield path
        done = True
    finally:
        if not done:
            for path in given:
                _unlink(path)


def read_batches(path: str) -> list[pa.RecordBatch]:
    """The batches of a file ``write_batch`` made, zero-copy; the file is unlinked."""
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
