"""ACL end to end: source, sink, CLI and sidecar sign with accessKey/secretKey; a bad key fails
at once naming the options and the broker's code and remark; the secret never leaks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest

from rocketmq_spark.client import ClientConfig, MQClient
from rocketmq_spark.embedded import EmbeddedCluster
from rocketmq_spark.errors import BrokerError
from rocketmq_spark.structs import Message

# An ACL cluster of the test's own (embedded), or the one at $ROCKETMQ_ACL_NAMESRV with the
# non-admin account in $ROCKETMQ_ACL_ACCESS_KEY / $ROCKETMQ_ACL_SECRET_KEY (a real Apache
# cluster: scripts/apache-cluster start VERSION --acl, account rocketmq2).
EXTERNAL = os.environ.get("ROCKETMQ_ACL_NAMESRV")
ACCESS = os.environ.get("ROCKETMQ_ACL_ACCESS_KEY", "rocketmq2") if EXTERNAL else "rocketmq2"
SECRET = os.environ.get("ROCKETMQ_ACL_SECRET_KEY", "12345678") if EXTERNAL else "s3cr3t-do-not-leak-7731"
WRONG = "wrong-secret-0042"
TOPIC = f"acl_orders_{uuid.uuid4().hex[:6]}" if EXTERNAL else "acl_orders"
PLAIN_ACL = f"""
globalWhiteRemoteAddresses: []
accounts:
  - accessKey: {ACCESS}
    secretKey: {SECRET}
    whiteRemoteAddress:
    admin: false
    defaultTopicPerm: PUB|SUB
    defaultGroupPerm: SUB
