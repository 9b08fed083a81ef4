"""What each way of writing rows exactly once costs a broker and the client, per row, against
the at-least-once path (no Spark: the client's own pipelines, one process).

    python bench/txn_paths_bench.py [--rows N] [--size BYTES] [--runs R] [--name-server HOST:PORT]

Each run writes the same N rows (SIZE-byte bodies) into fresh topics, four ways:

- ``at-least-once``: the sink's send pipeline (``send_all``: batches of up to 256 rows,
  several in flight) - the reference;
- ``halves``: what the exactly-once sink does today - each row a half message
  (``send_halves``, 64 in flight; brokers take no transactional batches), then one
  END_TRANSACTION COMMIT each (``Transactions.end_all``, 64 in flight);
- ``staged``: a path the sink could take instead - the rows batch-sent to a staging topic
  (invisible to the target's consumers), read back (pulls of 32, one queue after another),
  and batch-sent to the target at the commit: three passes, each at batch speed.

Prints rows/s per path (median of the runs), the client's CPU seconds, and each path's
ratio to at-least-once. Against ``--name-server`` any cluster is measured (a real Apache
one from ``scripts/apache-cluster start``); by default an embedded broker in a subprocess.
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from contextlib import ExitStack
from typing import Callable

from common import Timer, broker_process, table  # also puts the project root on sys.path

from rocketmq_spark.client import ClientConfig, MQClient
from rocketmq_spark.remoting.codes import TransactionState
from rocketmq_spark.sidecar import Outgoing
from rocketmq_spark.sidecar.send import send_all, send_halves
from rocketmq_spark.sidecar.transactions import Transactions
from rocketmq_spark.structs import HalfMessage, Message, PullStatus

GROUP = "txn_paths_bench"


def fresh_topic(mq: MQClient, prefix: str, timeout: float = 60.0) -> str:
    topic = f"{prefix}_{uuid.uuid4().hex[:8]}"
    mq.create_topic(topic, queues=4)
    deadline = time.monotonic() + timeout
    while len(mq.send_queues(topic)) < 4:         # every master's queues routed
        if time.monotonic() > deadline:
            raise RuntimeError(f"topic {topic} was not routed within {timeout} s")
        time.sleep(0.2)
    return topic


def rows(topic: str, n: int, size: int) -> list[Outgoing]:
    return [Outgoing(Message(topic, b"%0*d" % (size, i))) for i in range(n)]


def at_least_once(mq: MQClient, n: int, size: int) -> None:
    send_all(mq, rows(fresh_topic(mq, "alo"), n, size), GROUP)


def halves(mq: MQClient, n: int, size: int) -> None:
    results = send_halves(mq, rows(fresh_topic(mq, "half"), n, size), GROUP, "bench",
                          tag_property="TXN_PATHS_BENCH")
    Transactions.end_all(mq, GROUP, [HalfMessage.of(r) for r in results], TransactionState.COMMIT,
                         per_queue=64)


def staged(mq: MQClient, n: int, size: int) -> None:
    stage, target = fresh_topic(mq, "stage"), fresh_topic(mq, "target")
    send_all(mq, rows(stage, n, size), GROUP)
    read: list[Message] = []
    for q in mq.subscribe_queues(stage):
        offset = 0
        while True:
            r = mq.pull(q, offset, group=GROUP, max_nums=32)
            if r.status is not PullStatus.FOUND:
                break
            read.extend(Message(target, m.body, properties=dict(m.properties)) for m in r.messages)
            offset = r.next_begin_offset
    if len(read) != n:
        raise RuntimeError(f"read {len(read)} staged rows back, not {n}")
    send_all(mq, [Outgoing(m) for m in read], GROUP)


PATHS: dict[str, Callable[[MQClient, int, int], None]] = {
    "at-least-once": at_least_once, "halves": halves, "staged": staged}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=20_000)
    p.add_argument("--size", type=int, default=100)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--name-server", help="a running cluster's NameServer (default: an embedded broker)")
    args = p.parse_args(argv)
    with ExitStack() as stack:
        ns = args.name_server or stack.enter_context(broker_process())
        mq = stack.enter_context(MQClient(ClientConfig.parse(ns, request_timeout=10.0)))
        at_least_once(mq, 1000, args.size)                        # warm-up: routes, connections
        seconds: dict[str, list[float]] = {k: [] for k in PATHS}
        cpu: dict[str, list[float]] = {k: [] for k in PATHS}
        for _ in range(args.runs):
            for name, path in PATHS.items():              # alternating, same rows
                c0 = time.process_time()
                with Timer() as t:
                    path(mq, args.rows, args.size)
                seconds[name].append(t.seconds)
                cpu[name].append(time.process_time() - c0)
    ref = statistics.median(seconds["at-least-once"])
    print(table([{"path": k, "rows": args.rows,
                  "rows/s (median)": round(args.rows / statistics.median(v)),
                  "client CPU s": f"{statistics.median(cpu[k]):.2f}",
                  "vs at-least-once": f"{ref / statistics.median(v):.3f}"}
                 for k, v in seconds.items()]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
