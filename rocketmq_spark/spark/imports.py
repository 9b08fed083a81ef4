"""Importing the reader's and writer's modules without Python's cyclic collector running.

Why. Spark starts a new Python process for a streaming query's reader (its source runner)
and for planning, and imports our modules there after its own, pyspark's and pyarrow's.
What an import makes (modules, classes, functions) lives as long as the process, so a
collection during it frees almost nothing, yet the import allocates enough to set off a
full one, which walks every object the process has: in the runner, 28 young, 3 middle and
one full collection took 57 - 63 ms of the 220 ms of CPU our reader's import cost (the
full one 44 - 51; measured with ``gc.callbacks``, bench/README.md, stop 37). Paused, the
collector is back on afterwards with its counts as they were: one collection of the young
objects follows (about 14 ms), and a full one only once the process has made enough
objects of its own.
"""

from __future__ import annotations

import contextlib
import gc
from typing import Iterator


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Run the body with the cyclic collector off; it is turned back on only if it was on."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()
