"""Our queries as members of a consumer group, seen by RocketMQ's Java client: its admin API
(DefaultMQAdminExt, what mqadmin uses) sees the query's committed offsets, its connection
and subscriptions; a Java orderly consumer in the same group as our orderly query never
holds a queue the query holds, and each takes the queues over once the other stops.

The two sides are not alike: the Java consumer locks only the share its rebalance allots
it (the query counts as a member) and lets go of the rest, while the query locks every
queue it can get and keeps what it holds until it stops."""

from __future__ import annotations

import base64
import time
from typing import Any

import pytest

from rocketmq_spark.structs import Message
from tests.java.peer import JavaPeer, JavaPeerError
from tests.streaming.streams import source
from tests.waiting import wait_until


def produce(rocketmq: Any, topic: str, n: int, tag: str) -> None:
    for i in range(n):
        rocketmq.admin.send(Message(topic, f"{tag}-{i}".encode()))


def produce_each(rocketmq: Any, topic: str, tag: str) -> dict[tuple[str, int], str]:
    """One message to every queue of ``topic``: body -> its queue."""
    out = {}
    for m in sorted(rocketmq.admin.subscribe_queues(topic, refresh=True)):
        body = f"{tag}-{m.broker_name}-{m.queue_id}"
        rocketmq.admin.send(Message(topic, body.encode()), queue=m)
        out[(m.broker_name, m.queue_id)] = body
    return out


def consumed_bodies(events: list[dict], tag: str) -> set[str]:
    return {base64.b64decode(e["body"]).decode() for e in events
            if e["event"] == "msg" and base64.b64decode(e["body"]).startswith(tag.encode())}


def start_query(spark: Any, rocketmq: Any, topic: str, group: str, checkpoint: str, name: str,
                **options: Any) -> Any:
    df = source(spark, rocketmq.namesrv_addr, topic, group, queueRefreshIntervalMs=1000, **options)
    return (df.selectExpr("broker", "queue_id", "CAST(body AS STRING) AS body").writeStream
            .format("memory").queryName(name).option("checkpointLocation", checkpoint)
            .trigger(processingTime="300 milliseconds").start())


def bodies(spark: Any, name: str) -> list[str]:
    return [r.body for r in spark.sql(f"SELECT body FROM {name}").collect()]


def test_java_admin_sees_the_query_s_offsets_connection_and_subscriptions(spark, rocketmq, java: JavaPeer,
                                                                          tmp_path) -> None:
    topic = rocketmq.create_topic("java_admin", queues=2)
    group = rocketmq.unique("java_admin_g")
    produce(rocketmq, topic, 20, "a")
    name = rocketmq.unique("java_admin_q")
    q = start_query(spark, rocketmq, topic, group, str(tmp_path / "ck"), name, consumeMode="concurrent",
                    startingOffsets="earliest")
    try:
        wait_until(lambda: len(bodies(spark, name)) == 20, 120, "the query read the 20 messages")
        queues = rocketmq.admin.subscribe_queues(topic, refresh=True)
        maxs = {(m.broker_name, m.queue_id): rocketmq.admin.max_offset(m) for m in queues}

        def committed() -> dict:
            try:
                stats = java.admin(rocketmq.namesrv_addr, "stats", group)["offsets"]
            except JavaPeerError as exc:
                if "request type 351 not supported" in str(exc):   # Apache's 5.x tools against a 4.x broker
                    pytest.skip("Apache's 5.x admin asks for GET_TOPIC_CONFIG (351), which 4.x brokers do not "
                                "serve; the 4.x client's admin runs against this cluster")
                raise
            return {(s["queue"]["broker"], s["queue"]["queue_id"]): s["consumer_offset"]
                    for s in stats if s["queue"]["topic"] == topic}
        wait_until(lambda: committed() == maxs, 60, "Java's consume stats show the query's committed offsets")
        conn = java.admin(rocketmq.namesrv_addr, "connections", group)
        assert [c["client_id"] for c in conn["connections"]] == [lock_owner(group, topic)]
        assert conn["consume_type"] == "CONSUME_ACTIVELY" and conn["message_model"] == "CLUSTERING"
        assert conn["subscriptions"] == {topic: "*", f"%RETRY%{group}": "*"}
        route = java.admin(rocketmq.namesrv_addr, "route", topic)
        assert {b["broker"] for b in route["brokers"] if b["id"] == 0} == {m.broker_name for m in queues}
    finally:
        q.stop()
    wait_until(lambda: rocketmq.group_members(group, topic) == set(), 30, "the stopped query leaves its group")


