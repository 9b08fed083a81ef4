"""TLS end to end: the embedded cluster serving TLS (Apache's tlsMode enforcing, and a
cluster that requires client certificates), our client, the source (batch and stream), the
sink, the CLI (client commands and ``broker --tls-mode``) and the auto-started sidecar all
connecting over TLS; an untrusted server fails naming the option to set; the key's password
is in no plan, progress event or sidecar log."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest

from rocketmq_spark.client import ClientConfig, MQClient
from rocketmq_spark.embedded import EmbeddedCluster
from rocketmq_spark.errors import TransportError
from rocketmq_spark.structs import Message
from rocketmq_spark.tls import ClientAuth, ServerTls, TlsSettings
from tests.tls_certs import Certs, make_certs

pytestmark = pytest.mark.embedded_only("brokers serving TLS with the test's own certificates")

TOPIC = "tls_orders"
KEY_PASSWORD = "tls-key-pass-9911-do-not-leak"


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("tls-certs"))


@pytest.fixture(scope="module")
def encrypted_client_key(certs: Certs, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """The client certificate, and its key encrypted with KEY_PASSWORD."""
    from cryptography.hazmat.primitives import serialization

    pem = Path(certs.client).read_bytes()
    key = serialization.load_pem_private_key(pem, password=None)
    d = tmp_path_factory.mktemp("tls-client")
    (d / "client.key").write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(KEY_PASSWORD.encode())))
    (d / "client.crt").write_bytes(b"".join(
        block + b"-----END CERTIFICATE-----\n"
        for block in pem.split(b"-----END CERTIFICATE-----\n") if b"BEGIN CERTIFICATE" in block))
    return str(d / "client.crt"), str(d / "client.key")


def _fill(c: EmbeddedCluster, ca: str, **tls: str) -> None:
    client = MQClient(ClientConfig.parse(c.namesrv_addr, tls=TlsSettings(ca_file=ca, **tls)))
    try:
        for i in range(10):
            client.send(Message(TOPIC, f"m{i}".encode(), tags="T"))
    finally:
        client.close()


@pytest.fixture(scope="module")
def tls_cluster(tmp_path_factory: pytest.TempPathFactory, certs: Certs) -> Iterator[EmbeddedCluster]:
    with EmbeddedCluster(tmp_path_factory.mktemp("tls") / "data", namesrv_port=0, topics={TOPIC: 2},
                         tls=ServerTls(certs.server, certs.server)) as c:
        _fill(c, certs.ca)
        yield c


@pytest.fixture(scope="module")
def mtls_cluster(tmp_path_factory: pytest.TempPathFactory, certs: Certs) -> Iterator[EmbeddedCluster]:
    tls = ServerTls(certs.server, certs.server, client_auth=ClientAuth.REQUIRE, client_ca_file=certs.ca)
    with EmbeddedCluster(tmp_path_factory.mktemp("mtls") / "data", namesrv_port=0, topics={TOPIC: 2},
                         tls=tls) as c:
        _fill(c, certs.ca, cert_file=certs.client, key_file=certs.client)
        yield c


def options(c: EmbeddedCluster, certs: Certs, **more: str) -> dict[str, str]:
    return {"nameServer": c.namesrv_addr, "topic": TOPIC, "consumerGroup": "tls_group",
            "tls": "true", "tlsTrustCertPath": certs.ca, **more}


def test_plain_clients_are_refused_and_tls_clients_served(tls_cluster: EmbeddedCluster, certs: Certs) -> None:
    plain = MQClient(ClientConfig.parse(tls_cluster.namesrv_addr, request_timeout=3))
    try:
        with pytest.raises(TransportError):
            plain.route(TOPIC)
    finally:
        plain.close()
    client = MQClient(ClientConfig.parse(tls_cluster.namesrv_addr, tls=TlsSettings(ca_file=certs.ca)))
    try:
        queues = client.subscribe_queues(TOPIC)
        assert sum(client.max_offset(q) for q in queues) >= 10
        got = client.pull(queues[0], 0, group="tls_check", max_nums=32)
        assert all(m.body.startswith(b"m") for m in got.messages)
    finally:
        client.close()


def test_source_batch_and_stream_over_tls(spark, tls_cluster: EmbeddedCluster, certs: Certs) -> None:
    df = spark.read.format("rocketmq").options(**options(tls_cluster, certs)).load()
    bodies = sorted(r.body.decode() for r in df.select("body").collect())
    assert [b for b in bodies if b.startswith("m")] == [f"m{i}" for i in range(10)]

    q = (spark.readStream.format("rocketmq").options(**options(tls_cluster, certs))
         .option("startingOffsets", "earliest").load()
         .writeStream.format("memory").queryName("tls_stream").trigger(availableNow=True).start())
    try:
        q.awaitTermination(120)
        assert q.exception() is None
        assert spark.sql("SELECT count(*) AS n FROM tls_stream WHERE body LIKE 'm%'").collect()[0].n == 10
    finally:
        q.stop()


def test_sink_over_tls(spark, tls_cluster: EmbeddedCluster, certs: Certs) -> None:
    topic = "tls_sink"
    rows = spark.createDataFrame([(f"w{i}", f"k{i % 3}") for i in range(12)], "body string, sharding_key string")
    (rows.write.format("rocketmq").mode("append")
     .options(nameServer=tls_cluster.namesrv_addr, topic=topic, tls="true", tlsTrustCertPath=certs.ca).save())
    client = MQClient(ClientConfig.parse(tls_cluster.namesrv_addr, tls=TlsSettings(ca_file=certs.ca)))
    try:
        assert sum(client.max_offset(q) for q in client.subscribe_queues(topic)) == 12
    finally:
        client.close()


def test_an_untrusted_cluster_fails_naming_the_option(spark, tls_cluster: EmbeddedCluster, certs: Certs) -> None:
    df = spark.read.format("rocketmq").options(**options(tls_cluster, certs, tlsTrustCertPath=certs.other_ca)).load()
    with pytest.raises(Exception, match="(?s)not trusted.*tlsTrustCertPath"):
        df.count()
    with pytest.raises(Exception, match="option 'tlsVerify' needs option 'tls' set to true"):
        spark.read.format("rocketmq").options(nameServer=tls_cluster.namesrv_addr, topic=TOPIC,
                                              tlsVerify="ca").load()


def test_client_certificate_with_an_encrypted_key(spark, mtls_cluster: EmbeddedCluster, certs: Certs,
                                                  encrypted_client_key: tuple[str, str], capsys,
                                                  sidecar_dir: Path) -> None:
    crt, key = encrypted_client_key
    # without a client certificate the cluster refuses the handshake
    no_cert = spark.read.format("rocketmq").options(**options(mtls_cluster, certs)).load()
    with pytest.raises(Exception):
        no_cert.count()
    opts = options(mtls_cluster, certs, tlsCertPath=crt, tlsKeyPath=key, tlsKeyPassword=KEY_PASSWORD)
    df = spark.read.format("rocketmq").options(**opts).load()
    assert df.filter("body LIKE 'm%'").count() == 10
    df.explain(True)
    assert KEY_PASSWORD not in capsys.readouterr().out
    assert KEY_PASSWORD not in df._jdf.queryExecution().toString()
    q = (spark.readStream.format("rocketmq").options(**opts).option("startingOffsets", "earliest").load()
         .writeStream.format("memory").queryName("mtls_stream").trigger(availableNow=True).start())
    try:
        q.awaitTermination(120)
        assert q.exception() is None
        assert KEY_PASSWORD not in json.dumps(list(q.recentProgress), default=str)
        assert KEY_PASSWORD not in q._jsq.toString()
    finally:
        q.stop()
    for log in Path(sidecar_dir).rglob("*.log"):
        assert KEY_PASSWORD not in log.read_text(errors="replace")


def _cli(*args: str, env: dict[str, str] | None = None, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rocketmq_spark.cli", *args], input=stdin,
                          capture_output=True, text=True, timeout=60,
                          env={**os.environ, "ROCKETMQ_NAMESRV": "", **(env or {})})


def test_cli_over_tls(tls_cluster: EmbeddedCluster, certs: Certs) -> None:
    ns = tls_cluster.namesrv_addr
    r = _cli("produce", "-t", "tls_cli", "-n", ns, "--tls", "--tls-ca", certs.ca, stdin="a\nb\n")
    assert r.returncode == 0, r.stderr
    r = _cli("tail", "-t", "tls_cli", "--from-beginning", "--count", "2", "--json", "--duration", "20",
             "-n", ns, env={"ROCKETMQ_TLS": "true", "ROCKETMQ_TLS_CA": certs.ca})
    assert r.returncode == 0, r.stderr
    assert sorted(json.loads(line)["body"] for line in r.stdout.splitlines()) == ["a", "b"]
    r = _cli("lag", "-n", ns, "-g", "nobody", "-t", "tls_cli", "--tls", "--tls-ca", certs.other_ca)
    assert r.returncode == 1 and "not trusted" in r.stderr and "--tls-ca" in r.stderr


def test_broker_command_serves_tls(tmp_path: Path, certs: Certs) -> None:
    from tests.embedded.test_durability import start_broker

    proc, ns = start_broker(tmp_path / "d", tmp_path / "log", "--topic", "clitls:2", "--tls-mode", "enforcing",
                            "--tls-cert", certs.server, "--tls-key", certs.server)
    try:
        client = MQClient(ClientConfig.parse(ns, tls=TlsSettings(ca_file=certs.ca)))
        try:
            assert len(client.subscribe_queues("clitls")) == 2
        finally:
            client.close()
    finally:
        proc.terminate()
        proc.wait(30)
    r = subprocess.run([sys.executable, "-m", "rocketmq_spark.cli", "broker", "--tls-mode", "permissive",
                        "--data-dir", str(tmp_path / "x")], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "--tls-mode permissive needs --tls-cert and --tls-key" in r.stderr
