"""A real Apache RocketMQ cluster on demand, from Apache's own artifacts on Maven Central.

``python -m tests.apache.cluster start VERSION --dir DIR [--acl]`` (what
``scripts/apache-cluster`` runs) resolves the NameServer's and the broker's jars of that
release with Maven (tests/apache/maven.py caches the classpath), starts with Java 17, in the
background, a NameServer and three brokers of cluster ``DefaultCluster``:

========== ========= ============================================================
node       broker id what it is
========== ========= ============================================================
namesrv              the NameServer
broker-a-0 0         ``broker-a`` master (ASYNC_MASTER, ``slaveReadEnable=true``)
broker-a-1 1         ``broker-a`` slave (SLAVE), replicating broker-a-0
broker-b-0 0         ``broker-b`` master
========== ========= ============================================================

waits until the NameServer routes every broker, prints ``nameServer=HOST:PORT`` and
returns. Everything lives under DIR: ``cluster.json`` (version, addresses, every node's
command line and pid), and a folder per node (its configuration, store, ``stdout.log``, and
the broker's own logs under ``logs/``). Ports are free ones of 127.0.0.1: a broker takes
its listen port, the port two below (its "fast" port) and the port above (HA).
``stop --dir DIR`` stops what ``start`` started (TERM, then KILL after a bound); ``kill
NODE`` and ``restart NODE`` act on one node (restarted on the same store), for failover
tests; ``status`` prints what runs. ``--broker-config KEY=VALUE`` and ``--namesrv-config
KEY=VALUE`` (repeatable) add settings to every broker.properties and to namesrv.properties,
kept across ``restart`` and recorded in cluster.json (``ClusterState.acting_master``: started
with ``--namesrv-config supportActingMaster=true --broker-config enableSlaveActingMaster=true``,
5.x slaveActingMaster).

With ``--acl`` the brokers enforce ACL with two accounts: ``rocketmq`` / ``12345678``, an
admin, and ``rocketmq2`` / ``12345678`` (PUB|SUB on topics, SUB on groups), the account of
the recorded ACL exchanges (tests/data/vectors/apache-broker). 4.x brokers read them from
Apache's ``plain_acl.yml``; 5.x brokers from 5.3 on have no ``plain_acl.yml`` (ACL 1.0 is
gone): they get the same accounts as ACL 2.0 users (the admin as the initial super user,
``rocketmq2`` created with ``mqadmin createUser`` / ``createAcl``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from tests.apache.maven import MavenError, classpath

HOST = "127.0.0.1"
CLUSTER = "DefaultCluster"
ADMIN = ("rocketmq", "12345678")
USER = ("rocketmq2", "12345678")
START_TIMEOUT = 180.0     # seconds for every node to be routed
STOP_TIMEOUT = 30.0       # seconds a node has to exit on TERM before KILL
NAMESRV_MAIN = "org.apache.rocketmq.namesrv.NamesrvStartup"
BROKER_MAIN = "org.apache.rocketmq.broker.BrokerStartup"
ADMIN_MAIN = "org.apache.rocketmq.tools.command.MQAdminStartup"
JAVA_OPTS = ("-server", "-Xms256m", "-Xmx512m", "-XX:MaxDirectMemorySize=512m", "-XX:+UseG1GC",
             "-Drocketmq.broker.diskSpaceWarningLevelRatio=0.99",
             "-Drocketmq.broker.diskSpaceCleanForciblyRatio=0.98",
             "--add-opens=java.base/java.nio=ALL-UNNAMED", "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED",
             "--add-opens=java.base/java.lang=ALL-UNNAMED", "--add-opens=java.base/java.util=ALL-UNNAMED",
             "--add-opens=java.base/jdk.internal.misc=ALL-UNNAMED",
             "--add-exports=java.base/jdk.internal.ref=ALL-UNNAMED")


# RocketMQ 5.x batches the op messages that mark half messages resolved
# (TransactionalOpBatchService). Once a queue's ops are written and it stays idle for
# transactionOpBatchInterval (3 s), batchSendOpMessage returns a wake-up time in the past
# and the service spins: one core per master that ever ended a transaction (seen on 5.5.0;
# 5.3.3, 5.4.0 and 5.5.1 have the same code). Writing each op at once (any size over 1 byte wakes the service)
# and a wake-up interval no idle queue reaches keeps the same semantics without the spin.
OP_BATCH_WORKAROUND = {"transactionOpMsgMaxSize": "1", "transactionOpBatchInterval": str(2**31 - 1)}


class ClusterError(RuntimeError):
    """The cluster could not be started or stopped (the message says what and where to look)."""


@dataclass(frozen=True)
class BrokerSpec:
    node: str
    broker_name: str
    broker_id: int
    role: str


BROKERS = (BrokerSpec("broker-a-0", "broker-a", 0, "ASYNC_MASTER"),
           BrokerSpec("broker-a-1", "broker-a", 1, "SLAVE"),
           BrokerSpec("broker-b-0", "broker-b", 0, "ASYNC_MASTER"))


@dataclass
class Node:
    name: str
    command: list[str]
    env: dict[str, str]
    address: str
    pid: int = 0


@dataclass
class ClusterState:
    version: str
    dir: str
    namesrv: str
    acl: bool
    nodes: dict[str, Node] = field(default_factory=dict)
    # the settings given with --namesrv-config / --broker-config: tests read what the cluster
    # runs with from here (e.g. supportActingMaster), not from the code they test
    namesrv_config: dict[str, str] = field(default_factory=dict)
    broker_config: dict[str, str] = field(default_factory=dict)

    @property
    def path(self) -> Path:
        return Path(self.dir) / "cluster.json"

    def save(self) -> None:
        tmp = self.path.with_suffix(".json.new")
        tmp.write_text(json.dumps(asdict(self), indent=2) + "\n")
        tmp.replace(self.path)

    @classmethod
    def load(cls, directory: Path) -> "ClusterState":
        path = directory / "cluster.json"
        if not path.exists():
            raise ClusterError(f"no cluster was started under {directory} (no cluster.json)")
        raw = json.loads(path.read_text())
        raw["nodes"] = {k: Node(**v) for k, v in raw["nodes"].items()}
        return cls(**raw)

    @property
    def acting_master(self) -> bool:
        """5.x slaveActingMaster: the NameServer supports it and the brokers register with it."""
        return (self.namesrv_config.get("supportActingMaster") == "true"
                and self.broker_config.get("enableSlaveActingMaster") == "true")

    def brokers(self) -> dict[str, dict[int, str]]:
        """broker name -> broker id -> address, as started."""
        out: dict[str, dict[int, str]] = {}
        for spec in BROKERS:
            out.setdefault(spec.broker_name, {})[spec.broker_id] = self.nodes[spec.node].address
        return out


# ---------------------------------------------------------------- pieces


def major(version: str) -> int:
    try:
        return int(version.split(".", 1)[0])
    except ValueError:
        raise ClusterError(f"version {version!r} is not a RocketMQ release such as 4.9.7 or 5.5.0") from None


def server_artifacts(version: str) -> list[str]:
    if major(version) not in (4, 5):
        raise ClusterError(f"version {version}: only RocketMQ 4.x and 5.x are supported")
    return [f"org.apache.rocketmq:rocketmq-{a}:{version}" for a in ("namesrv", "broker", "tools")]


def java() -> str:
    home = os.environ.get("JAVA_HOME")
    exe = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    if not exe or not Path(exe).exists():
        raise ClusterError("Java is not installed (no java on the PATH, nor in $JAVA_HOME): "
                           "Apache RocketMQ needs a Java 17 runtime")
    return exe


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind((HOST, port))
        except OSError:
            return False
    return True


def free_port(taken: set[int], *, around: Sequence[int] = (0,)) -> int:
    """A port p of 127.0.0.1 such that p + d is free for every d in ``around``."""
    for _ in range(200):
        with socket.socket() as s:
            s.bind((HOST, 0))
            port = s.getsockname()[1]
        ports = {port + d for d in around}
        if min(ports) > 1024 and max(ports) < 65536 and not ports & taken and all(map(_bindable, ports)):
            taken.update(ports)
            return port
    raise ClusterError("no free ports found on 127.0.0.1")


def _logback(log_file: Path) -> str:
    return f"""<?xml version="1.0" encoding="UTF-8"?>