def lock_owner(group: str, topic: str) -> str:
    """The client id a query registers with: its lockOwner, derived as the options do."""
    from rocketmq_spark.spark.options import derived_lock_owner

    return derived_lock_owner(group, (topic,), "*")


def consumed(events: list[dict], tag: str) -> int:
    return len(consumed_bodies(events, tag))


def held(member: Any, topic: str) -> set[tuple[str, int]]:
    """The queues of ``topic`` the Java member reported locked last (a Java consumer of a
    clustering group also subscribes to, and locks, the group's %RETRY% topic)."""
    reports = [e for e in member.snapshot() if e["event"] == "held"]
    return {(q["broker"], q["queue_id"]) for q in reports[-1]["queues"] if q["topic"] == topic} if reports else set()


def steady(member: Any, topic: str, size: int) -> bool:
    """The member's last three reports name the same ``size`` queues of ``topic``."""
    reports = [e for e in member.snapshot() if e["event"] == "held"][-3:]
    sets = [{(q["broker"], q["queue_id"]) for q in r["queues"] if q["topic"] == topic} for r in reports]
    return len(sets) == 3 and len(sets[0]) == size and sets[0] == sets[1] == sets[2]


def test_a_java_orderly_consumer_and_our_orderly_query_never_share_a_queue(spark, rocketmq, java: JavaPeer,
                                                                           tmp_path) -> None:
    topic = rocketmq.create_topic("java_member", queues=2)
    group = rocketmq.unique("java_member_g")
    all_queues = {(m.broker_name, m.queue_id) for m in rocketmq.admin.subscribe_queues(topic, refresh=True)}
    produce(rocketmq, topic, 8, "first")

    # our query first: it locks every queue; the Java member, rebalancing with the query in
    # the group, asks for its share and is refused each one
    name = rocketmq.unique("java_member_q")
    q = start_query(spark, rocketmq, topic, group, str(tmp_path / "ck1"), name, startingOffsets="earliest")
    member = None
    try:
        wait_until(lambda: len(bodies(spark, name)) == 8, 120, "the query read the first messages")
        member = java.start("member", rocketmq.namesrv_addr, topic, group)
        member.wait_for(lambda es: sum(e["event"] == "held" for e in es) >= 6, 60, "the member's reports")
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:           # a few more reports: still nothing held
            assert held(member, topic) == set()
            time.sleep(0.5)
        assert not [e for e in member.snapshot() if e["event"] == "msg"]
    finally:
        q.stop()
    # the query stopped (unlocked, left the group): the member takes every queue
    assert member is not None
    try:
        member.wait_for(lambda es: held(member, topic) == all_queues, 90, "the member holding every queue")
        produce(rocketmq, topic, 6, "second")
        member.wait_for(lambda es: consumed(es, "second") == 6, 60, "the member consuming the new messages")
        # a new query joins the group: the member's rebalance gives it its share, which the
        # member lets go of and the query locks; the member keeps the rest
        name2 = rocketmq.unique("java_member_q")
        q2 = start_query(spark, rocketmq, topic, group, str(tmp_path / "ck2"), name2, startingOffsets="latest")
        try:
            wait_until(lambda: len(q2.recentProgress) >= 1, 60, "the second query's first batch")
            share = len(all_queues) // 2       # AllocateMessageQueueAveragely over the two members
            member.wait_for(lambda es: steady(member, topic, share), 90, "the member down to its share of the queues")
            java_side = held(member, topic)
            third = produce_each(rocketmq, topic, "third")
            mine = {third[q] for q in java_side}
            member.wait_for(lambda es: consumed_bodies(es, "third") == mine, 60,
                            "the member consuming the messages of its queues")
            wait_until(lambda: set(bodies(spark, name2)) == set(third.values()) - mine, 120,
                       "the query reading the messages of the queues it took")
            assert held(member, topic) == java_side
            member.stop()
            member = None
            fourth = produce_each(rocketmq, topic, "fourth")
            # the query goes on from its checkpoint (the truth of a Spark query), so it also
            # reads the third messages the member consumed on the queues it held
            want = sorted(list(third.values()) + list(fourth.values()))
            wait_until(lambda: sorted(bodies(spark, name2)) == want, 120,
                       "the query taking the queues over once the member stopped")
        finally:
            q2.stop()
    finally:
        if member is not None:
            member.kill()
