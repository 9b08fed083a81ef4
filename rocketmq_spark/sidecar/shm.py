"""Record batches handed over in shared memory, for a reader on the sidecar's host.

How this works. For a Pull with ``shared_memory``, the sidecar writes a few record batches
(``BATCHES_PER_FILE``) as one Arrow IPC stream into a file of its own in shared memory
(``/dev/shm`` when the host has it, else the sidecar's private directory), created with mode
0600, and sends only the file's path. The stream is written a batch at a time, each as soon
as it is made, from its encapsulated message (most of them built by the compiled decoder
already, as the pieces of ``columnar``'s ``Encoded``, which a ``writev`` gathers). The
reader maps the file (no copy) and reads the batches straight out of the mapping. Bytes
then cross no socket and are copied once, by the sidecar's writer.

Files are reused. A file's name says which kind it is: ``<PREFIX>r-<token>.arrow`` is
written and waiting for its reader, who takes it by renaming it ``.taken`` and, once every
batch it read from it is gone (its mapping closes: no buffer holds it), hands it back by
renaming it ``.free``. The sidecar writes its next batches into a ``.free`` file over the
old bytes (an IPC stream ends at its end-of-stream marker), so the file's pages are not
cleared, charged and freed again for every file: that cost more than the copy itself. A
file whose batches are still held when the reader ends is unlinked instead (its mapping
lives on until they are dropped). At most ``POOL_MAX`` files wait for reuse, none much
longer than ``FREE_SECONDS`` (the sidecar trims the pool when it claims a file and once a
second while it runs), and none once the sidecar has closed. A file without ``r-`` in its
name (from a sidecar that does not reuse files) is unlinked by the reader once mapped.

Flow control. gRPC's window bounds the paths in flight, not the files they name, so the
writer counts its own: at most ``FILES_AHEAD`` files the reader has not yet taken exist at
once, and the writer waits for the reader before making another. A slow reader thus holds
the sidecar's reading back instead of letting files pile up in RAM. A file the reader never
took (it went away mid-stream) is unlinked by the sidecar when the stream ends, and any left
after a crash is swept after ``STALE_SECONDS``.
"""

from __future__ import annotations

import contextlib
import logging
import mmap
import os
import secrets
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Protocol, Sequence

import pyarrow as pa

log = logging.getLogger(__name__)

PREFIX = "rmq-spark-batch-"
REUSED = PREFIX + "r-"   # files the reader hands back for reuse
BATCHES_PER_FILE = 4     # fewer files and messages per batch; the reader gets them a little later
FIRST_FILE_BATCHES = 1   # a range's first file: its task starts on rows a batch in, not four
FILES_AHEAD = 4          # files written but not yet taken by the reader, at most
_WAIT_FIRST = 0.0005     # waiting for the reader: first pause, doubled up to _WAIT_MOST
_WAIT_MOST = 0.01
SUFFIX = ".arrow"         # written, for the reader to take
TAKEN = ".taken"          # mapped by the reader
FREE = ".free"            # handed back: the sidecar writes into it again
POOL_MAX = 8              # free files kept for reuse in a directory, at most
FREE_SECONDS = 30.0       # a free file not reused for this long is removed
STALE_SECONDS = 600.0
_SHM = Path("/dev/shm")
END_OF_STREAM = b"\xff\xff\xff\xff\x00\x00\x00\x00"   # continuation marker, a zero length
_IOV_MAX = 512            # buffers a writev takes at once (Linux allows 1,024)


def shm_dir(fallback: Path) -> Path:
    """Where the files go: RAM-backed /dev/shm when writable, else ``fallback``."""
    if _SHM.is_dir() and os.access(_SHM, os.W_OK | os.X_OK):
        return _SHM
    return fallback


class Message(Protocol):
    """A record batch, or one encoded already (``columnar.Encoded``): what a file holds."""

    @property
    def schema(self) -> pa.Schema: ...

    def serialize(self) -> Any: ...


