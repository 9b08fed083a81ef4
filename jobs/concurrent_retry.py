"""Concurrent consumption with retries: rows that fail are sent back to the retry topic.

    spark-submit --properties-file conf/spark-defaults.conf jobs/concurrent_retry.py [--conf FILE]

Reads the orders topic with ``consumeMode=concurrent`` (no queue locks, ranges split over
``minPartitions`` partitions, the group's ``%RETRY%`` topic read as well). A stand-in
business rule fails every "paid" event of a few customers the first time it is seen;
``foreachBatch`` writes the good rows to parquet and sends the failed ones back
(CONSUMER_SEND_MSG_BACK, delay level 1 = 1 s). The broker redelivers them through
``%RETRY%<group>`` with ``reconsume_times`` + 1 and the original topic, and the job
processes them then. It stops once every event is in the output."""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import cluster, parse_args, print_lag, say, spark_session  # noqa: E402
from orders_stream import produce  # noqa: E402

FLAKY_CUSTOMERS = ("customer-001", "customer-002", "customer-003")


def main(argv: list[str] | None = None) -> int:
    args, cfg = parse_args(__doc__.splitlines()[0], argv)
    from pyspark.sql import functions as F

    from rocketmq_spark.spark.retry import send_back

    group = cfg.consumer_group + "-concurrent"
    output = cfg.output + "-concurrent"
    with cluster(cfg) as live:
        produce(live)
        spark = spark_session("rocketmq-concurrent-retry", args.master)
        options = {**live.source_options(), "consumerGroup": group, "consumeMode": "concurrent",
                   "minPartitions": "8", "startingOffsets": "earliest"}
        stats = {"sent_back": 0, "retried_ok": 0, "written": 0}
        # rows in the output from earlier runs (read once: before the first write there is
        # no parquet to read, and Spark logs a stack trace for every attempt)
        before = _count(spark, output)

        def process(batch, batch_id: int) -> None:
            decoded = batch.withColumn("order", F.from_json(
                F.col("body").cast("string"), "customer STRING, status STRING, seq LONG")).persist()
            # the stand-in business rule: first attempts of some customers' payments fail
            failing = (F.col("reconsume_times") == 0) & (F.col("order.status") == "paid") \
                & F.col("order.customer").isin(*FLAKY_CUSTOMERS)
            failed = decoded.where(failing)
            stats["sent_back"] += send_back(failed, options=options, delay_level=1)
            good = decoded.where(~failing)
            stats["retried_ok"] += good.where(F.col("reconsume_times") > 0).count()
            good.select("topic", "queue_id", "queue_offset", "reconsume_times",
                        F.col("order.*")).write.mode("append").parquet(output)
            stats["written"] += good.count()
            decoded.unpersist()

        query = (spark.readStream.format("rocketmq").options(**options).load()
                 .writeStream.foreachBatch(process)
                 .option("checkpointLocation", cfg.checkpoint + "-concurrent")
                 .trigger(processingTime="1 second").start())
        expected = sum(live_client_max(live))
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            done = before + stats["written"]
            if done >= expected and stats["retried_ok"] >= stats["sent_back"]:
                break
            query.awaitTermination(1)
        while query.status.get("isTriggerActive"):   # let the running batch finish first
            query.awaitTermination(0.2)
        query.stop()
        say(f"sent back {stats['sent_back']} failed rows; {stats['retried_ok']} came back through "
            f"%RETRY%{group} and succeeded")
        say(f"output: {output} ({_count(spark, output)} rows; {expected} events in the topic)")
        spark.stop()
        print_lag(live, group)
    return 0


def live_client_max(cfg) -> list[int]:  # type: ignore[no-untyped-def]
    from common import client

    c = client(cfg)
    try:
        return [c.max_offset(q) for q in c.subscribe_queues(cfg.topic)]
    finally:
        c.close()


def _count(spark, path: str) -> int:  # type: ignore[no-untyped-def]
    try:
        return spark.read.parquet(path).count()
    except Exception:  # noqa: BLE001 - nothing written yet
        return 0


if __name__ == "__main__":
    sys.exit(main())
