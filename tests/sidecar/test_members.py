"""The member keeper against the test cluster (``rocketmq``: embedded, or the one at
``$ROCKETMQ_NAMESRV``): a joined consumer is in its group on every master (what Java's
rebalance and mqadmin read), leaves on ``leave``, when its lease lapses and when its holder
process is gone; a changed registration heartbeats at once; a heartbeat that cannot be
delivered fails the join."""

from __future__ import annotations

import pytest

from rocketmq_spark.client import ClientConfig, MQClient
from rocketmq_spark.errors import RocketMQError
from rocketmq_spark.remoting.bodies import ConsumerData, SubscriptionData
from rocketmq_spark.sidecar.liveness import ProcessRef
from rocketmq_spark.sidecar.members import MemberKeeper, MemberKey
from rocketmq_spark.sidecar.model import Cluster
from tests.waiting import wait_until


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def consumer(group: str, topic: str, expression: str = "*") -> ConsumerData:
    return ConsumerData(group, subscriptions=(SubscriptionData(topic, expression),))


@pytest.fixture
def setup(rocketmq):
    topic = rocketmq.create_topic("members", queues=2)
    clients: dict[Cluster, MQClient] = {}

    def client_for(cluster: Cluster) -> MQClient:
        if cluster not in clients:
            clients[cluster] = MQClient(ClientConfig.parse(cluster.name_server))
        return clients[cluster]
    yield rocketmq, topic, client_for
    for c in clients.values():
        c.close()


def test_a_member_is_in_its_group_until_it_leaves(setup) -> None:
    rocketmq, topic, client_for = setup
    keeper = MemberKeeper(client_for, interval=30, lease=90)
    group, other = rocketmq.unique("mg"), rocketmq.unique("mg")
    cluster = Cluster(rocketmq.namesrv_addr)
    key = MemberKey(cluster, group, "spark-member-a")
    try:
        keeper.join(key, consumer(group, topic))
        keeper.join(MemberKey(cluster, other, "spark-member-b"), consumer(other, topic))
        assert rocketmq.group_members(group, topic) == {"spark-member-a"}
        assert rocketmq.group_members(other, topic) == {"spark-member-b"}
        assert keeper.leave(key) is True and keeper.leave(key) is False
        wait_until(lambda: rocketmq.group_members(group, topic) == set(), 10,
                   "the member that left is gone from its group")
        assert rocketmq.group_members(other, topic) == {"spark-member-b"}
    finally:
        keeper.close()
        for k in list(keeper.members()):
            keeper.leave(k)


def test_a_lapsed_lease_and_a_gone_holder_leave_the_group(setup) -> None:
    rocketmq, topic, client_for = setup
    clock = Clock()
    gone: set[int] = set()
    keeper = MemberKeeper(client_for, interval=30, lease=90, clock=clock,
                          alive=lambda ref: ref.pid not in gone)
    g1, g2 = rocketmq.unique("mg"), rocketmq.unique("mg")
    cluster = Cluster(rocketmq.namesrv_addr)
    lapsing, held = MemberKey(cluster, g1, "lapsing"), MemberKey(cluster, g2, "held")
    try:
        keeper.join(lapsing, consumer(g1, topic))
        keeper.join(held, consumer(g2, topic), ProcessRef("boot", 1, 4242, 7))
        assert rocketmq.group_members(g1, topic) == {"lapsing"}
        clock.now += 60
        keeper.join(held, consumer(g2, topic), ProcessRef("boot", 1, 4242, 7))   # renewed
        clock.now += 40
        assert keeper.expire() == [lapsing]
        wait_until(lambda: rocketmq.group_members(g1, topic) == set(), 10, "the lapsed member leaves")
        assert rocketmq.group_members(g2, topic) == {"held"}
        gone.add(4242)
        assert keeper.expire() == [held]
        wait_until(lambda: rocketmq.group_members(g2, topic) == set(), 10, "the gone holder's member leaves")
    finally:
        keeper.close()


def test_a_changed_subscription_is_sent_at_once_and_renewals_are_not(setup) -> None:
    rocketmq, topic, client_for = setup
    beats: list[str] = []
    c = client_for(Cluster(rocketmq.namesrv_addr))
    original = c.heartbeat

    def heartbeat(**kw):  # type: ignore[no-untyped-def]
        beats.append(kw["client_id"])
        return original(**kw)
    c.heartbeat = heartbeat  # type: ignore[method-assign]
    keeper = MemberKeeper(client_for, interval=30, lease=90)
    group = rocketmq.unique("mg")
    key = MemberKey(Cluster(rocketmq.namesrv_addr), group, "changing")
    try:
        keeper.join(key, consumer(group, topic))
        keeper.join(key, consumer(group, topic))
        assert beats == ["changing"]
        keeper.join(key, consumer(group, topic, "TagA"))
        assert beats == ["changing", "changing"]
        keeper.beat_all()
        assert len(beats) == 3 and keeper.rounds == 1
    finally:
        keeper.close()
        keeper.leave(key)


def test_a_join_that_cannot_reach_the_cluster_fails(setup) -> None:
    rocketmq, topic, client_for = setup
    keeper = MemberKeeper(client_for, interval=30, lease=90)
    try:
        with pytest.raises(RocketMQError):
            keeper.join(MemberKey(Cluster("127.0.0.1:1"), "g", "c"), consumer("g", topic))
    finally:
        keeper.close()


def test_the_lease_must_outlast_the_interval() -> None:
    with pytest.raises(ValueError, match="lease"):
        MemberKeeper(lambda c: None, interval=30, lease=30)  # type: ignore[arg-type,return-value]
