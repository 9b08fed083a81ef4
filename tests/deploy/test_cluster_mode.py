"""The source on a real Spark standalone cluster: a master and two workers on loopback, each
worker standing for a host with a sidecar directory of its own.

Two applications are spark-submitted to it at the same time (client deploy mode, so each
driver runs here, with a third sidecar directory of its own): the main example job
(jobs/orders_stream.py, producing orders and streaming them orderly into parquet) and
tests/deploy/cluster_queries.py (an orderly and a concurrent query of another topic). Each
application gets one executor on each worker. The module fixture sets everything up and
runs both once; the tests check what came out: every message exactly once with the body
sent at its position, queue order per queue in orderly mode, and exactly one sidecar per
host, both hosts' sidecars serving the executors' reads while the drivers' sidecar served
none.
"""

from __future__ import annotations

import re
import shutil
import tempfile
import threading
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import pytest

from bench.chaos import Digest, Key, compare_bodies, digest
from bench.common import read_file_sink
from rocketmq_spark.sharding import select_queue
from rocketmq_spark.structs import Message
from rocketmq_spark.workload import orders
from tests.cluster import ClusterHandle
from tests.deploy import sidecars
from tests.deploy.checks import assert_bodies, assert_queue_order
from tests.deploy.standalone import SparkStandalone, spark_submit
from tests.spark_session import stop_sidecar

ROOT = Path(__file__).resolve().parents[2]
QUERIES = Path(__file__).with_name("cluster_queries.py")
HOSTS = ("host-1", "host-2")
JOB_MESSAGES = 240          # produced by the main job itself
JOB_CUSTOMERS = 8
QUERY_MESSAGES_PER_QUEUE = 30


@dataclass
class Deployment:
    root: Path
    dirs: dict[str, Path]                 # host name (and "driver") -> sidecar directory
    job_topic: str
    query_topic: str
    query_sent: dict[tuple[str, int], list[bytes]]   # (broker, queue id) -> bodies in order
    job: Any                              # CompletedProcess of orders_stream.py
    queries: Any                          # CompletedProcess of cluster_queries.py
    spark_root: Path


def _conf(root: Path, namesrv: str, topic: str) -> Path:
    conf = root / "orders.toml"
    conf.write_text(f"""
[rocketmq]
name_server = "{namesrv}"
topic = "{topic}"
consumer_group = "{topic}-job"
[workload]
messages = {JOB_MESSAGES}
customers = {JOB_CUSTOMERS}
[output]
path = "{root / 'job-out'}"
checkpoint = "{root / 'job-checkpoint'}"
""")
    return conf


def _produce(rocketmq: ClusterHandle, topic: str) -> dict[tuple[str, int], list[bytes]]:
    sent: dict[tuple[str, int], list[bytes]] = {}
    for q in rocketmq.admin.publish_queues(topic):
        bodies = [f"{q.broker_name}/{q.queue_id}/{i}".encode() for i in range(QUERY_MESSAGES_PER_QUEUE)]
        r = rocketmq.admin.send_batch([Message(topic, b) for b in bodies], queue=q)
        assert r.status == "SEND_OK" and r.queue_offset == 0, r
        sent[(q.broker_name, q.queue_id)] = bodies
    return sent


