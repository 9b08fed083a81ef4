"""The main example: orders produced orderly by customer, streamed into parquet.

    spark-submit --properties-file conf/spark-defaults.conf jobs/orders_stream.py [--conf FILE]

With no broker configured it starts the embedded cluster, produces a sample workload
(orders with keys and tags, sent orderly by customer), streams the topic with the orderly
source (Trigger.AvailableNow) into parquet with a checkpoint, and prints rows read,
per-queue offsets, the group's lag on the broker and where the output is. Running it again
continues from the checkpoint."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import JobConfig, client, cluster, parse_args, print_lag, say, spark_session  # noqa: E402


def produce(cfg: JobConfig) -> int:
    if cfg.messages <= 0:
        return 0
    from rocketmq_spark.sharding import select_queue
    from rocketmq_spark.workload import orders

    c = client(cfg)
    try:
        queues = c.send_queues(cfg.topic)
        start = sum(c.max_offset(q) for q in queues)  # continue the order sequence across runs
        sent = 0
        for order in orders(cfg.messages, customers=cfg.customers, start=start):
            message, key = order.to_message(cfg.topic)
            c.send(message, queue=select_queue(key, queues))
            sent += 1
    finally:
        c.close()
    say(f"produced {sent} order events to {cfg.topic} (orderly by customer, tags created/paid/shipped)")
    return sent


def stream(cfg: JobConfig, master: str | None) -> None:
    spark = spark_session("rocketmq-orders-stream", master)
    df = (spark.readStream.format("rocketmq").options(**cfg.source_options())
          .option("consumeMode", "orderly").option("startingOffsets", "earliest").load())
    query = (df.selectExpr("topic", "broker", "queue_id", "queue_offset", "msg_id", "tags", "keys",
                           "CAST(body AS STRING) AS body", "store_timestamp")
             .writeStream.format("parquet").option("path", cfg.output)
             .option("checkpointLocation", cfg.checkpoint)
             .trigger(availableNow=True).start())
    query.awaitTermination()
    rows = sum(p.get("numInputRows", 0) for p in query.recentProgress)
    say(f"this run read {rows} rows in {len(query.recentProgress)} micro-batch(es)")
    if query.lastProgress:
        end = query.lastProgress["sources"][0]["endOffset"]
        say(f"per-queue offsets after this run (next offset to read): {end}")
    total = spark.read.parquet(cfg.output).count()
    say(f"output: {Path(cfg.output).resolve() if '://' not in cfg.output else cfg.output} "
        f"({total} rows in all), checkpoint: {cfg.checkpoint}")
    spark.stop()


def main(argv: list[str] | None = None) -> int:
    args, cfg = parse_args(__doc__.splitlines()[0], argv)
    with cluster(cfg) as live:
        produce(live)
        stream(live, args.master)
        print_lag(live)
    return 0


if __name__ == "__main__":
    sys.exit(main())
