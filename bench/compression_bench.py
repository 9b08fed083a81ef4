"""What compressing the sink's bodies costs and saves: rows/s and bytes stored, per codec.

    python bench/compression_bench.py [--rows N] [--body-bytes B] [--runs R]
                                      [--name-server HOST:PORT] [--codecs none,zlib,lz4,zstd]
                                      [--decode-only]

Each run writes the same N rows of B-byte JSON bodies (orders with line items: text that
compresses as real JSON does) with ``df.write.format("rocketmq")`` into a fresh topic once
per codec (``compressionType``; ``none`` is the reference), alternating, after a warm-up
write of each; then reads each topic back with ``spark.read.format("rocketmq")`` and checks
every body. Bytes stored are the growth of the masters' commit logs over the write
(GET_BROKER_RUNTIME_INFO ``commitLogMaxOffset``): bodies, properties and record headers,
which is what the requests carried to the brokers too. An embedded broker (two brokers,
async flush) runs in a subprocess unless ``--name-server`` names a cluster (lz4 and zstd
need 5.x brokers: ``scripts/apache-cluster start 5.5.0 --dir DIR``). Prints a table and
each codec's write rows/s, read rows/s and bytes stored as ratios to ``none``.

``--decode-only`` measures the sidecar's decoder alone, in this process, no cluster: the
same rows stored as a Java producer of each codec stores them (sysFlag type bits), cut into
pull bodies of 32 records, turned into Arrow IPC messages as the shared-memory reader does
(``BodyBatcher(encoded=True)``), by the compiled decoder inflating compressed bodies itself
and, alternating with it, by the path compressed bodies took before it did (the compiled
decoder given no codecs hands a batch with a compressed body to the per-message decoder).
Prints rows and MB of bodies decoded per CPU second of this process (a shared machine's
other work left out) per codec and path, and the bytes the pull bodies hold.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from typing import Any

from common import Timer, broker_process, local_spark, table  # also puts the project root on sys.path
from sink_bench import create

from rocketmq_spark.client import ClientConfig, MQClient
from rocketmq_spark.client.admin import dispatch_progress


def json_body(i: int, size: int) -> bytes:
    """An order of about ``size`` bytes: a header and line items with varying values."""
    lines, out = [], b""
    n = 0
    while True:
        lines.append({"sku": f"SKU-{(i * 7919 + n * 104729) % 100000:05d}", "qty": (i + n) % 9 + 1,
                      "price": round(((i * 31 + n * 17) % 10000) / 100, 2), "currency": "EUR"})
        doc = {"order_id": f"ord-{i:09d}", "customer": f"cust-{i % 5000:05d}", "region": "eu-west",
               "status": "CREATED", "items": lines}
        nxt = json.dumps(doc, separators=(",", ":")).encode()
        if len(nxt) > size:
            return out or nxt[:size]
        out, n = nxt, n + 1


def bodies_df(spark: Any, n: int, size: int, partitions: int = 2) -> Any:
    from pyspark.sql.types import BinaryType, StructField, StructType

    rows = [(json_body(i, size),) for i in range(n)]
    schema = StructType([StructField("body", BinaryType(), False)])
    return spark.createDataFrame(rows, schema).repartition(partitions).cache()


def commit_log_bytes(mq: MQClient) -> int:
    return sum(dispatch_progress(mq.broker_runtime_info(addr))[0] for addr in mq.cluster_brokers().values())


def write(df: Any, ns: str, topic: str, codec: str) -> float:
    with Timer() as t:
        (df.write.format("rocketmq").mode("append").option("nameServer", ns).option("topic", topic)
         .option("compressionType", codec).save())
    return t.seconds


def read_back(spark: Any, ns: str, topic: str) -> tuple[float, list[bytes]]:
    with Timer() as t:
        rows = (spark.read.format("rocketmq").option("nameServer", ns).option("topic", topic)
                .load().select("body").collect())
    return t.seconds, [bytes(r.body) for r in rows]


def stored_pulls(bodies: list[bytes], codec: str) -> list[bytes]:
    """Pull bodies (32 records each) of rows with ``bodies`` stored with ``codec`` as a 5.x
    Java producer stores them (sysFlag type bits; ``none``: as sent)."""
    from rocketmq_spark.remoting.codes import MessageSysFlag
    from rocketmq_spark.remoting.compression import DEFLATE, Compression
    from rocketmq_spark.remoting.message import HostPort, MessageExt, encode_message

    how = Compression(codec, 0)
    flag = 0 if codec == "none" else MessageSysFlag.COMPRESSED | DEFLATE[codec][0]
    records = []
    for i, body in enumerate(bodies):
        records.append(encode_message(MessageExt(
            topic="orders", body=body if codec == "none" else how.deflate(body), sys_flag=flag,
            queue_offset=i, commit_log_offset=i * 10_000, born_timestamp=1_700_000_000_000 + i,
            store_timestamp=1_700_000_000_100 + i, born_host=HostPort("10.0.0.7", 53211),
            store_host=HostPort("10.0.0.1", 10911),
            properties={"UNIQ_KEY": f"0A00000700002A9F0000{i:012X}", "WAIT": "true"})))
    return [b"".join(records[k:k + 32]) for k in range(0, len(records), 32)]


def decode_only(rows: int, size: int, runs: int, codecs: list[str]) -> int:
    from rocketmq_spark.remoting.compression import INFLATE
    from rocketmq_spark.sidecar import columnar

    if columnar._compiled is None or not columnar._INFLATES:
        print("the compiled decoder (with set_inflaters) is not built: pip install .")
        return 1
    codecs_on = {bits: fn for bits, (_, fn) in INFLATE.items()}
    window = columnar.Window(0, rows, broker="broker-a")
    bodies = [json_body(i, size) for i in range(rows)]
    pulls = {c: stored_pulls(bodies, c) for c in codecs}
    raw = sum(len(b) for b in bodies)
    paths = {"compiled (inflates in C)": codecs_on, "before (per-message)": {}}
    rate: dict[tuple[str, str], list[float]] = {}

    def read(codec: str) -> int:
        got = 0
        for item in columnar.BodyBatcher(window, max_rows=4096, encoded=True).batches(pulls[codec]):
            got += item.num_rows
        assert got == rows
        return got

    try:
        for table_ in paths.values():          # warm-up of each path: codecs imported, caches in
            columnar._compiled.set_inflaters(table_)
            for codec in codecs:
                read(codec)
        for _ in range(runs):
            for codec in codecs:
                for path, table_ in paths.items():
                    if codec == "none" and path != next(iter(paths)):
                        continue                           # the same path either way
                    columnar._compiled.set_inflaters(table_)
                    # CPU seconds of this process, not wall time: a shared machine's other
                    # work does not count (the decode runs in this one thread)
                    began = time.process_time()
                    read(codec)
                    rate.setdefault((codec, path), []).append(rows / (time.process_time() - began))
    finally:
        columnar._compiled.set_inflaters(codecs_on)
    out = [{"codec": c, "path": p, "rows per CPU s (median)": statistics.median(v),
            "MB of bodies per CPU s": statistics.median(v) * raw / rows / 1e6,
            "MB in pull bodies": sum(len(b) for b in pulls[c]) / 1e6} for (c, p), v in rate.items()]
    print(f"decoder only: {rows} rows of {size} B JSON ({raw / 1e6:.1f} MB of bodies), {runs} runs, "
          f"BodyBatcher(max_rows=4096, encoded=True) over pull bodies of 32 records")
    print(table(out))
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=20_000)
    p.add_argument("--body-bytes", type=int, default=8192)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--codecs", default="none,zlib,lz4,zstd")
    p.add_argument("--name-server", help="a running cluster's NameServer (default: an embedded broker)")
    p.add_argument("--decode-only", action="store_true",
                   help="time the sidecar's decoder alone, compiled vs the per-message path (no cluster)")
    args = p.parse_args(argv)
    codecs = [c.strip() for c in args.codecs.split(",") if c.strip()]
    if "none" not in codecs:
        codecs.insert(0, "none")
    if args.decode_only:
        return decode_only(args.rows, args.body_bytes, args.runs, codecs)
    sidecar_dir = tempfile.mkdtemp(prefix="rmq-compress-bench-sc-")
    os.chmod(sidecar_dir, 0o700)
    os.environ["ROCKETMQ_SPARK_SIDECAR_DIR"] = sidecar_dir
    writes: dict[str, list[float]] = {c: [] for c in codecs}
    reads: dict[str, list[float]] = {c: [] for c in codecs}
    stored: dict[str, list[int]] = {c: [] for c in codecs}
    cluster = contextlib.nullcontext(args.name_server) if args.name_server else broker_process()
    with cluster as ns:
        mq = MQClient(ClientConfig.parse(ns, request_timeout=10.0))
        spark = local_spark("rocketmq-compression-bench")
        df = bodies_df(spark, args.rows, args.body_bytes)
        want = sorted(r.body for r in df.collect())
        raw = sum(len(b) for b in want)
        warm = bodies_df(spark, 500, args.body_bytes)
        usable = []
        for codec in codecs:
            topic = f"warm_{codec}_{uuid.uuid4().hex[:6]}"
            create(mq, topic)
            try:
                write(warm, ns, topic, codec)
                usable.append(codec)
            except Exception as exc:  # noqa: BLE001 - a codec this cluster refuses: reported
                why = next((line for line in str(exc).splitlines() if "compression" in line), str(exc))
                print(f"{codec}: refused by this cluster: {why.strip()[:300]}")
        for _ in range(args.runs):
            for codec in usable:
                topic = f"z_{codec}_{uuid.uuid4().hex[:8]}"
                create(mq, topic)
                before = commit_log_bytes(mq)
                secs = write(df, ns, topic, codec)
                stored[codec].append(commit_log_bytes(mq) - before)
                writes[codec].append(args.rows / secs)
                secs, got = read_back(spark, ns, topic)
                assert sorted(got) == want, f"{codec}: the bodies read back differ from those written"
                reads[codec].append(args.rows / secs)
        spark.stop()
        mq.close()
    rows = [{"codec": c, "write rows/s (median)": statistics.median(writes[c]),
             "read rows/s (median)": statistics.median(reads[c]),
             "MB stored (median)": statistics.median(stored[c]) / 1e6} for c in usable]
    print(f"cluster: {args.name_server or 'embedded (bench/common.broker_process)'}; {args.rows} rows of "
          f"{args.body_bytes} B JSON ({raw / 1e6:.1f} MB of bodies), {args.runs} runs")
    print(table(rows))
    ref = usable[0]
    for c in usable[1:]:
        print(f"{c} / {ref}: write {statistics.median(writes[c]) / statistics.median(writes[ref]):.2f}, "
              f"read {statistics.median(reads[c]) / statistics.median(reads[ref]):.2f}, "
              f"bytes stored {statistics.median(stored[c]) / statistics.median(stored[ref]):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
