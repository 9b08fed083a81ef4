"""The example jobs, run with spark-submit as a user runs them."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq

from tests.cluster import ClusterHandle

ROOT = Path(__file__).resolve().parents[2]
SPARK_SUBMIT = shutil.which("spark-submit", path=os.path.dirname(sys.executable) + os.pathsep
                            + os.environ.get("PATH", ""))


def write_conf(tmp: Path, *, name_server: str, topic: str, group: str, messages: int) -> Path:
    conf = tmp / "job.toml"
    conf.write_text(f"""
[rocketmq]
name_server = "{name_server}"
topic = "{topic}"
consumer_group = "{group}"
queues = 4
[embedded]
data_dir = "{tmp / 'rocketmq'}"
[workload]
messages = {messages}
customers = 8
[output]
path = "{tmp / 'out'}"
checkpoint = "{tmp / 'chk'}"
""")
    return conf


def submit(job: str, *args: str, timeout: float = 300) -> str:
    assert SPARK_SUBMIT, "spark-submit not found next to the Python interpreter or on PATH"
    env = {k: v for k, v in os.environ.items() if k != "ROCKETMQ_NAMESRV"}
    r = subprocess.run([SPARK_SUBMIT, "--properties-file", str(ROOT / "conf" / "spark-defaults.conf"),
                        str(ROOT / "jobs" / job), *args], capture_output=True, text=True,
                       timeout=timeout, cwd=ROOT, env=env)
    assert r.returncode == 0, f"{job} failed:\n{r.stdout[-3000:]}\n{r.stderr[-5000:]}"
    return r.stdout


def lines(out: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith("[rocketmq-spark]")]


def test_main_job_on_its_own_embedded_cluster_continues_from_its_checkpoint(tmp_path: Path) -> None:
    conf = write_conf(tmp_path, name_server="", topic="orders", group="analytics", messages=90)
    out = submit("orders_stream.py", "--conf", str(conf))
    text = "\n".join(lines(out))
    assert "embedded RocketMQ cluster: nameServer=127.0.0.1:" in text
    assert "produced 90 order events" in text
    assert "this run read 90 rows" in text
    assert re.search(r"total lag: 0$", text, re.M)
    assert pq.read_table(tmp_path / "out").num_rows == 90
    offsets = re.search(r"per-queue offsets after this run \(next offset to read\): (.*)", text)
    assert offsets and sum(int(n) for n in re.findall(r'"\d+": (\d+)', offsets.group(1))) == 90

    out = submit("orders_stream.py", "--conf", str(conf), "--messages", "30")
    text = "\n".join(lines(out))
    assert "this run read 30 rows" in text           # only the new ones: the checkpoint held
    assert re.search(r"total lag: 0$", text, re.M)
    table = pq.read_table(tmp_path / "out")
    assert table.num_rows == 120
    keys = set(zip(table.column("queue_id").to_pylist(), table.column("queue_offset").to_pylist()))
    assert len(keys) == 120                           # nothing read twice


def test_batch_range_job(rocketmq: ClusterHandle, tmp_path: Path) -> None:
    topic = rocketmq.create_topic("jobrange", queues=4)
    conf = write_conf(tmp_path, name_server=rocketmq.namesrv_addr, topic=topic,
                      group=rocketmq.unique("g"), messages=120)
    out = submit("batch_range.py", "--conf", str(conf), "--from-offset", "2", "--to-offset", "5")
    queues = len(rocketmq.admin.subscribe_queues(topic))
    maxes = [rocketmq.admin.max_offset(q) for q in rocketmq.admin.subscribe_queues(topic)]
    expected = sum(max(0, min(5, m) - min(2, m)) for m in maxes)
    assert queues == 4 * len(rocketmq.admin.cluster_brokers())
    assert f"rows read: {expected}" in out


def test_concurrent_job_sends_failures_back_and_gets_them_again(rocketmq: ClusterHandle, tmp_path: Path) -> None:
    topic = rocketmq.create_topic("jobretry", queues=2)
    group = rocketmq.unique("g")
    conf = write_conf(tmp_path, name_server=rocketmq.namesrv_addr, topic=topic, group=group, messages=150)
    out = submit("concurrent_retry.py", "--conf", str(conf))
    m = re.search(r"sent back (\d+) failed rows; (\d+) came back", out)
    assert m and int(m.group(1)) > 0 and m.group(1) == m.group(2)
    m = re.search(r"\((\d+) rows; (\d+) events in the topic\)", out)
    assert m and m.group(1) == m.group(2) == "150"
    assert re.search(r"total lag: 0$", out, re.M)
