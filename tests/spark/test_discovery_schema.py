"""format("rocketmq") is found with no register call; the schema is the sidecar's."""

from __future__ import annotations

import io
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from rocketmq_spark.sidecar import SOURCE_SCHEMA
from rocketmq_spark.spark.schema import SOURCE_SCHEMA_SPARK, arrow_schema

ROOT = Path(__file__).resolve().parents[2]


def test_spark_schema_is_the_sidecar_arrow_schema():
    assert arrow_schema().equals(SOURCE_SCHEMA)
    assert [f.name for f in SOURCE_SCHEMA_SPARK.fields] == SOURCE_SCHEMA.names


def test_spark_finds_the_source_without_registration(spark):
    df = (spark.readStream.format("rocketmq").option("nameServer", "127.0.0.1:9876")
          .option("topic", "t").load())
    assert df.isStreaming
    assert df.schema == SOURCE_SCHEMA_SPARK


@pytest.mark.parametrize("read", ["stream", "batch"])
def test_a_bad_option_fails_load_naming_it(spark, read):
    reader = spark.readStream if read == "stream" else spark.read
    with pytest.raises(Exception) as err:
        (reader.format("rocketmq").option("nameServer", "127.0.0.1:9876").option("topic", "t")
         .option("consumeMode", "fifo").load())
    assert "option 'consumeMode': 'fifo' is not one of orderly, concurrent" in str(err.value)


def test_a_batch_only_option_on_a_stream_fails_when_the_query_starts(spark, tmp_path):
    """load() cannot tell a stream from a batch read: endingOffsets passes it, and the
    query fails at start, naming the option, before reading anything."""
    df = (spark.readStream.format("rocketmq").option("nameServer", "127.0.0.1:9876")
          .option("topic", "t").option("endingOffsets", "latest").load())
    with pytest.raises(Exception) as err:
        q = df.writeStream.format("noop").option("checkpointLocation", str(tmp_path)).start()
        try:
            q.awaitTermination(60)
        finally:
            q.stop()
    assert "option 'endingOffsets' applies to batch reads only" in str(err.value)


def test_regular_install_layout_is_discovered(tmp_path):
    """Spark's lookup worker (pyspark.sql.worker.lookup_data_sources) scans
    pkgutil.iter_modules() for pyspark_* modules. Run its real code in a fresh Python whose
    sys.path holds the two packages as an installed wheel would lay them out, from a
    directory that is not the repository."""
    site = tmp_path / "site"
    site.mkdir()
    for pkg in ("pyspark_rocketmq", "rocketmq_spark"):
        (site / pkg).symlink_to(ROOT / pkg, target_is_directory=True)
    code = (
        "import io, sys\n"
        "from pyspark.sql.worker.lookup_data_sources import _main\n"
        "out = io.BytesIO()\n"
        "_main(io.BytesIO(), out)\n"
        "sys.stdout.buffer.write(out.getvalue())\n")
    env = {**os.environ, "PYTHONPATH": str(site)}
    res = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env,
                         capture_output=True, timeout=120, check=True)
    data = io.BytesIO(res.stdout)
    (count,) = struct.unpack(">i", data.read(4))
    names = []
    for _ in range(count):
        (n,) = struct.unpack(">i", data.read(4))
        names.append(data.read(n).decode())
        (m,) = struct.unpack(">i", data.read(4))
        data.read(m)   # the pickled class
    assert "rocketmq" in names
