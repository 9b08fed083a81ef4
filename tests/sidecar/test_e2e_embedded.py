"""The sidecar end to end: real gRPC server, real client, a real cluster (the session's
``rocketmq`` fixture: embedded, or the one at ``$ROCKETMQ_NAMESRV``). Each test's topics
live on one master and its groups are its own, so queue ids and offsets start at 0."""

from __future__ import annotations

import itertools
import time
import uuid
from typing import Callable, Iterator

import pytest

from rocketmq_spark.client import ClientConfig, MQClient
from rocketmq_spark.errors import BrokerError
from rocketmq_spark.remoting.codes import dlq_topic, retry_topic
from rocketmq_spark.remoting.route import MessageQueue
from rocketmq_spark.sidecar import Outgoing, SendBackItem
from rocketmq_spark.sidecar.client import SidecarClient
from rocketmq_spark.sidecar.errors import DataLossError
from rocketmq_spark.sidecar.pull import PullPolicy
from rocketmq_spark.sidecar.locks import LockKey
from rocketmq_spark.sidecar.model import Cluster
from rocketmq_spark.sidecar.server import SidecarServer
from rocketmq_spark.sidecar.service import SidecarService
from rocketmq_spark.structs import Message
from tests.cluster import ClusterHandle

_names = itertools.count()
_RUN = uuid.uuid4().hex[:6]


def unique(prefix: str) -> str:
    """A topic or group name no other test or run uses (the cluster may be shared)."""
    return f"{prefix}_{_RUN}_{next(_names)}"


def wait_until(pred: Callable[[], bool], timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.05)
    return pred()


@pytest.fixture(scope="module")
def ns(rocketmq: ClusterHandle) -> str:
    return rocketmq.namesrv_addr


@pytest.fixture(scope="module")
def mq(ns: str) -> Iterator[MQClient]:
    c = MQClient(ClientConfig.parse(ns))
    yield c
    c.close()


@pytest.fixture(scope="module")
def server() -> Iterator[SidecarServer]:
    s = SidecarServer("127.0.0.1:0", service=SidecarService(
        lock_interval=0.2, pull_policy=PullPolicy(stall_timeout=2.0)))
    yield s
    s.stop(grace=0)


@pytest.fixture(scope="module")
def sc(server: SidecarServer) -> SidecarClient:
    return SidecarClient(server.address)


def new_topic(mq: MQClient, queues: int = 4) -> str:
    topic = unique("sc_topic")
    mq.create_topic(topic, queues=queues, brokers=sorted(mq.cluster_brokers())[:1])
    assert wait_until(lambda: len(_routed(mq, topic)) == queues)
    return topic


def _routed(mq: MQClient, topic: str) -> list[MessageQueue]:
    try:
        return mq.subscribe_queues(topic, refresh=True)
    except BrokerError:   # not routed yet
        return []


def rows(batches) -> list[dict]:
    return [r for b in batches for r in b.to_pylist()]


def fill(mq: MQClient, queue: MessageQueue, n: int, *, tags=("TagA",), prefix: str = "m"):
    return [mq.send(Message(queue.topic, f"{prefix}{i}".encode(), tags=tags[i % len(tags)],
                            keys=f"key{i}", properties={"n": str(i)}), queue=queue)
            for i in range(n)]


def test_queues_and_offsets(sc: SidecarClient, mq: MQClient, ns: str) -> None:
    topic = new_topic(mq)
    qs = sc.get_queues(ns, [topic])
    assert len(qs) == 4 and qs == sorted(qs) and {q.topic for q in qs} == {topic}
    assert [q.queue_id for q in qs] == [0, 1, 2, 3]
    fill(mq, qs[1], 5)
    offs = {o.queue: o for o in sc.get_offsets(ns, qs, unique("sc_group_never"))}
    assert (offs[qs[1]].min_offset, offs[qs[1]].max_offset) == (0, 5)
    assert offs[qs[0]].max_offset == 0
    assert all(o.committed is None for o in offs.values())   # never committed


def test_unknown_topic_is_a_broker_error(sc: SidecarClient, ns: str) -> None:
    with pytest.raises(BrokerError) as e:
        sc.get_queues(ns, [unique("sc_no_such_topic")])
    assert e.value.code == 17


