"""A Spark driver of its own for the exactly-once fault tests (run as a subprocess).

    python eo_driver.py NAMESRV SOURCE SINK GROUP CHECKPOINT LOCAL_DIR TXN_ID MODE FAIL_AT [PRODUCER_GROUP]

MODE ``stream``: the rocketmq source (orderly, earliest, 60 messages a trigger) into the
rocketmq sink with deliveryGuarantee=exactly-once, Trigger.AvailableNow, until the source
has nothing more; ``batch``: a batch read of the whole source written with ``df.write``.
Rows become ``body`` and ``sharding_key`` (the body's text before ':'), 8 rows per Send call.
FAIL_AT: the row whose body ends with ``:FAIL_AT`` fails its task's first attempt (after the
rows before it in the task were sent); Spark (local[2,4]) retries the task. Prints
``STARTED`` when the query starts and ``DONE`` when it finished.
"""

from __future__ import annotations

import os
import sys


def main(argv: list[str]) -> int:
    namesrv, source, sink, group, checkpoint, local_dir, txn_id, mode = argv[:8]
    fail_at = argv[8] if len(argv) > 8 else ""
    producer_group = argv[9] if len(argv) > 9 else ""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    spark = (SparkSession.builder.master("local[2,4]").appName("rocketmq-exactly-once")
             .config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.local.dir", local_dir)
             .config("spark.python.worker.reuse", "true")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    suffix = f":{fail_at}".encode()

    @F.udf("binary")
    def fail_once(body):  # type: ignore[no-untyped-def]
        from pyspark import TaskContext

        if fail_at and bytes(body).endswith(suffix) and TaskContext.get().attemptNumber() == 0:
            raise RuntimeError(f"injected failure at row {fail_at}")
        return body

    reader = spark.readStream if mode == "stream" else spark.read
    r = (reader.format("rocketmq").option("nameServer", namesrv).option("topic", source)
         .option("consumerGroup", group).option("startingOffsets", "earliest"))
    if mode == "stream":
        r = r.option("maxMessagesPerTrigger", "60")
    df = r.load().select(fail_once("body").alias("body"),
                         F.split(F.col("body").cast("string"), ":")[0].alias("sharding_key"))
    opts = {"nameServer": namesrv, "topic": sink, "deliveryGuarantee": "exactly-once",
            "transactionalId": txn_id, "batchSize": "8"}
    if producer_group:
        opts["producerGroup"] = producer_group
    if mode == "stream":
        q = (df.writeStream.format("rocketmq").options(**opts).option("checkpointLocation", checkpoint)
             .trigger(availableNow=True).start())
        print("STARTED", flush=True)
        q.awaitTermination()
        if q.exception() is not None:
            print(f"FAILED {q.exception()}", flush=True)
            return 1
    else:
        print("STARTED", flush=True)
        df.write.format("rocketmq").mode("append").options(**opts).save()
    print("DONE", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
