"""The ``rocketmq-spark`` command as a user runs it: subprocesses against the test cluster."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from rocketmq_spark.structs import PullStatus
from tests.cluster import ClusterHandle


def cli(*args: str, input: str | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rocketmq_spark.cli", *args], input=input,
                          capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "ROCKETMQ_NAMESRV": ""})


def read_all(cluster: ClusterHandle, topic: str) -> list:
    """Every message of ``topic``; none while the topic has no route yet."""
    from rocketmq_spark.errors import BrokerError

    out = []
    try:
        queues = cluster.admin.subscribe_queues(topic, refresh=True)
    except BrokerError as exc:
        if exc.code != 17:                   # TOPIC_NOT_EXIST: made by a first send, not routed yet
            raise
        return []
    for mq in queues:
        offset = 0
        while True:
            r = cluster.admin.pull(mq, offset, group="cli_check", max_nums=32)
            if r.status is not PullStatus.FOUND:
                break
            out.extend(r.messages)
            offset = r.next_begin_offset
    return out


def wait_count(cluster: ClusterHandle, topic: str, n: int, timeout: float = 20) -> list:
    deadline = time.monotonic() + timeout
    while True:
        msgs = read_all(cluster, topic)
        if len(msgs) >= n or time.monotonic() > deadline:
            return msgs
        time.sleep(0.05)


@pytest.mark.parametrize("command", ["broker", "sidecar", "produce", "tail", "lag", "offsets", "topics"])
def test_every_command_has_help(command: str) -> None:
    r = cli(command, "--help")
    assert r.returncode == 0, r.stderr
    assert "usage: rocketmq-spark" in r.stdout


def test_top_level_help_and_unknown_command() -> None:
    r = cli("--help")
    assert r.returncode == 0 and "produce" in r.stdout and "lag" in r.stdout
    r = cli("bogus")
    assert r.returncode == 2 and "unknown command 'bogus'" in r.stderr


def test_topics_create_and_list(rocketmq: ClusterHandle) -> None:
    name = rocketmq.unique("clitopic")
    r = cli("topics", "create", name, "--queues", "3", "-n", rocketmq.namesrv_addr)
    assert r.returncode == 0, r.stderr
    rocketmq.wait_for_route(name, 3)
    r = cli("topics", "list", "--queues", "-n", rocketmq.namesrv_addr)
    assert r.returncode == 0, r.stderr
    brokers = len(rocketmq.admin.cluster_brokers())
    assert f"{name}\t{3 * brokers}" in r.stdout.splitlines()
    assert "TBW102" not in r.stdout
    assert "TBW102" in cli("topics", "list", "--all", "-n", rocketmq.namesrv_addr).stdout


@pytest.mark.parametrize("exists", [True, False], ids=["topic", "new-topic"])
def test_produce_from_stdin_with_tags_and_sharding_key(rocketmq: ClusterHandle, exists: bool) -> None:
    # a topic that does not exist yet is created by the broker at the first send
    topic = rocketmq.create_topic("cliprod", queues=4) if exists else rocketmq.unique("clinew")
    r = cli("produce", "-t", topic, "--tags", "TagX", "--sharding-key", "k1", "-n", rocketmq.namesrv_addr,
            input="one\ntwo\n\nthree\n")
    assert r.returncode == 0, r.stderr
    assert f"sent 3 messages to {topic} (1 empty line skipped)" in r.stdout
    msgs = wait_count(rocketmq, topic, 3)
    assert sorted(m.payload() for m in msgs) == [b"one", b"three", b"two"]
    assert {m.tags for m in msgs} == {"TagX"}
    assert len({(m.broker_name if hasattr(m, "broker_name") else m.store_host, m.queue_id) for m in msgs}) == 1
    assert [m.payload() for m in sorted(msgs, key=lambda m: m.queue_offset)] == [b"one", b"two", b"three"]


def test_produce_generated_workload_is_orderly_per_customer(rocketmq: ClusterHandle) -> None:
    topic = rocketmq.create_topic("cligen", queues=4)
    r = cli("produce", "-t", topic, "--generate", "60", "--rate", "2000", "-n", rocketmq.namesrv_addr)
    assert r.returncode == 0, r.stderr
    msgs = wait_count(rocketmq, topic, 60)
    assert len(msgs) == 60
    by_customer: dict[str, set] = {}
    seqs: dict[str, list[int]] = {}
    for m in sorted(msgs, key=lambda m: (m.store_host.port, m.queue_id, m.queue_offset)):
        order = json.loads(m.payload())
        by_customer.setdefault(order["customer"], set()).add((m.store_host.port, m.queue_id))
        seqs.setdefault(order["customer"], []).append(order["seq"])
        assert m.tags == order["status"] and m.keys == order["order_id"]
    assert all(len(qs) == 1 for qs in by_customer.values())      # one queue per customer
    assert all(s == sorted(s) for s in seqs.values())              # in order within it


def test_tail_prints_messages(rocketmq: ClusterHandle) -> None:
    topic = rocketmq.create_topic("clitail", queues=2)
    cli("produce", "-t", topic, "-n", rocketmq.namesrv_addr, input="hello\nworld\n")
    wait_count(rocketmq, topic, 2)
    r = cli("tail", "-t", topic, "--from-beginning", "--count", "2", "--json", "--duration", "20",
            "-n", rocketmq.namesrv_addr)
    assert r.returncode == 0, r.stderr
    bodies = sorted(json.loads(line)["body"] for line in r.stdout.splitlines())
    assert bodies == ["hello", "world"]


def test_lag_and_offsets_reset(rocketmq: ClusterHandle) -> None:
    topic = rocketmq.create_topic("clilag", queues=2)
    cli("produce", "-t", topic, "-n", rocketmq.namesrv_addr, input="a\nb\nc\nd\n")
    wait_count(rocketmq, topic, 4)
    group = rocketmq.unique("cligroup")
    r = cli("offsets", "-g", group, "-t", topic, "--to", "latest", "-n", rocketmq.namesrv_addr)
    assert r.returncode == 0, r.stderr
    r = cli("lag", "-g", group, "-t", topic, "--json", "-n", rocketmq.namesrv_addr)
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    assert report["total_lag"] == 0
    assert sum(q["broker_offset"] for q in report["queues"]) == 4
    r = cli("offsets", "-g", group, "-t", topic, "--to", "earliest", "-n", rocketmq.namesrv_addr)
    assert r.returncode == 0, r.stderr
    report = json.loads(cli("lag", "-g", group, "-t", topic, "--json", "-n", rocketmq.namesrv_addr).stdout)
    assert report["total_lag"] == 4
    table = cli("lag", "-g", group, "-t", topic, "-n", rocketmq.namesrv_addr).stdout
    assert "#Broker Offset" in table and "Diff Total: 4" in table


def test_errors_name_the_bad_argument(rocketmq: ClusterHandle) -> None:
    r = cli("offsets", "-g", "g", "-t", "t", "--to", "yesterday", "-n", rocketmq.namesrv_addr)
    assert r.returncode == 2 and "--to" in r.stderr and "yesterday" in r.stderr
    r = cli("produce", "-t", "x", "--rate", "-5", "-n", rocketmq.namesrv_addr, input="")
    assert r.returncode != 0 and "--rate" in r.stderr
    r = cli("lag", "-g", "g", "-n", "127.0.0.1:1", "--timeout", "1")
    assert r.returncode == 1 and "127.0.0.1:1" in r.stderr


@pytest.mark.parametrize("args, code, message", [
    (("topics", "list", "-n", "garbage"), 1, "--name-server: address 'garbage' is not host:port"),
    (("produce", "-t", "x", "-f", "/nonexistent/in.txt"), 1, "--file /nonexistent/in.txt: No such file"),
    (("topics", "create", "t", "--broker", "broker-z"), 1, "--broker: unknown broker(s) ['broker-z']"),
    (("tail", "-t", "x", "--duration", "0"), 2, "--duration: expected a number >= 0.001, got '0'"),
    (("tail", "-t", "x", "--count", "-1"), 2, "--count/-c: expected an integer >= 1, got '-1'"),
])
def test_bad_input_is_one_line_not_a_traceback(rocketmq: ClusterHandle, args, code, message) -> None:  # type: ignore[no-untyped-def]
    r = cli(*args, *(() if "-n" in args else ("-n", rocketmq.namesrv_addr)), input="")
    assert (r.returncode, "Traceback" in r.stderr) == (code, False), r.stderr
    assert message in r.stderr


def test_a_reader_that_goes_away_ends_the_command_quietly(rocketmq: ClusterHandle) -> None:
    """``rocketmq-spark tail ... | head -1``: the rest of the output has nowhere to go."""
    topic = rocketmq.create_topic("clipipe", queues=1)
    r = cli("produce", "-t", topic, "--generate", "3000", "-n", rocketmq.namesrv_addr, timeout=120)
    assert r.returncode == 0, r.stderr
    p = subprocess.Popen([sys.executable, "-m", "rocketmq_spark.cli", "tail", "-t", topic, "--from-beginning",
                          "--count", "3000", "-n", rocketmq.namesrv_addr],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert p.stdout is not None and p.stderr is not None
    assert topic in p.stdout.readline()
    p.stdout.close()                      # 3,000 lines do not fit in the pipe: a write fails
    assert p.wait(timeout=60) == 141
    assert p.stderr.read() == ""


def test_produce_a_file_in_pipelined_batches_every_line_acknowledged_in_order(
        rocketmq: ClusterHandle, tmp_path) -> None:  # type: ignore[no-untyped-def]
    topic = rocketmq.create_topic("clibulk", queues=4)
    lines = [f"line-{i:05d}" for i in range(20_000)]
    (tmp_path / "in.txt").write_text("\n".join(lines) + "\n")
    r = cli("produce", "-t", topic, "-f", str(tmp_path / "in.txt"), "--sharding-key", "one",
            "-n", rocketmq.namesrv_addr, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "sent 20000 messages" in r.stdout
    msgs = wait_count(rocketmq, topic, len(lines))
    queues = {(m.store_host.port, m.queue_id) for m in msgs}
    assert len(queues) == 1                                   # one key: one queue, in file order
    assert [m.payload().decode() for m in sorted(msgs, key=lambda m: m.queue_offset)] == lines


def test_produce_reports_a_refused_line_and_sends_nothing_after_it(rocketmq: ClusterHandle, tmp_path) -> None:  # type: ignore[no-untyped-def]
    import base64

    topic = rocketmq.create_topic("clibad", queues=1)
    huge = base64.b64encode(os.urandom(6 * 1024 * 1024)).decode()   # > 4 MiB even compressed
    (tmp_path / "in.txt").write_text("\n".join(["a", "", "b", huge, "c", "d"]) + "\n")
    r = cli("produce", "-t", topic, "-f", str(tmp_path / "in.txt"), "--sharding-key", "k",
            "--batch-size", "1", "-n", rocketmq.namesrv_addr, timeout=120)
    assert r.returncode == 1
    # the file's line number, the empty line counted
    assert "line 4 not sent to " + topic in r.stderr and "MESSAGE_ILLEGAL (13)" in r.stderr, r.stderr
    assert "2 lines were acknowledged" in r.stderr
    assert sorted(m.payload() for m in wait_count(rocketmq, topic, 2)) == [b"a", b"b"]
