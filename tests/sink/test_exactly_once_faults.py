"""Exactly-once under failure: RocketMQ -> Spark -> RocketMQ (and a batch write) with its own
driver subprocesses (local[2,4], so Spark retries failed tasks) against an embedded cluster
whose brokers check half messages back quickly (timeout 1 s, every 1 s, at most 3 times).

Each case stops the world at an exact point with a broker gate (rocketmq_spark/embedded/
gates.py: the request waits at the broker's door; when its client is killed it is dropped,
never handled), kills what the case says with SIGKILL, and runs the query again on its
checkpoint. Then the output topic, read by the C++ client and by ours, holds every input
message exactly once, with its body, each key's messages in key order on one queue.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Callable, Iterator

import pytest

from rocketmq_spark.client import ClientConfig, MQClient
from rocketmq_spark.embedded import EmbeddedCluster
from rocketmq_spark.embedded.gates import Gate
from rocketmq_spark.remoting.codes import TRANS_CHECK_MAX_TIME_TOPIC, TRANS_HALF_TOPIC, RequestCode
from rocketmq_spark.remoting.command import RemotingCommand
from rocketmq_spark.remoting.headers import SendMessageRequestHeader
from rocketmq_spark.remoting.message import decode_properties
from rocketmq_spark.sidecar.model import TAG_PROPERTY
from rocketmq_spark.sidecar.txnlog import DEFAULT_LOG_TOPIC, PROP_KIND
from rocketmq_spark.structs import Message
from tests.interop.helpers import read_queue
from tests.streaming.streams import DriverProcess
from tests.processes import kill_all, pids_in
from tests.waiting import wait_until

pytestmark = pytest.mark.embedded_only("it kills and restarts brokers, with short transaction check-back settings")

DRIVER = Path(__file__).with_name("eo_driver.py")
KEYS = [f"key{k}" for k in range(5)]
N = 180                                   # 3 micro-batches of 60


class Rig:
    def __init__(self, cluster: EmbeddedCluster, tmp: Path) -> None:
        self.cluster, self.tmp = cluster, tmp
        self.mq = MQClient(ClientConfig.parse(cluster.namesrv_addr))
        self.source = "eo_src"
        self.sent = [f"{KEYS[i % len(KEYS)]}:{i}".encode() for i in range(N)]

    def gate(self, match: Callable[[RemotingCommand], bool], after: int = 0) -> Gate:
        g = Gate(match, after=after)
        for b in self.cluster.brokers.values():
            b.gates.append(g)
        return g

    def clear_gates(self) -> None:
        for b in self.cluster.brokers.values():
            b.gates.clear()

    def sink_of(self, name: str) -> str:
        self.cluster.create_topic(name, queues=2)
        wait_until(lambda: len(self.mq.subscribe_queues(name, refresh=True)) == 4, 30, f"{name} routed")
        return name

    def start(self, case: str, sink: str, mode: str = "stream", fail_at: str = "", run: int = 0) -> DriverProcess:
        d = self.tmp / case
        (d / "sc").mkdir(parents=True, exist_ok=True, mode=0o700)
        return DriverProcess([self.cluster.namesrv_addr, self.source, sink, f"g_{case}", str(d / "ck"),
                              str(d / f"local{run}"), f"txn-{case}", mode, fail_at, f"pg_{case}"],
                             d / f"driver{run}.log",
                             script=DRIVER, env_extra={"ROCKETMQ_SPARK_SIDECAR_DIR": str(d / "sc")})

    def finish(self, driver: DriverProcess, timeout: float = 240) -> None:
        wait_until(lambda: not driver.alive(), timeout, "the driver to finish")
        assert driver.proc.returncode == 0 and "DONE" in driver.log.read_text(), driver.tail()

    def kill_sidecar(self, case: str = "*") -> list[int]:
        """SIGKILL the case's sidecar, or every case's (found in /proc by its directory: a
        health call may time out on a loaded machine, and a sidecar left alive would finish
        what the case cuts, or idle on for minutes after the tests)."""
        return [pid for sc in self.tmp.glob(f"{case}/sc")
                for pid in kill_all(pids_in(sc, b"rocketmq_spark.sidecar.cli"))]

    def output(self, sink: str) -> dict[tuple[str, int], list[bytes]]:
        return {(q.broker_name, q.queue_id): [m.payload() for m in read_queue(self.mq, q, "eo_check")]
                for q in sorted(self.mq.subscribe_queues(sink, refresh=True))}

    def check_exactly_once(self, sink: str) -> None:
        ours = self.output(sink)
        got = [b for msgs in ours.values() for b in msgs]
        extra = Counter(got) - Counter(self.sent)
        missing = Counter(self.sent) - Counter(got)
        assert not extra and not missing, f"duplicated/unexpected {list(extra.items())[:5]}, missing {list(missing)[:5]}"
        for msgs in ours.values():                     # each key in order, on one queue
            for k in KEYS:
                seqs = [int(b.split(b":")[1]) for b in msgs if b.startswith(k.encode() + b":")]
                assert seqs == sorted(seqs)
        placed = {k: {q for q, msgs in ours.items() for b in msgs if b.startswith(k.encode() + b":")}
                  for k in KEYS}
        assert all(len(qs) == 1 for qs in placed.values()), placed
        from tests.sink.readback import cpp_read
        from tests.cluster import ClusterHandle

        cpp = cpp_read(ClusterHandle(self.cluster.namesrv_addr, external=False), sink)
        assert {q: [m.body for m in msgs] for q, msgs in cpp.items()} == ours


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory, cpp_home: Path) -> Iterator[Rig]:
    tmp = tmp_path_factory.mktemp("eo-faults")
    with EmbeddedCluster(tmp / "data", brokers=2, topics={"eo_src": 2}, transaction_timeout_ms=1000,
                         transaction_check_interval_ms=1000, transaction_check_max=3) as cluster:
        r = Rig(cluster, tmp)
        queues = sorted(r.mq.subscribe_queues(r.source, refresh=True))
        for i, body in enumerate(r.sent):     # a key's messages in one source queue: one partition
            queue = queues[(i % len(KEYS)) % len(queues)]
            assert r.mq.send(Message(r.source, body), queue=queue).status == "SEND_OK"
        try:
            yield r
        finally:
            r.clear_gates()
            r.kill_sidecar()
            r.mq.close()


# What a gate stops: requests of one case's producer group (every case has its own), so that
# other cases' sidecars, still answering check-backs, pass.

def _log_record(kind: str) -> Callable[[str], Callable[[RemotingCommand], bool]]:
    def for_case(case: str) -> Callable[[RemotingCommand], bool]:
        def match(cmd: RemotingCommand) -> bool:
            if cmd.code != RequestCode.SEND_MESSAGE_V2:
                return False
            h = SendMessageRequestHeader.from_v2(cmd.ext)
            return (h.topic == DEFAULT_LOG_TOPIC and h.producer_group == f"pg_{case}"
                    and decode_properties(h.properties or "").get(PROP_KIND) == kind)
        return match
    return for_case


def _end_transaction(case: str) -> Callable[[RemotingCommand], bool]:
    """The committer's END_TRANSACTIONs (not check-back answers)."""
    def match(cmd: RemotingCommand) -> bool:
        return (cmd.code == RequestCode.END_TRANSACTION and cmd.ext.get("producerGroup") == f"pg_{case}"
                and cmd.ext.get("fromTransactionCheck") != "true")
    return match