def test_commit_then_offsets_show_it(sc: SidecarClient, mq: MQClient, ns: str) -> None:
    topic = new_topic(mq, queues=2)
    qs = sc.get_queues(ns, [topic])
    group = unique("sc_group_commit")
    fill(mq, qs[0], 3)
    sc.commit_offsets(ns, group, {qs[0]: 2, qs[1]: 0})
    offs = {o.queue: o for o in sc.get_offsets(ns, qs, group)}
    assert offs[qs[0]].committed == 2 and offs[qs[1]].committed == 0
    assert mq.query_consumer_offset(group, qs[0]) == 2
    other = sc.get_queues(ns, [new_topic(mq, queues=1)])
    fill(mq, other[0], 2)
    # QUERY_CONSUMER_OFFSET says 0 there (4.x; 5.x when the queue's first entry is already
    # dispatched, else QUERY_NOT_FOUND), but the group never committed that topic
    assert mq.query_consumer_offset(group, other[0]) in (0, None)
    assert sc.get_offsets(ns, other, group)[0].committed is None


def test_a_sidecar_process_reads_without_loading_pandas(mq: MQClient, ns: str, tmp_path) -> None:
    """pyarrow imports pandas on its first ``pa.array``/``pa.scalar`` (0.3 s, tens of MB):
    a sidecar that has served a read through shared memory has not loaded it."""
    import subprocess
    import sys
    from pathlib import Path

    log = tmp_path / "sidecar.log"          # a file, not a pipe nobody reads: never blocks it
    with open(log, "w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "rocketmq_spark.cli", "sidecar", "--listen",
                                 f"unix:{tmp_path / 's.sock'}"], stdout=subprocess.PIPE, stderr=err,
                                text=True, cwd=Path(__file__).resolve().parents[2])
    try:
        line = proc.stdout.readline().strip()
        assert line.startswith("sidecar listening on "), (line, log.read_text())
        client = SidecarClient(line.removeprefix("sidecar listening on "))
        q = client.get_queues(ns, [new_topic(mq, queues=1)])[0]
        fill(mq, q, 40)
        got = rows(client.pull_batches(ns, q, 0, 40, pull_batch_size=8, max_rows_per_batch=16))
        assert [r["queue_offset"] for r in got] == list(range(40))
        with open(f"/proc/{proc.pid}/maps") as f:
            assert "/pandas/" not in f.read()
    finally:
        proc.terminate()
        proc.wait(30)


def test_pull_range_exact_rows(sc: SidecarClient, mq: MQClient, ns: str) -> None:
    topic = new_topic(mq, queues=1)
    q = sc.get_queues(ns, [topic])[0]
    sent = fill(mq, q, 20)
    got = rows(sc.pull_batches(ns, q, 3, 17, consumer_group=unique("sc_group_pull"),
                               pull_batch_size=4, max_rows_per_batch=5))
    assert [r["queue_offset"] for r in got] == list(range(3, 17))
    assert [r["body"] for r in got] == [f"m{i}".encode() for i in range(3, 17)]
    first = got[0]
    assert first["msg_id"] == sent[3].msg_id
    assert first["offset_msg_id"] == sent[3].offset_msg_id
    assert (first["topic"], first["broker"], first["queue_id"]) == (topic, q.broker_name, 0)
    assert (first["tags"], first["keys"]) == ("TagA", "key3")
    assert dict(first["properties"])["n"] == "3"
    assert first["store_timestamp"].timestamp() > 1.6e9
    assert rows(sc.pull_batches(ns, q, 5, 5)) == []


def test_pull_tag_filter(sc: SidecarClient, mq: MQClient, ns: str) -> None:
    topic = new_topic(mq, queues=1)
    q = sc.get_queues(ns, [topic])[0]
    fill(mq, q, 30, tags=("TagA", "TagB", "TagC"))
    got = rows(sc.pull_batches(ns, q, 0, 25, consumer_group=unique("sc_group_tags"),
                               sub_expression="TagA || TagC", pull_batch_size=8))
    assert [r["queue_offset"] for r in got] == [i for i in range(25) if i % 3 != 1]
    assert {r["tags"] for r in got} == {"TagA", "TagC"}


def test_search_offsets_first_at_or_after(sc: SidecarClient, mq: MQClient, ns: str) -> None:
    topic = new_topic(mq, queues=1)
    q = sc.get_queues(ns, [topic])[0]
    fill(mq, q, 3, prefix="early")
    last = rows(sc.pull_batches(ns, q, 2, 3))[0]["store_timestamp"].timestamp() * 1000
    assert wait_until(lambda: time.time() * 1000 > last + 20)
    cut = int(time.time() * 1000)
    assert wait_until(lambda: time.time() * 1000 > cut + 20)
    fill(mq, q, 3, prefix="late")
    assert sc.search_offsets(ns, [q], cut) == {q: 3}
    assert sc.search_offsets(ns, [q], 0) == {q: 0}
    assert sc.search_offsets(ns, [q], int(time.time() * 1000) + 3_600_000) == {q: 6}


