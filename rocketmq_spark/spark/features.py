"""What the running pyspark's Python Data Source API offers, decided once, by feature.

The source and the sink run on pyspark 4.0 and later; newer releases hand a source more.
Every check here looks for the feature itself, never at a version string, and each gives
the class or value the reader and the writer build on, so neither has a version check of
its own:

================================ ======= ===================================================
feature                          since   without it
================================ ======= ===================================================
admission control                4.2     Spark calls ``latestOffset()`` with no start and no
(``latestOffset(start, limit)``,         limit; the stream reader bounds a batch by
``ReadLimit``, ``ReadMaxRows``)          ``maxMessagesPerTrigger`` from the offsets it last
                                         planned (stream_reader)
``SupportsTriggerAvailableNow``  4.2     Spark's own fallback: Trigger.AvailableNow runs one
                                         batch, up to the offsets of the moment it started
``DataSourceStreamArrowWriter``  4.1     the stream writer takes rows and makes Arrow batches
                                         of them (writer)
filter push-down (``Filter``)    4.1     every filter stays with Spark
================================ ======= ===================================================

``READ_LIMITS`` supplies stand-ins for ``ReadLimit`` / ``ReadAllAvailable`` / ``ReadMaxRows``
where pyspark has none, so the reader can name them on every release.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyspark
import pyspark.sql.datasource as _ds

try:
    from pyspark.sql.streaming import datasource as _stream_ds
except ImportError:            # pyspark 4.0, 4.1
    _stream_ds = None

PYSPARK_VERSION: str = pyspark.__version__

ADMISSION_CONTROL: bool = _stream_ds is not None and hasattr(_stream_ds, "ReadMaxRows")
TRIGGER_AVAILABLE_NOW: bool = _stream_ds is not None and hasattr(_stream_ds, "SupportsTriggerAvailableNow")
STREAM_ARROW_WRITER: bool = hasattr(_ds, "DataSourceStreamArrowWriter")
FILTER_PUSHDOWN: bool = hasattr(_ds, "Filter")


class _ReadLimit:
    """pyspark's ReadLimit, where it has none (no admission control before 4.2)."""


@dataclass(frozen=True)
class _ReadAllAvailable(_ReadLimit):
    pass


@dataclass(frozen=True)
class _ReadMaxRows(_ReadLimit):
    max_rows: int


if ADMISSION_CONTROL:
    ReadLimit: Any = _stream_ds.ReadLimit
    ReadAllAvailable: Any = _stream_ds.ReadAllAvailable
    ReadMaxRows: Any = _stream_ds.ReadMaxRows
else:
    ReadLimit, ReadAllAvailable, ReadMaxRows = _ReadLimit, _ReadAllAvailable, _ReadMaxRows


class _NoTriggerAvailableNow:
    """Stands in for SupportsTriggerAvailableNow before 4.2: Spark does not look for it."""


TriggerAvailableNowBase: Any = (_stream_ds.SupportsTriggerAvailableNow if TRIGGER_AVAILABLE_NOW
                                else _NoTriggerAvailableNow)
StreamWriterBase: Any = _ds.DataSourceStreamArrowWriter if STREAM_ARROW_WRITER else _ds.DataSourceStreamWriter


def summary() -> dict[str, bool | str]:
    """What this pyspark gives the source and the sink (for logs and the user guide's table)."""
    return {"pyspark": PYSPARK_VERSION, "admission control": ADMISSION_CONTROL,
            "Trigger.AvailableNow": TRIGGER_AVAILABLE_NOW, "stream Arrow writer": STREAM_ARROW_WRITER,
            "filter push-down": FILTER_PUSHDOWN}
