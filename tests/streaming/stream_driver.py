"""A Spark driver of its own for the driver-kill tests (run as a subprocess).

    python stream_driver.py NAMESRV TOPIC GROUP CHECKPOINT OUT LOCAL_DIR [TRIGGER_MS]

Reads ``format("rocketmq")`` (orderly, clustering, startingOffsets=earliest) into parquet
at OUT with a processing-time trigger of TRIGGER_MS, checkpointing at CHECKPOINT, until
it is killed. Prints ``STARTED`` once the query runs.
"""

from __future__ import annotations

import os
import sys


def main(argv: list[str]) -> int:
    namesrv, topic, group, checkpoint, out, local_dir = argv[:6]
    trigger_ms = int(argv[6]) if len(argv) > 6 else 200
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master("local[2]").appName("rocketmq-driver-kill")
             .config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.local.dir", local_dir)
             .config("spark.sql.session.timeZone", "UTC")
             .config("spark.python.worker.reuse", "true")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    df = (spark.readStream.format("rocketmq").option("nameServer", namesrv).option("topic", topic)
          .option("consumerGroup", group).option("startingOffsets", "earliest")
          .option("queueRefreshIntervalMs", "1000").load())
    q = (df.writeStream.format("parquet").option("path", out)
         .option("checkpointLocation", checkpoint)
         .trigger(processingTime=f"{trigger_ms} milliseconds").start())
    print("STARTED", flush=True)
    q.awaitTermination()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