def write_batches(batches: Sequence[Message], directory: Path) -> str:
    """One file holding ``batches`` (at least one, of one schema) as an Arrow IPC stream
    (the schema's message, each batch's, the end-of-stream marker): a free file written
    over when there is one, else a new one."""
    writing = _Writing(directory, batches[0].schema)
    for b in batches:
        writing.add(b)
    return writing.finish()


class _Writing:
    """One file being written, a batch at a time: each batch goes in as soon as it is made,
    while its buffers are still in the CPU's caches, and is then freed, so a stream holds
    one batch's buffers at a time, not a file's (``batch_files``). An encoded message's
    pieces are written as they are: the ``writev`` joins them. The file is removed if
    writing it fails or it is given up."""

    def __init__(self, directory: Path, schema: pa.Schema) -> None:
        self.path = _claim(directory)
        self._fd = -1
        with self._or_removed():
            self._fd = os.open(self.path, os.O_WRONLY)
            _write_all(self._fd, [schema.serialize()])

    def add(self, batch: Message) -> None:
        with self._or_removed():
            _write_all(self._fd, list(getattr(batch, "pieces", None) or (batch.serialize(),)))

    def finish(self) -> str:
        """Ends the stream and closes the file; its path, for the reader."""
        with self._or_removed():
            _write_all(self._fd, [END_OF_STREAM])
        os.close(self._fd)
        self._fd = -1
        return self.path

    def abandon(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        _unlink(self.path)

    @contextlib.contextmanager
    def _or_removed(self) -> Iterator[None]:
        """The body, or the file removed when it fails (a batch that cannot be serialized,
        a write that fails)."""
        try:
            yield
        except BaseException:
            self.abandon()
            raise


def _write_all(fd: int, parts: list[Any]) -> None:
    views = [memoryview(p).cast("B") for p in parts]
    while views:
        done = os.writev(fd, views[:_IOV_MAX])
        if done <= 0:
            raise OSError(f"writing a batch file: writev wrote {done} bytes")
        while views and done >= len(views[0]):
            done -= len(views[0])
            views.pop(0)
        if views and done:
            views[0] = views[0][done:]


def _claim(directory: Path) -> str:
    """A file for the next batches: the newest free one (renamed for this use), else a new
    one (mode 0600)."""
    for candidate in _free_files(directory):
        path = str(directory / f"{REUSED}{secrets.token_hex(8)}{SUFFIX}")
        try:
            os.rename(candidate, path)       # atomic: another writer cannot claim it too
        except FileNotFoundError:
            continue
        return path
    path = str(directory / f"{REUSED}{secrets.token_hex(8)}{SUFFIX}")
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    return path


def _free_files(directory: Path) -> list[str]:
    """This user's free files, newest first; those past POOL_MAX or older than FREE_SECONDS
    are removed instead."""
    free: list[tuple[float, str]] = []
    uid, limit = os.getuid(), time.time() - FREE_SECONDS
    with os.scandir(directory) as entries:
        for e in entries:
            if e.name.startswith(REUSED) and e.name.endswith(FREE):
                try:
                    st = e.stat(follow_symlinks=False)
                except OSError:
                    continue
                if st.st_uid == uid:
                    free.append((st.st_ctime, e.path))     # ctime: when it was handed back
    free.sort(reverse=True)
    kept = []
    for n, (handed_back, path) in enumerate(free):
        if n < POOL_MAX and handed_back >= limit:
            kept.append(path)
        else:
            _unlink(path)
    return kept


def batch_files(batches: Iterable[Message], directory: Path, *,
                per_file: int = BATCHES_PER_FILE, first: int = FIRST_FILE_BATCHES,
                ahead: int = FILES_AHEAD,
                reader_alive: Callable[[], bool] = lambda: True,
                sleep: Callable[[float], None] = time.sleep) -> Iterator[str]:
    """Paths of files of up to ``per_file`` batches each (the first of up to ``first``: a
    task waits for its first rows until that file is written), at most ``ahead`` of them
    untaken at a time. Stops early (no error) once ``reader_alive()`` is false; files it
    made but the reader did not take are removed when the generator ends, however it ends."""
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
    writing: _Writing | None = None
    count, limit = 0, first
    try:
        for batch in batches:
            if writing is None:
                if not room():
                    return
                writing = _Writing(directory, batch.schema)
            writing.add(batch)
            count += 1
            if count == limit:
                untaken.append(writing.finish())
                writing, count, limit = None, 0, per_file
                yield untaken[-1]
        if writing is not None:
            untaken.append(writing.finish())
            writing = None
            yield untaken[-1]
        finished = True
    finally:
        if writing is not None:
            writing.abandon()
        if not finished:
            for path in untaken:
                _unlink(path)


def read_batches(path: str) -> list[pa.RecordBatch]:
    """The batches of a file ``write_batches`` made, zero-copy; the file is unlinked (the
    mapping lives until the batches are dropped). ``FileReader`` hands files back instead."""
    _check(path)
    source = pa.memory_map(path, "r")
    _unlink(path)
    return list(pa.ipc.open_stream(source))


def _check(path: str) -> str:
    name = Path(path).name
    if not name.startswith(PREFIX) or not name.endswith(SUFFIX):
        raise ValueError(f"not a batch file of the sidecar: {path!r}")
    return name


class FileReader:
    """The reader's side of one stream of batch files: ``take`` maps a file and returns its
    batches (zero-copy); once none of a file's batches is held any more, the file goes back
    to the sidecar for reuse (checked at every ``take`` and at ``close``). One thread."""

    def __init__(self) -> None:
        self._held: list[tuple[mmap.mmap, str]] = []      # mapped files, with their .taken path

    def take(self, path: str) -> list[pa.RecordBatch]:
        name = _check(path)
        self.release()
        if not name.startswith(REUSED):
            return read_batches(path)
        taken = path[:-len(SUFFIX)] + TAKEN
        os.rename(path, taken)                # taken: the writer may make another
        with open(taken, "rb") as f:
            mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        self._held.append((mapped, taken))
        return list(pa.ipc.open_stream(pa.py_buffer(mapped)))

    def release(self) -> None:
        """Hands back every file none of whose batches is held any more."""
        held = []
        for mapped, taken in self._held:
            try:
                mapped.close()                # refused while a buffer still points into it
            except BufferError:
                held.append((mapped, taken))
                continue
            try:
                os.rename(taken, taken[:-len(TAKEN)] + FREE)
            except FileNotFoundError:         # swept meanwhile
                pass
        self._held = held

    def close(self) -> None:
        """Hands back what can be; files still in use are unlinked (their mappings stay
        until their batches are dropped)."""
        self.release()
        for _, taken in self._held:
            _unlink(taken)
        self._held = []


def sweep(directory: Path, now: float | None = None) -> int:
    """Remove this user's batch files (written, taken or free) older than STALE_SECONDS: a
    reader or a sidecar that crashed."""
    limit = (time.time() if now is None else now) - STALE_SECONDS
    removed = 0
    for p in directory.glob(f"{PREFIX}*"):
        if p.suffix not in (SUFFIX, TAKEN, FREE):
            continue
        try:
            st = p.stat()
            if st.st_uid == os.getuid() and st.st_mtime < limit:
                p.unlink()
                removed += 1
        except OSError:
            continue
    return removed


def trim(directory: Path) -> None:
    """Remove the free files past POOL_MAX or unused for FREE_SECONDS (an idle sidecar
    calls it now and then, so its pool does not outlive the reads that made it)."""
    _free_files(directory)


def drop_free(directory: Path) -> int:
    """Remove this user's free files (a sidecar going away does not keep them)."""
    removed = 0
    for p in directory.glob(f"{REUSED}*{FREE}"):
        try:
            if p.stat().st_uid == os.getuid():
                p.unlink()
                removed += 1
        except OSError:
            continue
    return removed


def discard(path: str) -> None:
    """Remove a file written for a reader that will never take it."""
    _unlink(path)


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
