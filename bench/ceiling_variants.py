"""How fast can any Python streaming source be here? The prebuilt-Arrow source
(``ceiling_source.py``) with other partition counts and Arrow batch sizes, against Spark's
``rate-micro-batch`` source, best of R runs each.

    python bench/ceiling_variants.py [--messages N] [--rounds R]

No broker and no sidecar: only Spark local[2] and the Python Data Source API. Prints
rows/s (wall, AvailableNow into noop) and the ratio to the rate source for each variant.
"""

from __future__ import annotations

import argparse
import sys
import tempfile

import ceiling_source
from common import table  # also puts the project root on sys.path
from source_bench import rate_df, run_noop, spark_session

VARIANTS = [(4, 4096), (2, 4096), (8, 4096), (4, 1024), (4, 32768), (2, 32768)]   # (partitions, rows a batch)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--messages", type=int, default=200_000)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args(argv)
    n, work = args.messages, tempfile.mkdtemp(prefix="rmq-bench-ceiling-")
    spark = spark_session()
    run_noop(rate_df(spark, 2_000), f"{work}/warm-rate")
    run_noop(ceiling_source.ceiling_df(spark, 2_000), f"{work}/warm-ceiling")

    def best(make, name: str) -> float:
        return min(run_noop(make(), f"{work}/{name}-{i}")[0] for i in range(args.rounds))

    rate = best(lambda: rate_df(spark, n), "rate")
    rows = []
    for partitions, batch_rows in VARIANTS:
        ceiling_source.PARTITIONS, ceiling_source.BATCH_ROWS = partitions, batch_rows
        wall = best(lambda: ceiling_source.ceiling_df(spark, n), f"c{partitions}-{batch_rows}")
        rows.append({"partitions": partitions, "rows a batch": batch_rows, "rows/s (wall)": n / wall,
                     "/ rate-micro-batch": f"{rate / wall:.3f}"})
    spark.stop()
    print(table(rows))
    print(f"\nrate-micro-batch: {n / rate:,.0f} rows/s (wall, best of {args.rounds})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