def _half_sends(case: str) -> Callable[[RemotingCommand], bool]:
    def match(cmd: RemotingCommand) -> bool:
        return (cmd.code == RequestCode.SEND_MESSAGE_V2 and cmd.ext.get("a") == f"pg_{case}"
                and "TRAN_MSG\x01true" in cmd.ext.get("i", ""))
    return match


@pytest.mark.parametrize("mode", ["stream", "batch"])
def test_a_task_that_fails_once_is_retried_and_its_rows_written_once(rig: Rig, mode: str) -> None:
    case = f"failonce_{mode}"
    sink = rig.sink_of(f"eo_{case}")
    driver = rig.start(case, sink, mode, fail_at="37")
    rig.finish(driver)
    rig.check_exactly_once(sink)


@pytest.mark.parametrize("point, match, after", [
    ("before_decision", _log_record("part"), 0),           # the tasks sent, nothing decided
    ("mid_commit", _end_transaction, 7),                     # 7 committed, the rest not
    ("before_checkpoint", _log_record("done"), 0),           # all committed, Spark has not recorded it
])
def test_driver_and_sidecar_killed_then_restarted_at_once(rig: Rig, point: str, match, after: int) -> None:
    case = f"kill_{point}"
    sink = rig.sink_of(f"eo_{case}")
    gate = rig.gate(match(case), after=after)
    driver = rig.start(case, sink)
    try:
        assert gate.wait_held(240), f"the gate was never reached:\n{driver.tail()}"
        driver.kill()
        assert rig.kill_sidecar(case), "the case's sidecar was not running"
    finally:
        gate.open()
        rig.clear_gates()
    rig.finish(rig.start(case, sink, run=1))
    rig.check_exactly_once(sink)