"""


# (code, remark) of each refusal as RocketMQ 4.x (plain_acl.yml: SYSTEM_ERROR, an
# AclException) and 5.x (ACL 2.0: NO_PERMISSION) answer it
UNSIGNED = ((1, "No accessKey is configured"), (16, "username cannot be null"))
WRONG_SECRET = ((1, "Check signature failed"), (16, "check signature failed"))


def refused(text: str, dialects: tuple[tuple[int, str], ...]) -> bool:
    """``text`` names one dialect's code ("SYSTEM_ERROR (1)", or the sink's "(code 1)") and remark."""
    return any((f"({code})" in text or f"(code {code})" in text) and remark in text for code, remark in dialects)


@dataclass(frozen=True)
class AclCluster:
    namesrv_addr: str


def _fill(namesrv: str) -> None:
    client = MQClient(ClientConfig.parse(namesrv, access_key=ACCESS, secret_key=SECRET))
    try:
        for i in range(10):
            client.send(Message(TOPIC, f"m{i}".encode(), tags="T"))
    finally:
        client.close()


@pytest.fixture(scope="module")
def acl_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AclCluster]:
    if EXTERNAL:       # the topic is created by the first send, as the account may not create it
        _fill(EXTERNAL)
        yield AclCluster(EXTERNAL)
        return
    d = tmp_path_factory.mktemp("acl")
    (d / "plain_acl.yml").write_text(PLAIN_ACL)
    with EmbeddedCluster(d / "data", namesrv_port=0, topics={TOPIC: 2},
                         acl_file=str(d / "plain_acl.yml")) as c:
        _fill(c.namesrv_addr)
        yield AclCluster(c.namesrv_addr)


def options(c: AclCluster, secret: str = SECRET) -> dict[str, str]:
    return {"nameServer": c.namesrv_addr, "topic": TOPIC, "consumerGroup": "acl_group",
            "accessKey": ACCESS, "secretKey": secret}


def test_unsigned_client_is_refused_with_the_broker_code(acl_cluster: AclCluster) -> None:
    client = MQClient(ClientConfig.parse(acl_cluster.namesrv_addr))
    try:
        with pytest.raises(BrokerError) as info:
            client.send(Message(TOPIC, b"x"))
        assert refused(str(info.value), UNSIGNED), info.value
    finally:
        client.close()


def test_source_batch_and_stream_read_with_credentials(spark, acl_cluster: AclCluster, capsys) -> None:
    df = spark.read.format("rocketmq").options(**options(acl_cluster)).load()
    assert sorted(r.body.decode() for r in df.select("body").collect()) == [f"m{i}" for i in range(10)]
    df.explain(True)
    plan = capsys.readouterr().out
    assert "Physical Plan" in plan
    assert SECRET not in plan and SECRET not in df._jdf.queryExecution().toString()

    q = (spark.readStream.format("rocketmq").options(**options(acl_cluster))
         .option("startingOffsets", "earliest").load()
         .writeStream.format("memory").queryName("acl_stream").trigger(availableNow=True).start())
    try:
        q.awaitTermination(120)
        assert spark.sql("SELECT count(*) AS n FROM acl_stream").collect()[0].n == 10
        events = json.dumps([p for p in q.recentProgress], default=str)
        assert SECRET not in events
        q.explain(True)
        explained = capsys.readouterr().out
        assert explained.strip()
        assert SECRET not in explained and SECRET not in q._jsq.toString()
    finally:
        q.stop()


def test_wrong_secret_fails_the_query_naming_the_options(spark, acl_cluster: AclCluster) -> None:
    df = spark.read.format("rocketmq").options(**options(acl_cluster, WRONG)).load()
    with pytest.raises(Exception) as info:
        df.count()
    text = str(info.value)
    assert "accessKey" in text and "secretKey" in text
    assert refused(text, WRONG_SECRET), text
    assert WRONG not in text and SECRET not in text


def test_sink_writes_with_credentials_and_fails_without(spark, acl_cluster: AclCluster) -> None:
    rows = spark.createDataFrame([(f"w{i}",) for i in range(5)], "body string")
    (rows.write.format("rocketmq").mode("append")
     .options(nameServer=acl_cluster.namesrv_addr, topic=TOPIC, accessKey=ACCESS, secretKey=SECRET).save())
    client = MQClient(ClientConfig.parse(acl_cluster.namesrv_addr, access_key=ACCESS, secret_key=SECRET))
    try:
        total = sum(client.max_offset(q) for q in client.subscribe_queues(TOPIC))
        assert total >= 15
    finally:
        client.close()
    with pytest.raises(Exception) as info:
        (rows.write.format("rocketmq").mode("append")
         .options(nameServer=acl_cluster.namesrv_addr, topic=TOPIC, accessKey=ACCESS, secretKey=WRONG).save())
    text = str(info.value)
    assert refused(text, WRONG_SECRET) and WRONG not in text, text


def test_cli_signs_with_credentials(acl_cluster: AclCluster) -> None:
    env = {**os.environ, "ROCKETMQ_ACCESS_KEY": ACCESS, "ROCKETMQ_SECRET_KEY": SECRET}
    r = subprocess.run([sys.executable, "-m", "rocketmq_spark.cli", "produce", "-t", TOPIC, "-n",
                        acl_cluster.namesrv_addr], input="cli\n", capture_output=True, text=True,
                       env=env, timeout=60)
    assert r.returncode == 0, r.stderr
    env["ROCKETMQ_SECRET_KEY"] = WRONG
    r = subprocess.run([sys.executable, "-m", "rocketmq_spark.cli", "produce", "-t", TOPIC, "-n",
                        acl_cluster.namesrv_addr], input="cli\n", capture_output=True, text=True,
                       env=env, timeout=60)
    assert r.returncode == 1 and refused(r.stderr, WRONG_SECRET) and WRONG not in r.stderr, r.stderr


def test_secret_is_in_no_sidecar_log(sidecar_dir: Path, acl_cluster: AclCluster, spark) -> None:
    spark.read.format("rocketmq").options(**options(acl_cluster)).load().count()
    logs = list(Path(sidecar_dir).rglob("*.log"))
    assert logs, f"no sidecar log under {sidecar_dir}"
    for log in logs:
        text = log.read_text(errors="replace")
        assert SECRET not in text and WRONG not in text
