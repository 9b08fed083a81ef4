"""An orderly and a concurrent query of one topic, in one Spark application.

    spark-submit --master spark://... cluster_queries.py NAMESRV TOPIC OUT_DIR

Both read the topic from the earliest offset with Trigger.AvailableNow into parquet under
OUT_DIR/orderly and OUT_DIR/concurrent (checkpoints beside them), each with its own
consumer group (TOPIC-orderly, TOPIC-concurrent). Prints one line per query:
``QUERY <mode> rows=<n> batches=<n>``.
"""

from __future__ import annotations

import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    namesrv, topic, out = argv[:3]
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.appName("rocketmq-deploy-queries").getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    queries = {}
    for mode, extra in (("orderly", {}), ("concurrent", {"minPartitions": "16"})):
        df = (spark.readStream.format("rocketmq").option("nameServer", namesrv)
              .option("topic", topic).option("consumerGroup", f"{topic}-{mode}")
              .option("consumeMode", mode).option("startingOffsets", "earliest")
              .options(**extra).load())
        queries[mode] = (df.select("topic", "broker", "queue_id", "queue_offset", "body")
                         .writeStream.format("parquet")
                         .option("path", str(Path(out) / mode))
                         .option("checkpointLocation", str(Path(out) / f"{mode}-checkpoint"))
                         .trigger(availableNow=True).start())
    for mode, q in queries.items():
        q.awaitTermination()
        rows = sum(p["numInputRows"] for p in q.recentProgress)
        print(f"QUERY {mode} rows={rows} batches={len(q.recentProgress)}", flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