def test_restarted_only_after_the_brokers_gave_up_checking_back(rig: Rig) -> None:
    case = "kill_gave_up"
    sink = rig.sink_of(f"eo_{case}")
    gate = rig.gate(_end_transaction(case), after=5)
    driver = rig.start(case, sink)
    try:
        assert gate.wait_held(240), driver.tail()
        driver.kill()
        assert rig.kill_sidecar(case), "the case's sidecar was not running"
    finally:
        gate.open()
        rig.clear_gates()
    # the first batch's half messages not committed before the kill are given up on (no
    # producer is left to ask) after 3 checks, into TRANS_CHECK_MAX_TIME_TOPIC; those the
    # sidecar answered ROLLBACK to before it was killed (a task attempt the batch's decision
    # did not accept) are resolved instead
    def given_up() -> int:               # this case's half messages the brokers gave up on
        if not _routed(rig, TRANS_CHECK_MAX_TIME_TOPIC):
            return 0
        return sum(1 for q in rig.mq.subscribe_queues(TRANS_CHECK_MAX_TIME_TOPIC, refresh=True)
                   for m in read_queue(rig.mq, q, "eo_check")
                   if f"|txn-{case}|" in m.properties.get(TAG_PROPERTY, ""))

    def committed() -> int:
        return sum(len(v) for v in rig.output(sink).values())

    at_kill = committed()
    wait_until(lambda: _pending_halves(rig) == 0, 90,
               f"the brokers to give up or resolve every half message ({60 - at_kill} of the batch's "
               f"were uncommitted at the kill)")
    assert given_up() > 0 and committed() < 60, (given_up(), committed())
    rig.finish(rig.start(case, sink, run=1))
    rig.check_exactly_once(sink)


def _pending_halves(rig: Rig) -> int:
    """Half messages the brokers' check services have not passed yet: neither committed,
    rolled back nor given up (a check puts a copy back at the end of the half queue)."""
    return sum(b.store.max_offset(TRANS_HALF_TOPIC, q) - b.half_messages.consume_offset(TRANS_HALF_TOPIC, q)
               for b in rig.cluster.brokers.values() for q in b.half_messages.half_queue_ids())


def _routed(rig: Rig, topic: str) -> bool:
    try:
        return bool(rig.mq.subscribe_queues(topic, refresh=True))
    except Exception:  # noqa: BLE001 - TOPIC_NOT_EXIST until the first message
        return False


