"""A cluster with a slave whose master the tests kill (SIGKILL) and restart.

``ROCKETMQ_APACHE_DIR`` names the directory of a real Apache cluster started by
``scripts/apache-cluster start VERSION --dir DIR`` (``broker-a`` master + slave, ``broker-b``
master); ``.ci/run`` runs these tests against each Apache release it starts. Without it
(and without ``ROCKETMQ_NAMESRV``) the same three brokers are embedded ones, each a process
of its own (``rocketmq-spark broker --join``, tests/joined.py) registered with a NameServer
in the test process, so the master can be killed and restarted on its directory alone."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import pytest

from rocketmq_spark.client import ClientConfig, MQClient
from rocketmq_spark.errors import RocketMQError
from rocketmq_spark.remoting.route import MessageQueue
from tests.joined import JoinedBroker

MASTER, SLAVE = "broker-a-0", "broker-a-1"


@dataclass
class Replicated:
    """The cluster of ``ROCKETMQ_APACHE_DIR`` and what a test does to it."""

    dir: Path
    namesrv: str
    admin: MQClient
    # 5.x slaveActingMaster: while the master is away its slave is routed as brokerId 0 and
    # the name's queues are read-only (from cluster.json for an Apache cluster)
    acting_master: bool = False

    def node_address(self, node: str) -> str:
        from tests.apache.cluster import ClusterState

        return ClusterState.load(self.dir).nodes[node].address

    def kill_master(self) -> None:
        from tests.apache import cluster

        cluster.kill(self.dir, MASTER)

    def restart_master(self) -> None:
        from tests.apache import cluster

        cluster.restart(self.dir, MASTER)

    def master_running(self) -> bool:
        from tests.apache.cluster import ClusterState, _alive

        return _alive(ClusterState.load(self.dir).nodes[MASTER].pid)

    def topic_on_broker_a(self, name: str, queues: int) -> list[MessageQueue]:
        """A topic of broker-a only, routed, and known to its slave (which syncs topic
        configs from its master every few seconds)."""
        self.admin.create_topic(name, queues=queues, brokers=["broker-a"])
        routed = wait_for(lambda: _routed(self.admin, name, queues), 60, f"the route of {name}")
        slave = self.node_address(SLAVE)
        wait_for(lambda: _slave_knows(self.admin, slave, routed[0]), 90, f"{SLAVE} to know {name}")
        return routed

    def replicated_to_slave(self, queue: MessageQueue, n: int, timeout: float = 120) -> None:
        slave = self.node_address(SLAVE)
        wait_for(lambda: _max_offset_at(self.admin, slave, queue) >= n, timeout,
                 f"{SLAVE} to hold {n} messages of {queue}")


def wait_for(pred: Callable[[], object], timeout: float, what: str) -> object:
    deadline = time.monotonic() + timeout
    while True:
        got = pred()
        if got:
            return got
        if time.monotonic() > deadline:
            raise TimeoutError(f"waited {timeout:g} s for {what}")
        time.sleep(0.2)


def _routed(admin: MQClient, topic: str, queues: int) -> list[MessageQueue] | None:
    try:
        got = admin.subscribe_queues(topic, refresh=True)
    except RocketMQError:
        return None
    return got if len(got) >= queues else None


def _max_offset_at(admin: MQClient, address: str, queue: MessageQueue) -> int:
    from rocketmq_spark.client.calls import request
    from rocketmq_spark.remoting.codes import RequestCode
    from rocketmq_spark.remoting.headers import OffsetResponseHeader, QueueRequestHeader

    cmd = request(RequestCode.GET_MAX_OFFSET, QueueRequestHeader(queue.topic, queue.queue_id))
    try:
        return OffsetResponseHeader.from_ext(admin._call(address, cmd).ext).offset
    except RocketMQError:
        return -1


def _slave_knows(admin: MQClient, address: str, queue: MessageQueue) -> bool:
    """The slave serves pulls of the topic (it answers TOPIC_NOT_EXIST until it has synced
    the topic's config from its master)."""
    from rocketmq_spark.client import pull as pull_codec
    from rocketmq_spark.remoting.codes import ResponseCode

    cmd = pull_codec.pull_request(queue, 0, group="failover_probe", max_nums=1, expression="*")
    try:
        answer = admin._transport.invoke(address, cmd, 10.0)
    except RocketMQError:
        return False
    return answer.code != ResponseCode.TOPIC_NOT_EXIST


class EmbeddedReplicated(Replicated):
    """The same three brokers embedded, each a process of its own (tests/joined.py)."""

    def __init__(self, directory: Path, namesrv: str, admin: MQClient, nodes: dict[str, JoinedBroker],
                 acting_master: bool = False) -> None:
        super().__init__(directory, namesrv, admin, acting_master)
        self.nodes = nodes

    def node_address(self, node: str) -> str:
        return self.nodes[node].addr

    def kill_master(self) -> None:
        self.nodes[MASTER].kill()

    def restart_master(self) -> None:
        self.nodes[MASTER].start()

    def master_running(self) -> bool:
        return self.nodes[MASTER].running()


LAYOUT = ((MASTER, "broker-a", 0), (SLAVE, "broker-a", 1), ("broker-b-0", "broker-b", 0))


def _embedded(directory: Path, layout: tuple[tuple[str, str, int], ...] = LAYOUT, *,
              acting_master: bool = False) -> Iterator[EmbeddedReplicated]:
    """A NameServer here and the brokers of ``layout`` (node, broker name, brokerId), each a
    process; ``acting_master``: 5.x slaveActingMaster on the NameServer and the brokers."""
    from rocketmq_spark.embedded import EmbeddedCluster

    sync = ("--slave-sync-interval-ms", "500") + (("--acting-master",) if acting_master else ())
    with EmbeddedCluster(directory / "namesrv", brokers=0, namesrv_port=0, acting_master=acting_master) as ns:
        nodes = {node: JoinedBroker(ns.namesrv_addr, name, broker_id, directory / node, sync)
                 for node, name, broker_id in layout}
        admin = MQClient(ClientConfig.parse(ns.namesrv_addr, request_timeout=10.0))
        try:
            for node in nodes.values():
                node.start()
            yield EmbeddedReplicated(directory, ns.namesrv_addr, admin, nodes, acting_master)
        finally:
            admin.close()
            for node in nodes.values():
                node.stop()


@pytest.fixture(scope="session")
def replicated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Replicated]:
    directory = os.environ.get("ROCKETMQ_APACHE_DIR")
    if not directory:
        yield from _embedded(tmp_path_factory.mktemp("failover"))
        return
    from tests.apache.cluster import ClusterState

    state = ClusterState.load(Path(directory).resolve())
    admin = MQClient(ClientConfig.parse(state.namesrv, request_timeout=10.0))
    try:
        yield Replicated(Path(directory).resolve(), state.namesrv, admin, state.acting_master)
    finally:
        admin.close()


@pytest.fixture(autouse=True)
def master_back(replicated: Replicated) -> Iterator[None]:
    """Whatever a test did, broker-a's master runs again after it."""
    yield
    if not replicated.master_running():
        replicated.restart_master()