<configuration>
  <appender name="FILE" class="ch.qos.logback.core.FileAppender">
    <file>{log_file}</file>
    <encoder><pattern>%d{{yyy-MM-dd HH:mm:ss,SSS}} %p %t - %m%n</pattern></encoder>
  </appender>
  <root level="INFO"><appender-ref ref="FILE"/></root>
</configuration>
"""


PLAIN_ACL = f"""globalWhiteRemoteAddresses: []
accounts:
  - accessKey: {ADMIN[0]}
    secretKey: {ADMIN[1]}
    whiteRemoteAddress:
    admin: true
  - accessKey: {USER[0]}
    secretKey: {USER[1]}
    whiteRemoteAddress:
    admin: false
    defaultTopicPerm: PUB|SUB
    defaultGroupPerm: SUB
"""


def _acl_properties(version: str) -> dict[str, str]:
    if major(version) == 4:
        return {"aclEnable": "true"}
    return {
        "authenticationEnabled": "true",
        "authenticationProvider": "org.apache.rocketmq.auth.authentication.provider.DefaultAuthenticationProvider",
        "authenticationMetadataProvider":
            "org.apache.rocketmq.auth.authentication.provider.LocalAuthenticationMetadataProvider",
        "authorizationEnabled": "true",
        "authorizationProvider": "org.apache.rocketmq.auth.authorization.provider.DefaultAuthorizationProvider",
        "authorizationMetadataProvider":
            "org.apache.rocketmq.auth.authorization.provider.LocalAuthorizationMetadataProvider",
        "initAuthenticationUser": json.dumps({"username": ADMIN[0], "password": ADMIN[1]}),
        "innerClientAuthenticationCredentials": json.dumps({"accessKey": ADMIN[0], "secretKey": ADMIN[1]}),
    }


def _properties(values: dict[str, str]) -> str:
    return "".join(f"{k}={v}\n" for k, v in values.items())


def _home(node_dir: Path, logback_name: str, *, acl: bool) -> Path:
    """ROCKETMQ_HOME of a node: conf/ with the logging configuration 4.x reads from there
    (5.x carries its own) and, with ACL, plain_acl.yml (4.x) and tools.yml (mqadmin's)."""
    home = node_dir / "home"
    conf = home / "conf"
    conf.mkdir(parents=True, exist_ok=True)
    (conf / logback_name).write_text(_logback(node_dir / "logs" / "server.log"))
    if acl:
        (conf / "plain_acl.yml").write_text(PLAIN_ACL)
        (conf / "tools.yml").write_text(f"accessKey: {ADMIN[0]}\nsecretKey: {ADMIN[1]}\n")
    return home


def _java_command(cp: str, main: str, node_dir: Path, conf: Path) -> list[str]:
    # user.home moves the logs 5.x writes under ~/logs and every default path into the node
    return [java(), *JAVA_OPTS, f"-Duser.home={node_dir}", "-cp", cp, main, "-c", str(conf)]


def namesrv_node(cp: str, root: Path, port: int, extra: dict[str, str] | None = None) -> Node:
    node_dir = root / "namesrv"
    home = _home(node_dir, "logback_namesrv.xml", acl=False)
    conf = node_dir / "namesrv.properties"
    conf.write_text(_properties({"listenPort": str(port), "kvConfigPath": str(node_dir / "kvConfig.json"),
                                 **(extra or {})}))
    return Node("namesrv", _java_command(cp, NAMESRV_MAIN, node_dir, conf),
                {"ROCKETMQ_HOME": str(home)}, f"{HOST}:{port}")


def broker_node(cp: str, root: Path, spec: BrokerSpec, port: int, namesrv: str, version: str, *,
                acl: bool, extra: dict[str, str] | None = None) -> Node:
    node_dir = root / spec.node
    home = _home(node_dir, "logback_broker.xml", acl=acl)
    store = node_dir / "store"
    values = {
        "brokerClusterName": CLUSTER, "brokerName": spec.broker_name, "brokerId": str(spec.broker_id),
        "brokerRole": spec.role, "namesrvAddr": namesrv, "brokerIP1": HOST, "brokerIP2": HOST,
        "listenPort": str(port), "haListenPort": str(port + 1),
        "storePathRootDir": str(store), "storePathCommitLog": str(store / "commitlog"),
        "flushDiskType": "ASYNC_FLUSH", "autoCreateTopicEnable": "true",
        "mappedFileSizeCommitLog": str(64 * 1024 * 1024), "mappedFileSizeConsumeQueue": "300000",
        "diskMaxUsedSpaceRatio": "95", "slaveReadEnable": "true",
        # check-backs every 5 s (default 60 s): a transactional producer's UNKNOW resolves in seconds
        "transactionCheckInterval": "5000",
    }
    if major(version) >= 5:
        values.update(OP_BATCH_WORKAROUND)
    if acl:
        values.update(_acl_properties(version))
    values.update(extra or {})
    conf = node_dir / "broker.properties"
    conf.write_text(_properties(values))
    return Node(spec.node, _java_command(cp, BROKER_MAIN, node_dir, conf),
                {"ROCKETMQ_HOME": str(home)}, f"{HOST}:{port}")


# ---------------------------------------------------------------- processes


def _alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:   # a zombie, or a pid the system gave to another program since
        stat = Path(f"/proc/{pid}/stat").read_text()
        if stat.rsplit(")", 1)[1].split()[0] == "Z":
            return False
        return "rocketmq" in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return True


def launch(node: Node, root: Path) -> None:
    node_dir = root / node.name
    node_dir.mkdir(parents=True, exist_ok=True)
    with open(node_dir / "stdout.log", "ab") as out:
        proc = subprocess.Popen(node.command, cwd=node_dir, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env={**os.environ, **node.env},
                                start_new_session=True)
    node.pid = proc.pid


def _log_tail(root: Path, node: str, lines: int = 25) -> str:
    path = root / node / "stdout.log"
    try:
        text = path.read_text(errors="replace").strip().splitlines()[-lines:]
    except OSError:
        return f"(no {path})"
    return f"{path}:\n  " + "\n  ".join(text)


def _wait(state: ClusterState, ready: Callable[[], bool], what: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    delay = 0.1
    while not ready():
        for node in state.nodes.values():
            if node.pid and not _alive(node.pid):
                raise ClusterError(f"{node.name} exited while waiting for {what}; "
                                   f"{_log_tail(Path(state.dir), node.name)}")
        if time.monotonic() > deadline:
            raise ClusterError(f"{what} not done in {timeout:.0f} s; see the logs under {state.dir}")
        time.sleep(delay)
        delay = min(delay * 2, 1.0)


def _routed(state: ClusterState, want: dict[str, dict[int, str]]) -> Callable[[], bool]:
    from rocketmq_spark.client import ClientConfig, MQClient

    def ready() -> bool:
        try:
            with MQClient(ClientConfig.parse(state.namesrv, request_timeout=3.0)) as client:
                have = client.cluster_addresses()
        except Exception:  # noqa: BLE001 - not up yet
            return False
        return all(have.get(name, {}).get(i) == addr for name, ids in want.items() for i, addr in ids.items())
    return ready


def _mqadmin(state: ClusterState, cp: str, *args: str) -> None:
    home = state.nodes["broker-a-0"].env["ROCKETMQ_HOME"]
    done = subprocess.run([java(), "-cp", cp, f"-Drocketmq.home.dir={home}", ADMIN_MAIN, *args,
                           "-n", state.namesrv], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "ROCKETMQ_HOME": home})
    if done.returncode != 0 or "Exception" in done.stdout:
        raise ClusterError(f"mqadmin {' '.join(args)} failed: {(done.stdout + done.stderr).strip()[-2000:]}")


def _acl_users(state: ClusterState, cp: str) -> None:
    """5.x: the non-admin account, as an ACL 2.0 user with the recorded account's rights."""
    if major(state.version) == 4:
        return
    _mqadmin(state, cp, "createUser", "-c", CLUSTER, "-u", USER[0], "-p", USER[1], "-t", "Normal")
    _mqadmin(state, cp, "createAcl", "-c", CLUSTER, "-s", f"User:{USER[0]}", "-r", "Topic:*",
             "-a", "Pub,Sub", "-d", "Allow")
    _mqadmin(state, cp, "createAcl", "-c", CLUSTER, "-s", f"User:{USER[0]}", "-r", "Group:*",
             "-a", "Sub", "-d", "Allow")


# ---------------------------------------------------------------- commands


def start(version: str, directory: Path, *, acl: bool = False, timeout: float = START_TIMEOUT,
          broker_config: dict[str, str] | None = None, namesrv_config: dict[str, str] | None = None) -> ClusterState:
    """Start the cluster; ``broker_config`` adds or overrides settings of every broker's
    broker.properties (e.g. ``enablePropertyFilter=true``), ``namesrv_config`` of the
    NameServer's namesrv.properties (e.g. ``supportActingMaster=true``); both are written
    once into the nodes' files, so ``restart`` keeps them, and recorded in cluster.json."""
    root = directory.resolve()
    if (root / "cluster.json").exists():
        old = ClusterState.load(root)
        if any(_alive(n.pid) for n in old.nodes.values()):
            raise ClusterError(f"a cluster is already running under {root}: stop it first")
    try:
        cp = classpath(server_artifacts(version))
    except MavenError as exc:
        raise ClusterError(str(exc)) from None
    root.mkdir(parents=True, exist_ok=True)
    taken: set[int] = set()
    ns_port = free_port(taken)
    state = ClusterState(version, str(root), f"{HOST}:{ns_port}", acl,
                         namesrv_config=dict(namesrv_config or {}), broker_config=dict(broker_config or {}))
    state.nodes["namesrv"] = namesrv_node(cp, root, ns_port, namesrv_config)
    for spec in BROKERS:
        port = free_port(taken, around=(-2, 0, 1))
        state.nodes[spec.node] = broker_node(cp, root, spec, port, state.namesrv, version, acl=acl,
                                             extra=broker_config)
    try:
        for node in state.nodes.values():
            launch(node, root)
            state.save()
        _wait(state, _routed(state, state.brokers()), "the NameServer to route every broker", timeout)
        if acl:
            _acl_users(state, cp)
    except BaseException:
        stop(root)
        raise
    return state


def stop_node(state: ClusterState, name: str, sig: int = signal.SIGTERM, timeout: float = STOP_TIMEOUT) -> None:
    node = state.nodes[name]
    if not _alive(node.pid):
        return
    try:
        os.killpg(node.pid, sig)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    while _alive(node.pid):
        if time.monotonic() > deadline:
            os.killpg(node.pid, signal.SIGKILL)
            deadline = time.monotonic() + timeout
        time.sleep(0.05)


def stop(directory: Path) -> None:
    state = ClusterState.load(directory.resolve())
    for name in reversed(list(state.nodes)):   # brokers before the NameServer
        stop_node(state, name)


def kill(directory: Path, name: str) -> None:
    state = ClusterState.load(directory.resolve())
    if name not in state.nodes:
        raise ClusterError(f"no node {name!r}: the nodes are {', '.join(state.nodes)}")
    stop_node(state, name, signal.SIGKILL)


def restart(directory: Path, name: str, *, timeout: float = START_TIMEOUT) -> ClusterState:
    state = ClusterState.load(directory.resolve())
    if name not in state.nodes:
        raise ClusterError(f"no node {name!r}: the nodes are {', '.join(state.nodes)}")
    stop_node(state, name)
    launch(state.nodes[name], Path(state.dir))
    state.save()
    want = {s.broker_name: {s.broker_id: state.nodes[s.node].address} for s in BROKERS if s.node == name}
    _wait(state, _routed(state, want), f"the NameServer to route {name}", timeout)
    return state


def status(directory: Path) -> str:
    state = ClusterState.load(directory.resolve())
    lines = [f"version={state.version}", f"nameServer={state.namesrv}"]
    for node in state.nodes.values():
        lines.append(f"{node.name} {node.address} pid={node.pid} "
                     f"{'running' if _alive(node.pid) else 'stopped'}")
    return "\n".join(lines)


def _setting(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key.strip(), value.strip()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/apache-cluster", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("start", help="resolve, start and wait for a cluster; prints nameServer=HOST:PORT")
    p.add_argument("version", help="an Apache RocketMQ release served by Maven Central, e.g. 4.9.7 or 5.5.0")
    p.add_argument("--dir", required=True, type=Path, help="where pids, logs and stores go")
    p.add_argument("--acl", action="store_true", help="enforce ACL (admin rocketmq, user rocketmq2)")
    p.add_argument("--timeout", type=float, default=START_TIMEOUT, help="seconds to wait for the routes")
    p.add_argument("--broker-config", action="append", default=[], type=_setting, metavar="KEY=VALUE",
                   help="a broker setting added to every broker.properties (repeatable), "
                        "e.g. enablePropertyFilter=true")
    p.add_argument("--namesrv-config", action="append", default=[], type=_setting, metavar="KEY=VALUE",
                   help="a NameServer setting added to namesrv.properties (repeatable), "
                        "e.g. supportActingMaster=true (with --broker-config enableSlaveActingMaster=true)")
    for name, text in (("stop", "stop every node"), ("status", "print the nodes and whether they run")):
        q = sub.add_parser(name, help=text)
        q.add_argument("--dir", required=True, type=Path)
    for name, text in (("kill", "kill -9 one node (e.g. broker-a-0)"),
                       ("restart", "stop one node if it runs, start it again on its store, wait for its route")):
        q = sub.add_parser(name, help=text)
        q.add_argument("node", help="namesrv, broker-a-0, broker-a-1 or broker-b-0")
        q.add_argument("--dir", required=True, type=Path)
    args = parser.parse_args(argv)
    try:
        if args.command == "start":
            state = start(args.version, args.dir, acl=args.acl, timeout=args.timeout,
                          broker_config=dict(args.broker_config), namesrv_config=dict(args.namesrv_config))
            print(f"nameServer={state.namesrv}")
        elif args.command == "stop":
            stop(args.dir)
        elif args.command == "status":
            print(status(args.dir))
        elif args.command == "kill":
            kill(args.dir, args.node)
        elif args.command == "restart":
            print(f"nameServer={restart(args.dir, args.node).namesrv}")
    except ClusterError as exc:
        print(f"apache-cluster: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
