"""What the example jobs share: configuration, the embedded cluster, printing progress."""

from __future__ import annotations

import argparse
import os
import sys
import tomllib
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from rocketmq_spark.arguments import at_least

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CONF = ROOT / "conf" / "embedded.toml"


@dataclass(frozen=True)
class JobConfig:
    name_server: str
    topic: str
    consumer_group: str
    queues: int
    data_dir: str
    brokers: int
    messages: int
    customers: int
    output: str
    checkpoint: str
    access_key: str | None
    secret_key: str | None
    sidecar: str
    tls: dict[str, str]              # the source's TLS options ([rocketmq.tls]), empty: plain TCP

    def source_options(self) -> dict[str, str]:
        opts = {"nameServer": self.name_server, "topic": self.topic,
                "consumerGroup": self.consumer_group, "sidecar": self.sidecar, **self.tls}
        if self.access_key:
            opts["accessKey"] = self.access_key
            opts["secretKey"] = self.secret_key or ""
        return opts


# [rocketmq.tls] keys -> the source's and sink's TLS options
TLS_KEYS = {"enable": "tls", "trust_cert_path": "tlsTrustCertPath", "verify": "tlsVerify",
            "cert_path": "tlsCertPath", "key_path": "tlsKeyPath", "key_password": "tlsKeyPassword"}


def _tls_options(table: dict[str, Any]) -> dict[str, str]:
    unknown = sorted(set(table) - set(TLS_KEYS))
    if unknown:
        raise SystemExit(f"--conf: unknown key [rocketmq.tls] {unknown[0]}; known: {', '.join(TLS_KEYS)}")
    opts = {TLS_KEYS[k]: str(v).lower() if isinstance(v, bool) else str(v) for k, v in table.items()}
    if "ROCKETMQ_TLS_KEY_PASSWORD" in os.environ and "tlsKeyPath" in opts:
        opts.setdefault("tlsKeyPassword", os.environ["ROCKETMQ_TLS_KEY_PASSWORD"])
    return opts if opts.get("tls") == "true" else {}


def parse_args(description: str, argv: list[str] | None = None,
               extra: Any = None) -> tuple[argparse.Namespace, JobConfig]:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--conf", default=str(DEFAULT_CONF), help=f"TOML configuration (default {DEFAULT_CONF})")
    p.add_argument("--master", help="Spark master, e.g. spark://host:7077, yarn, k8s://... "
                                    "(default: spark-submit's or conf/spark-defaults.conf's)")
    p.add_argument("--messages", type=at_least(0),
                   help="override [workload].messages (order events sent before the job reads; 0: none)")
    if extra:
        extra(p)
    args = p.parse_args(argv)
    try:
        raw = tomllib.loads(Path(args.conf).read_text())
    except FileNotFoundError:
        p.error(f"--conf: no such file {args.conf}")
    except tomllib.TOMLDecodeError as exc:
        p.error(f"--conf: {args.conf} is not valid TOML: {exc}")
    mq, emb, wl, out = (raw.get(k, {}) for k in ("rocketmq", "embedded", "workload", "output"))
    cfg = JobConfig(
        name_server=os.environ.get("ROCKETMQ_NAMESRV", mq.get("name_server", "")),
        topic=mq.get("topic", "orders"), consumer_group=mq.get("consumer_group", "orders-analytics"),
        queues=int(mq.get("queues", 4)), data_dir=emb.get("data_dir", "work/rocketmq"),
        brokers=int(emb.get("brokers", 1)),
        messages=args.messages if args.messages is not None else int(wl.get("messages", 0)),
        customers=int(wl.get("customers", 16)), output=out.get("path", "work/output/orders"),
        checkpoint=out.get("checkpoint", "work/checkpoints/orders"),
        access_key=mq.get("access_key") or os.environ.get("ROCKETMQ_ACCESS_KEY"),
        secret_key=mq.get("secret_key") or os.environ.get("ROCKETMQ_SECRET_KEY"),
        sidecar=mq.get("sidecar", "auto"), tls=_tls_options(mq.get("tls", {})))
    return args, cfg


@contextmanager
def cluster(cfg: JobConfig) -> Iterator[JobConfig]:
    """The configured cluster, or an embedded one started for the job's lifetime."""
    if cfg.name_server:
        yield cfg
        return
    from rocketmq_spark.embedded import EmbeddedCluster

    with EmbeddedCluster(cfg.data_dir, brokers=cfg.brokers, namesrv_port=0,
                         topics={cfg.topic: cfg.queues}) as c:
        say(f"embedded RocketMQ cluster: nameServer={c.namesrv_addr} data={os.path.abspath(cfg.data_dir)}")
        yield JobConfig(**{**cfg.__dict__, "name_server": c.namesrv_addr})


def spark_session(app: str, master: str | None):  # type: ignore[no-untyped-def]
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app)
    if master:
        builder = builder.master(master)
    return builder.getOrCreate()


def say(text: str) -> None:
    print(f"[rocketmq-spark] {text}", flush=True)


def client(cfg: JobConfig):  # type: ignore[no-untyped-def]
    from rocketmq_spark.client import ClientConfig, MQClient

    from rocketmq_spark.spark.options import OPTIONS, tls_settings

    tls = tls_settings({k.lower(): OPTIONS[k.lower()].parse(k, v) for k, v in cfg.tls.items()})
    return MQClient(ClientConfig.parse(cfg.name_server, access_key=cfg.access_key,
                                       secret_key=cfg.secret_key, tls=tls))


def print_lag(cfg: JobConfig, group: str | None = None) -> int:
    """Print the group's per-queue offsets and lag on the broker; return the total lag."""
    c = client(cfg)
    try:
        stats = c.consume_stats(group or cfg.consumer_group, cfg.topic)
    finally:
        c.close()
    total = 0
    say(f"group {group or cfg.consumer_group} on the broker (topic {cfg.topic}):")
    print(f"    {'broker':<10} {'queue':>5} {'broker offset':>14} {'group offset':>13} {'lag':>6}")
    for mq, w in sorted(stats.offset_table.items()):
        lag = w.broker_offset - w.consumer_offset
        total += lag
        print(f"    {mq.broker_name:<10} {mq.queue_id:>5} {w.broker_offset:>14} {w.consumer_offset:>13} {lag:>6}")
    say(f"total lag: {total}")
    return total


sys.path.insert(0, str(Path(__file__).resolve().parent))
