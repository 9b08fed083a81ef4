"""Run an iterator ahead in a thread: the next pulls travel to the broker and back while the
current bodies are decoded and streamed, and the next files are written while the path of
the last one goes out."""

from __future__ import annotations

import logging
import queue
import threading
from typing import Any, Callable, Iterable, Iterator, TypeVar

T = TypeVar("T")
log = logging.getLogger(__name__)
_DONE = object()


def readahead(items: Iterable[T], depth: int, name: str = "rocketmq-readahead",
              discard: Callable[[T], None] | None = None) -> Iterator[T]:
    """Yield ``items`` while a thread fetches up to ``depth`` of them ahead. The thread's
    exception is raised here, at the point it happened in the sequence; when the consumer
    stops early, the thread ends after the item it is fetching, and what may be unused goes
    to ``discard``: every item fetched but never yielded, and the one yielded last when the
    consumer stopped holding it (a file its reader may never take is removed; one it took
    is no longer under that name). The thread closes the iterator when it ends, so what the
    iterator holds (a connection) is only ever used and released by that thread."""
    if depth < 1:
        raise ValueError(f"depth must be >= 1, got {depth}")
    ahead: queue.Queue[tuple[object, BaseException | None]] = queue.Queue(maxsize=depth)
    stop = threading.Event()

    source = iter(items)

    def drop_fetched() -> None:
        """Empty the queue (making room for a fetch blocked on it), discarding the items.
        Both sides call it once ``stop`` is set: the consumer when it stops, the thread if
        it put an item after that, so no fetched item is left behind undiscarded."""
        while True:
            try:
                item, _ = ahead.get_nowait()
            except queue.Empty:
                return
            if item is not _DONE:
                _discard_one(discard, item)

    def fetch() -> None:
        try:
            for item in source:
                ahead.put((item, None))
                if stop.is_set():
                    drop_fetched()
                    return
            ahead.put((_DONE, None))
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer
            ahead.put((_DONE, exc))
        finally:
            close = getattr(source, "close", None)
            if close is not None:
                try:
                    close()
                except Exception:  # noqa: BLE001 - the consumer has what matters
                    log.debug("closing a read-ahead source failed", exc_info=True)

    thread = threading.Thread(target=fetch, name=name, daemon=True)
    thread.start()
    held: object = _DONE      # the item out with the consumer until it asks for the next
    try:
        while True:
            item, exc = ahead.get()
            if exc is not None:
                raise exc
            if item is _DONE:
                return
            held = item
            yield item  # type: ignore[misc]
            held = _DONE
    finally:
        stop.set()
        if held is not _DONE:     # closed at the yield: the consumer may not have used it
            _discard_one(discard, held)
        drop_fetched()


def _discard_one(discard: Callable[[Any], None] | None, item: object) -> None:
    if discard is None:
        return
    try:
        discard(item)
    except Exception:  # noqa: BLE001 - the rest still goes
        log.debug("discarding a fetched item failed", exc_info=True)
