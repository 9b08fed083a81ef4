"""Run an iterator ahead in a thread: the next pulls travel to the broker and back while the
current bodies are decoded and streamed."""

from __future__ import annotations

import logging
import queue
import threading
from typing import Iterable, Iterator, TypeVar

T = TypeVar("T")
log = logging.getLogger(__name__)
_DONE = object()


def readahead(items: Iterable[T], depth: int, name: str = "rocketmq-readahead") -> Iterator[T]:
    """Yield ``items`` while a thread fetches up to ``depth`` of them ahead. The thread's
    exception is raised here, at the point it happened in the sequence; when the consumer
    stops early, the thread ends after the item it is fetching. The thread closes the
    iterator when it ends, so what the iterator holds (a connection) is only ever used and
    released by that thread."""
    if depth < 1:
        raise ValueError(f"depth must be >= 1, got {depth}")
    ahead: queue.Queue[tuple[object, BaseException | None]] = queue.Queue(maxsize=depth)
    stop = threading.Event()

    source = iter(items)

    def fetch() -> None:
        try:
            for item in source:
                ahead.put((item, None))
                if stop.is_set():
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
    try:
        while True:
            item, exc = ahead.get()
            if exc is not None:
                raise exc
            if item is _DONE:
                return
            yield item  # type: ignore[misc]
    finally:
        stop.set()
        while True:          # make room, so a fetch blocked on a full queue sees ``stop``
            try:
                ahead.get_nowait()
            except queue.Empty:
                break
