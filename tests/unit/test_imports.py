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


# Spark's planning process makes the stream reader only to send it (pickled) to the tasks:
# it makes no call, so it imports neither gRPC nor protobuf nor the sidecar's client (0.15 s
# of CPU a query). The source runner and the tasks import them at their first call.
_PLANNING = """
import sys
from pyspark import cloudpickle
from rocketmq_spark.spark.source import RocketMQDataSource
source = RocketMQDataSource({"nameServer": "127.0.0.1:9876", "topic": "t", "consumerGroup": "g"})
reader = source.streamReader(source.schema())
batch = source.reader(source.schema())
cloudpickle.loads(cloudpickle.dumps(reader.read))
heavy = sorted(m for m in ("grpc", "google.protobuf", "rocketmq_spark.sidecar.client",
                           "rocketmq_spark.sidecar.v1.sidecar_pb2") if m in sys.modules)
print(",".join(heavy) or "none")
"""


def test_planning_a_read_imports_no_grpc() -> None:
    out = subprocess.run([sys.executable, "-c", _PLANNING], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "none"


def test_the_sidecar_package_names_load_on_first_use() -> None:
    import rocketmq_spark.sidecar as sidecar

    assert sorted(sidecar.__all__) == sorted(sidecar._WHERE)
    for name in sidecar.__all__:
        getattr(sidecar, name)                  # each one loads
        assert name in vars(sidecar)            # and is kept: later lookups do not come back
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        sidecar.nothing  # noqa: B018