def test_sidecar_killed_while_committing(rig: Rig) -> None:
    """The driver's commit call fails over to a new sidecar, which finishes the commit."""
    case = "kill_sidecar"
    sink = rig.sink_of(f"eo_{case}")
    gate = rig.gate(_end_transaction(case), after=10)
    driver = rig.start(case, sink)
    try:
        assert gate.wait_held(240), driver.tail()
        assert rig.kill_sidecar(case), "the case's sidecar was not running"
    finally:
        gate.open()
        rig.clear_gates()
    try:
        rig.finish(driver)
    except AssertionError:                 # the query failed with its sidecar: run it again
        rig.finish(rig.start(case, sink, run=1))
    rig.check_exactly_once(sink)


def test_a_python_worker_killed_mid_task(rig: Rig) -> None:
    """The task fails with its worker; Spark runs it again; the dead attempt's half messages
    are rolled back by check-backs (its attempt is not in the decision)."""
    case = "kill_worker"
    sink = rig.sink_of(f"eo_{case}")
    gate = rig.gate(_half_sends(case), after=20)
    driver = rig.start(case, sink)
    try:
        assert gate.wait_held(240), driver.tail()
        killed = _kill_python_workers(driver.proc.pid)
        assert killed, "no Python worker found under the driver"
    finally:
        gate.open()
        rig.clear_gates()
    rig.finish(driver)
    rig.check_exactly_once(sink)


def _kill_python_workers(driver_pid: int) -> list[int]:
    """SIGKILL the Python workers among the driver's descendants (the daemon that forks
    them puts itself in a process group of its own)."""
    parent: dict[int, int] = {}
    cmd: dict[int, bytes] = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            stat = (proc / "stat").read_text()
            parent[int(proc.name)] = int(stat.rsplit(")", 1)[1].split()[1])
            cmd[int(proc.name)] = (proc / "cmdline").read_bytes()
        except (OSError, ValueError):
            continue

    def descends(pid: int) -> bool:
        while pid > 1:
            pid = parent.get(pid, 0)
            if pid == driver_pid:
                return True
        return False

    # the workers the daemon forked (not the daemon: Spark needs it to start new workers)
    pids = [p for p, c in cmd.items() if b"pyspark.daemon" in c and descends(p)
            and b"pyspark.daemon" in cmd.get(parent.get(p, 0), b"")]
    return kill_all(pids)


def test_broker_killed_mid_commit_and_restarted(tmp_path: Path, cpp_home: Path) -> None:
    """A broker process (not gated: killed when the first committed messages appear) is
    SIGKILLed and started again on its data; the query, run again when it failed, ends with
    every message once."""
    from tests.embedded.test_durability import start_broker

    flags = ["--brokers", "2", "--topic", "eo_src:2", "--topic", "eo_broker_kill:2",
             "--transaction-timeout-ms", "1000", "--transaction-check-interval-ms", "1000",
             "--transaction-check-max", "3"]
    proc, ns = start_broker(tmp_path / "data", tmp_path / "broker.log", *flags)
    port = ns.rsplit(":", 1)[1]

    class Remote:                      # the Rig's view of a cluster in another process
        namesrv_addr = ns
        brokers: dict = {}
    r = Rig(Remote(), tmp_path)  # type: ignore[arg-type]
    try:
        queues = sorted(r.mq.subscribe_queues(r.source, refresh=True))
        for i, body in enumerate(r.sent):
            r.mq.send(Message(r.source, body), queue=queues[(i % len(KEYS)) % len(queues)])
        sink = "eo_broker_kill"
        driver = r.start("broker_kill", sink)
        wait_until(lambda: sum(len(v) for v in r.output(sink).values()) > 0 or not driver.alive(), 240,
                   "the first committed messages")
        proc.kill()
        proc.wait(30)
        proc, ns2 = start_broker(tmp_path / "data", tmp_path / "broker.log", "--namesrv-port", port, *flags)
        assert ns2 == ns
        wait_until(lambda: not driver.alive(), 300, "the driver to finish or fail")
        if driver.proc.returncode != 0:
            r.finish(r.start("broker_kill", sink, run=1))
        r.check_exactly_once(sink)
    finally:
        r.kill_sidecar()
        r.mq.close()
        proc.kill()
        proc.wait(30)
