"""A batch read of an offset range: spark.read.format("rocketmq") with starting/ending offsets.

    spark-submit --properties-file conf/spark-defaults.conf jobs/batch_range.py \
        [--conf FILE] [--from-offset N] [--to-offset M]

Like every job here, it first sends ``[workload].messages`` order events to the topic
(``--messages 0``: none), then reads queue offsets ``[N, M)`` of every queue of the topic
(default: the first 100 of each), without a consumer group offset or a lock, and prints
per-queue counts and a few rows. Offsets past a queue's end are capped at its max offset."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import client, cluster, parse_args, say, spark_session  # noqa: E402
from orders_stream import produce  # noqa: E402


def extra(p) -> None:  # type: ignore[no-untyped-def]
    p.add_argument("--from-offset", type=int, default=0)
    p.add_argument("--to-offset", type=int, default=100)


def main(argv: list[str] | None = None) -> int:
    args, cfg = parse_args(__doc__.splitlines()[0], argv, extra)
    if not 0 <= args.from_offset <= args.to_offset:
        raise SystemExit("--from-offset and --to-offset: need 0 <= from <= to")
    with cluster(cfg) as live:
        produce(live)
        c = client(live)
        try:
            queues = c.subscribe_queues(live.topic)
            maxes = {q: c.max_offset(q) for q in queues}
        finally:
            c.close()
        start: dict = {}
        end: dict = {}
        for q in queues:
            hi = min(args.to_offset, maxes[q])
            start.setdefault(q.topic, {}).setdefault(q.broker_name, {})[str(q.queue_id)] = min(args.from_offset, hi)
            end.setdefault(q.topic, {}).setdefault(q.broker_name, {})[str(q.queue_id)] = hi
        spark = spark_session("rocketmq-batch-range", args.master)
        df = (spark.read.format("rocketmq").options(**live.source_options())
              .option("startingOffsets", json.dumps(start)).option("endingOffsets", json.dumps(end))
              .load())
        say(f"reading offsets [{args.from_offset}, {args.to_offset}) of every queue of {live.topic}")
        df.groupBy("broker", "queue_id").count().orderBy("broker", "queue_id").show()
        df.selectExpr("queue_id", "queue_offset", "tags", "keys", "CAST(body AS STRING) AS body") \
          .orderBy("queue_id", "queue_offset").show(5, truncate=60)
        say(f"rows read: {df.count()}")
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