def test_lock_unlock(sc: SidecarClient, mq: MQClient, ns: str, server: SidecarServer) -> None:
    topic = new_topic(mq, queues=3)
    qs = sc.get_queues(ns, [topic])
    group = unique("sc_group_lock")
    assert sc.lock(ns, group, "owner-a", qs) == frozenset(qs)
    assert sc.lock(ns, group, "owner-b", qs, keep_renewed=False) == frozenset()
    rounds = server.service.locks.rounds
    assert wait_until(lambda: server.service.locks.rounds >= rounds + 2)   # renewed meanwhile
    assert sc.lock(ns, group, "owner-b", qs, keep_renewed=False) == frozenset()
    sc.unlock(ns, group, "owner-a", [qs[0]])
    assert sc.lock(ns, group, "owner-b", qs, keep_renewed=False) == frozenset({qs[0]})
    sc.unlock(ns, group, "owner-a")            # all of owner-a's
    assert sc.lock(ns, group, "owner-b", qs, keep_renewed=False) == frozenset(qs)
    sc.unlock(ns, group, "owner-b")
    assert sc.lock(ns, group, "owner-c", qs, keep_renewed=False) == frozenset(qs)
    sc.unlock(ns, group, "owner-c")


def test_send_with_sharding_key(sc: SidecarClient, mq: MQClient, ns: str) -> None:
    topic = new_topic(mq, queues=4)
    msgs = [Outgoing(Message(topic, f"{k}-{i}".encode(), tags="T"), k)
            for i in range(12) for k in ("alpha", "beta", "gamma")]
    results = sc.send(ns, msgs)
    assert len(results) == len(msgs) and all(r.status == "SEND_OK" for r in results)
    for key in ("alpha", "beta", "gamma"):
        mine = [r for r, m in zip(results, msgs) if m.sharding_key == key]
        assert len({r.queue for r in mine}) == 1
        assert [r.queue_offset for r in mine] == sorted(r.queue_offset for r in mine)
        q = mine[0].queue
        # a real broker answers SEND_OK before its consume queue holds the message
        assert wait_until(lambda: sc.get_offsets(ns, [q])[0].max_offset > mine[-1].queue_offset)
        got = rows(sc.pull_batches(ns, q, 0, sc.get_offsets(ns, [q])[0].max_offset))
        bodies = [r["body"] for r in got if r["body"].startswith(key.encode())]
        assert bodies == [f"{key}-{i}".encode() for i in range(12)]
        assert {r["msg_id"] for r in got if r["body"].startswith(key.encode())} == {r.msg_id for r in mine}
    plain = sc.send(ns, [Message(topic, b"no-key")])
    assert plain[0].status == "SEND_OK" and plain[0].queue.topic == topic


def test_send_back_to_dlq_and_retry(sc: SidecarClient, mq: MQClient, ns: str) -> None:
    topic = new_topic(mq, queues=1)
    q = sc.get_queues(ns, [topic])[0]
    group = unique("sc_group_back")
    fill(mq, q, 2, prefix="back")
    got = rows(sc.pull_batches(ns, q, 0, 2, consumer_group=group))
    items = [SendBackItem(offset_msg_id=r["offset_msg_id"], broker_name=r["broker"],
                          origin_msg_id=r["msg_id"], origin_topic=r["topic"], delay_level=d)
             for r, d in zip(got, (-1, 1))]
    sc.send_back(ns, group, items)

    dlq = MessageQueue(dlq_topic(group), q.broker_name, 0)
    assert wait_until(lambda: _max(sc, ns, dlq) >= 1)
    dead = rows(sc.pull_batches(ns, dlq, 0, 1, consumer_group=group))
    assert dead[0]["body"] == b"back0" and dead[0]["msg_id"] == got[0]["msg_id"]

    retry_qs = sc.get_queues(ns, [retry_topic(group)])
    assert wait_until(lambda: sum(_max(sc, ns, rq) for rq in retry_qs) >= 1, timeout=30)
    rq = next(rq for rq in retry_qs if _max(sc, ns, rq) >= 1)
    back = rows(sc.pull_batches(ns, rq, 0, 1, consumer_group=group, restore_retry_topic_of=group))
    assert back[0]["body"] == b"back1"
    assert back[0]["topic"] == topic and back[0]["reconsume_times"] == 1
    raw = rows(sc.pull_batches(ns, rq, 0, 1, consumer_group=group))
    assert raw[0]["topic"] == retry_topic(group)


