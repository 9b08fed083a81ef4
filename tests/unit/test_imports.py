"""The reader's modules are imported with the cyclic collector paused (spark/imports.py)."""

from __future__ import annotations

import gc
import subprocess
import sys

import pytest

from rocketmq_spark.spark.imports import collector_paused


def test_collector_is_off_inside_and_back_on_after() -> None:
    assert gc.isenabled()
    with collector_paused():
        assert not gc.isenabled()
    assert gc.isenabled()


def test_collector_back_on_after_an_error() -> None:
    with pytest.raises(RuntimeError):
        with collector_paused():
            raise RuntimeError("boom")
    assert gc.isenabled()


def test_collector_left_off_when_it_was_off() -> None:
    gc.disable()
    try:
        with collector_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


# A fresh interpreter: what Spark's source runner does when it asks for a stream reader,
# with the collections counted by generation. Unpaused, the import sets off a full one
# (generation 2, the one that walks every object: 44 - 51 ms in Spark's runner); paused,
# the collector only looks at the young objects once it is back on.
_PROBE = """
import gc, sys
from rocketmq_spark.spark.source import RocketMQDataSource
from rocketmq_spark.spark.schema import SOURCE_SCHEMA_SPARK
full = []
gc.callbacks.append(lambda phase, info: phase == "start" and info["generation"] == 2 and full.append(1))
source = RocketMQDataSource({"nameServer": "127.0.0.1:9876", "topic": "t", "consumerGroup": "g"})
before = set(sys.modules)
reader = source.streamReader(SOURCE_SCHEMA_SPARK)
loaded = [m for m in set(sys.modules) - before if m.startswith("rocketmq_spark.")]
print(len(loaded), len(full), gc.isenabled(), type(reader).__name__)
"""


def test_asking_for_a_stream_reader_sets_off_no_full_collection() -> None:
    out = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    loaded, full, enabled, kind = out.stdout.split()
    assert int(loaded) > 10          # the reader's modules were imported by this call
    assert int(full) == 0
    assert enabled == "True"
    assert kind == "RocketMQStreamReader"