@pytest.fixture(scope="module")
def deployment(rocketmq: ClusterHandle) -> Iterator[Deployment]:
    root = Path(tempfile.mkdtemp(prefix="rmq-deploy-"))
    dirs = {name: root / f"sc-{name}" for name in (*HOSTS, "driver")}
    for d in dirs.values():
        d.mkdir(mode=0o700)
    job_topic = rocketmq.create_topic("deployjob", queues=4)
    query_topic = rocketmq.create_topic("deployq", queues=4)
    query_sent = _produce(rocketmq, query_topic)
    spark_root = root / "spark"
    cluster = SparkStandalone(spark_root, {h: {"ROCKETMQ_SPARK_SIDECAR_DIR": str(dirs[h])} for h in HOSTS},
                              cores=2, memory="2g")
    try:
        with cluster:
            driver_env = {"ROCKETMQ_SPARK_SIDECAR_DIR": str(dirs["driver"])}
            # one executor of one core on each worker per application, both at once
            conf = {"spark.cores.max": "2", "spark.executor.cores": "1"}
            results: dict[str, Any] = {}

            def submit(name: str, script: Path, args: list[str]) -> None:
                local = root / f"{name}-local"
                local.mkdir()
                try:
                    results[name] = spark_submit(cluster.master_url, script, args, env=driver_env,
                                                 local_dir=local, conf=conf, timeout=240)
                except BaseException as exc:  # noqa: BLE001 - reported below
                    results[name] = exc

            threads = [
                threading.Thread(target=submit, args=("job", ROOT / "jobs" / "orders_stream.py",
                                                      ["--conf", str(_conf(root, rocketmq.namesrv_addr, job_topic))])),
                threading.Thread(target=submit, args=("queries", QUERIES,
                                                      [rocketmq.namesrv_addr, query_topic, str(root / "queries")])),
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            for name, r in results.items():
                if isinstance(r, BaseException):
                    raise r
                assert r.returncode == 0, f"{name} failed ({r.returncode}):\n{r.stdout[-4000:]}\n{r.stderr[-6000:]}"
            yield Deployment(root, dirs, job_topic, query_topic, query_sent, results["job"],
                             results["queries"], spark_root)
    finally:
        for d in dirs.values():
            stop_sidecar(d)
        shutil.rmtree(root, ignore_errors=True)


# ------------------------------------------------------------------ checks

def _keys(table: Any) -> list[Key]:
    return list(zip(table.column("topic").to_pylist(), table.column("broker").to_pylist(),
                    table.column("queue_id").to_pylist(), table.column("queue_offset").to_pylist()))


def _assert_once(table: Any, expected: dict[tuple[str, int], int], topic: str) -> None:
    """Every offset [0, n) of every queue exactly once, nothing else."""
    keys = _keys(table)
    assert len(keys) == len(set(keys)), "a message was written twice"
    want = {(topic, b, q, o) for (b, q), n in expected.items() for o in range(n)}
    assert set(keys) == want, (f"missing {sorted(want - set(keys))[:10]}, "
                               f"unexpected {sorted(set(keys) - want)[:10]}")


def _observed(table: Any) -> list[tuple[Key, Digest]]:
    return list(zip(_keys(table), map(digest, table.column("body").to_pylist())))


def _job_sent(rocketmq: ClusterHandle, topic: str) -> dict[Key, Digest]:
    """Where orders_stream.py's producer put which body: it sends the same workload in the
    same order (its order sequence starts at 0 on a new topic), each order to
    ``select_queue(customer, send_queues)``, one send after another, so each queue's offsets
    count up from 0 in send order."""
    queues = rocketmq.admin.send_queues(topic)
    next_offset: Counter[tuple[str, int]] = Counter()
    sent: dict[Key, Digest] = {}
    for order in orders(JOB_MESSAGES, customers=JOB_CUSTOMERS):
        message, key = order.to_message(topic)
        q = select_queue(key, queues)
        at = (q.broker_name, q.queue_id)
        sent[(topic, *at, next_offset[at])] = digest(message.body)
        next_offset[at] += 1
    return sent


def test_main_job_reads_every_order_once_in_queue_order(deployment: Deployment, rocketmq: ClusterHandle) -> None:
    out = deployment.job.stdout
    assert f"produced {JOB_MESSAGES} order events" in out
    assert f"this run read {JOB_MESSAGES} rows" in out
    assert re.search(r"total lag: 0$", out, re.M), out[-2000:]
    ends = {(q.broker_name, q.queue_id): rocketmq.admin.max_offset(q)
            for q in rocketmq.admin.subscribe_queues(deployment.job_topic)}
    assert sum(ends.values()) == JOB_MESSAGES
    sink = deployment.root / "job-out"
    table = read_file_sink(sink)
    _assert_once(table, ends, deployment.job_topic)
    # the job wrote each body as a string: its UTF-8 bytes are what was sent
    sent = _job_sent(rocketmq, deployment.job_topic)
    per_queue = dict(Counter((b, q) for _, b, q, _ in sent))
    assert per_queue == {k: n for k, n in ends.items() if n}, \
        f"the job's sends, as reconstructed, do not fill the queues the broker holds: {per_queue} vs {ends}"
    assert_bodies(compare_bodies(sent, _observed(table)))
    assert assert_queue_order(sink) >= 1


def test_orderly_and_concurrent_queries_read_every_message_once(deployment: Deployment) -> None:
    out = deployment.queries.stdout
    total = sum(len(b) for b in deployment.query_sent.values())
    assert f"QUERY orderly rows={total}" in out, out[-2000:]
    assert f"QUERY concurrent rows={total}" in out, out[-2000:]
    expected = {k: len(v) for k, v in deployment.query_sent.items()}
    for mode in ("orderly", "concurrent"):
        table = read_file_sink(deployment.root / "queries" / mode)
        _assert_once(table, expected, deployment.query_topic)
        sent = {(deployment.query_topic, b, q, o): digest(body)
                for (b, q), bodies in deployment.query_sent.items() for o, body in enumerate(bodies)}
        assert_bodies(compare_bodies(sent, _observed(table)), mode)
    assert assert_queue_order(deployment.root / "queries" / "orderly") >= 1


def test_each_host_started_one_sidecar_and_both_served_reads(deployment: Deployment) -> None:
    dirs = deployment.dirs
    for name, d in dirs.items():
        pids = sidecars.started_pids(d)
        assert len(pids) == 1, f"{name}: {len(pids)} sidecars started:\n{sidecars.log_text(d)[-2000:]}"
        assert sidecars.live_pid(d) == pids[0], f"{name}: the sidecar that started is not the one answering"
    assert len({sidecars.started_pids(d)[0] for d in dirs.values()}) == 3
    # each application ran an executor on each worker (standalone spreads executors out)
    for h in HOSTS:
        apps = [p for p in (deployment.spark_root / h / "work").iterdir() if p.name.startswith("app-")]
        assert len(apps) == 2, f"{h} ran executors of {len(apps)} applications, expected 2"
    # the reads happen on the executors' hosts, through their own sidecars
    rows = {h: sum(s.rows for s in sidecars.served(dirs[h])) for h in HOSTS}
    assert all(n > 0 for n in rows.values()), f"a host's sidecar served no rows: {rows}"
    assert sidecars.served(dirs["driver"]) == [], "the drivers' sidecar served reads"
    topics = {s.topic for h in HOSTS for s in sidecars.served(dirs[h])}
    assert topics == {deployment.job_topic, deployment.query_topic}
    query_rows = sum(len(b) for b in deployment.query_sent.values())
    # at least every row of the three queries (more only if a task was retried)
    assert sum(rows.values()) >= JOB_MESSAGES + 2 * query_rows