def _max(sc: SidecarClient, ns: str, q: MessageQueue) -> int:
    try:
        return sc.get_offsets(ns, [q])[0].max_offset
    except BrokerError:
        return 0


def test_pull_beyond_max_and_late_messages(sc: SidecarClient, mq: MQClient, ns: str) -> None:
    import threading

    topic = new_topic(mq, queues=1)
    q = sc.get_queues(ns, [topic])[0]
    fill(mq, q, 3)
    with pytest.raises(DataLossError) as e:
        rows(sc.pull_batches(ns, q, 5, 8))
    assert e.value.beyond_max and f"{topic}/{q.broker_name}/0" in str(e.value)
    assert rows(sc.pull_batches(ns, q, 5, 8, fail_on_data_loss=False)) == []
    # [3, 6) while only 3 messages exist: they arrive while the pull waits
    sender = threading.Thread(target=lambda: fill(mq, q, 3, prefix="late"))
    batches = sc.pull_batches(ns, q, 3, 6)
    sender.start()
    got = rows(batches)
    sender.join(10)
    assert [r["body"] for r in got] == [b"late0", b"late1", b"late2"]
    # never arriving: data loss once the stall timeout passed
    t0 = time.monotonic()
    with pytest.raises(DataLossError):
        rows(sc.pull_batches(ns, q, 6, 9))
    assert time.monotonic() - t0 >= 1.5


def test_auto_spawned_sidecar_reads_the_cluster(tmp_path, mq: MQClient, ns: str) -> None:
    import os
    import signal

    from rocketmq_spark.sidecar import connect

    topic = new_topic(mq, queues=1)
    q = mq.subscribe_queues(topic)[0]
    fill(mq, q, 4)
    client = connect("auto", runtime_dir=tmp_path / "rt")
    pid = client.health().pid
    try:
        assert pid != os.getpid()
        got = rows(client.pull_batches(ns, q, 1, 4))
        assert [r["body"] for r in got] == [b"m1", b"m2", b"m3"]
    finally:
        os.kill(pid, signal.SIGTERM)
        assert wait_until(lambda: not (tmp_path / "rt" / "sidecar.sock").exists())


def test_stopping_a_sidecar_releases_its_kept_locks(mq: MQClient, ns: str) -> None:
    topic = new_topic(mq, queues=2)
    qs = mq.subscribe_queues(topic)
    group = unique("sc_group_exit")
    own = SidecarServer("127.0.0.1:0")
    try:
        client = SidecarClient(own.address)
        assert client.lock(ns, group, "owner-x", qs) == frozenset(qs)
        assert mq.lock_batch(group, "owner-y", qs) == frozenset()
    finally:
        own.stop(grace=0)
    assert mq.lock_batch(group, "owner-y", qs) == frozenset(qs)
    mq.unlock_batch(group, "owner-y", qs)


def test_locks_of_a_process_that_died_come_free_at_once(server: SidecarServer, mq: MQClient,
                                                        ns: str) -> None:
    """A reader killed without unlocking (SIGKILL): the sidecar on its host sees the process
    gone and unlocks its queues, instead of renewing them until the lease lapses (90 s)."""
    import subprocess
    import sys

    topic = new_topic(mq, queues=2)
    qs = mq.subscribe_queues(topic)
    group = unique("sc_group_dead")
    script = ("import sys; from rocketmq_spark.sidecar.client import SidecarClient; "
              "from rocketmq_spark.remoting.route import MessageQueue; "
              f"qs = [MessageQueue(*q) for q in {[(q.topic, q.broker_name, q.queue_id) for q in qs]!r}]; "
              f"got = SidecarClient({server.address!r}).lock({ns!r}, {group!r}, 'owner-x', qs); "
              "print(len(got), flush=True); sys.stdin.read()")
    child = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == str(len(qs))
        rounds = server.service.locks.rounds
        assert wait_until(lambda: server.service.locks.rounds >= rounds + 2)   # renewed meanwhile
        assert mq.lock_batch(group, "owner-y", qs) == frozenset()
    finally:
        child.kill()
        child.wait(10)
    assert wait_until(lambda: mq.lock_batch(group, "owner-y", qs) == frozenset(qs), 10)
    assert server.service.locks.held(LockKey(Cluster.of(ns), group, "owner-x")) == frozenset()
    mq.unlock_batch(group, "owner-y", qs)
