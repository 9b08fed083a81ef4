"""The stream reader's offset logic against an in-memory stand-in for the sidecar.

Only the decisions are tested here (new queues, vanished queues, locks not granted, data
loss, admission control, AvailableNow, commits); tests/spark/test_e2e_*.py run the same
reader for real through Spark, the sidecar and the embedded broker.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field

import pytest
from rocketmq_spark.spark.features import ReadAllAvailable, ReadMaxRows

from rocketmq_spark.remoting.route import MessageQueue
from rocketmq_spark.sidecar import DataLossError
from rocketmq_spark.spark import options
from rocketmq_spark.spark.offsets import to_json
from rocketmq_spark.spark.partition import RocketMQPartition
from rocketmq_spark.spark.stream_reader import RocketMQStreamReader
from rocketmq_spark.structs import QueueOffsets

T = "orders"


def q(i: int, topic: str = T) -> MessageQueue:
    return MessageQueue(topic, "broker-a", i)


@dataclass
class Broker:
    """What the sidecar would answer: queues with min/max, committed offsets, locks."""

    mins: dict = field(default_factory=dict)
    maxs: dict = field(default_factory=dict)
    committed: dict = field(default_factory=dict)
    held_by_other: set = field(default_factory=set)
    down: set = field(default_factory=set)              # brokers that do not answer
    calls: list = field(default_factory=list)
    commits: list = field(default_factory=list)
    unlocked: list = field(default_factory=list)
    registered: list = field(default_factory=list)
    unregistered: list = field(default_factory=list)
    register_fails: int = 0

    # the SidecarClient methods the reader uses
    def register_consumer(self, cluster, client_id, consumer):
        self.calls.append("register")
        if self.register_fails:
            self.register_fails -= 1
            from rocketmq_spark.errors import TransportError

            raise TransportError("cannot connect to broker-a: [Errno 111] Connection refused")
        self.registered.append((client_id, consumer))

    def unregister_consumer(self, cluster, group, client_id):
        self.unregistered.append((group, client_id))

    def get_queues(self, cluster, topics, refresh=False):
        self.calls.append("get_queues")
        return sorted(k for k in self.maxs if k.topic in topics)

    def get_offsets(self, cluster, queues, group=None, *, replica_reads=False):
        self.calls.append("get_offsets")
        for k in queues:
            if k.broker_name in self.down:
                from rocketmq_spark.errors import TransportError

                raise TransportError(f"cannot connect to {k.broker_name}: [Errno 111] Connection refused")
        return [QueueOffsets(k, self.mins.get(k, 0), self.maxs[k],
                             self.committed.get(k) if group else None) for k in queues]

    def lock(self, cluster, group, owner, queues, keep_renewed=True):
        self.calls.append("lock")
        return frozenset(k for k in queues if k not in self.held_by_other)

    def unlock(self, cluster, group, owner, queues=()):
        self.unlocked.append((group, owner))

    def commit_offsets(self, cluster, group, offsets):
        self.commits.append(dict(offsets))


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def reader(broker: Broker, clock: Clock | None = None, sleep=None, **opts: str) -> RocketMQStreamReader:  # type: ignore[no-untyped-def]
    parsed = options.parse({"nameServer": "127.0.0.1:9876", "topic": T, "consumerGroup": "g", **opts})
    return RocketMQStreamReader(parsed, clock=clock or Clock(), call=lambda _addr, fn: fn(broker),
                                sleep=sleep or (lambda s: pytest.fail(f"slept {s} s")))


def js(d: dict) -> dict:
    return json.loads(json.dumps(to_json(d)))


def test_group_start_uses_committed_then_latest():
    b = Broker(maxs={q(0): 10, q(1): 20}, committed={q(0): 4})
    assert reader(b).initialOffset() == js({q(0): 4, q(1): 20})


def test_latest_reads_everything_and_is_idempotent_when_idle():
    b = Broker(maxs={q(0): 10, q(1): 20})
    r = reader(b, startingOffsets="earliest")
    start = r.initialOffset()
    end = r.latestOffset(start, ReadAllAvailable())
    assert end == js({q(0): 10, q(1): 20})
    assert r.latestOffset(end, ReadAllAvailable()) == end
    assert json.dumps(r.latestOffset(end, ReadAllAvailable())) == json.dumps(end)


def test_latest_offset_is_cheap_when_idle():
    b = Broker(maxs={q(0): 10})
    clock = Clock()
    r = reader(b, clock, startingOffsets="earliest")
    start = r.latestOffset(r.initialOffset(), ReadAllAvailable())
    b.calls.clear()
    for _ in range(50):
        r.latestOffset(start, ReadAllAvailable())
    # one GetOffsets per call; the queue list and locks are refreshed only every 5 s
    assert b.calls.count("get_offsets") == 50
    assert b.calls.count("get_queues") == 0 and b.calls.count("lock") == 0
    clock.now += 5.0
    r.latestOffset(start, ReadAllAvailable())
    assert b.calls.count("get_queues") == 1 and b.calls.count("lock") == 1


def test_max_rows_spread_by_backlog():
    b = Broker(maxs={q(0): 100, q(1): 300})
    r = reader(b, startingOffsets="earliest", maxMessagesPerTrigger="40")
    assert r.getDefaultReadLimit() == ReadMaxRows(40)
    start = r.initialOffset()
    assert r.latestOffset(start, ReadMaxRows(40)) == js({q(0): 10, q(1): 30})
    # the engine may still ask for everything (e.g. to report), which must be honoured
    assert r.latestOffset(start, ReadAllAvailable()) == js({q(0): 100, q(1): 300})


def test_queue_locked_by_another_client_does_not_advance():
    b = Broker(maxs={q(0): 10, q(1): 20}, held_by_other={q(1)})
    r = reader(b, startingOffsets="earliest")
    start = r.initialOffset()
    end = r.latestOffset(start, ReadAllAvailable())
    assert end == js({q(0): 10, q(1): 0})
    parts = r.partitions(start, end)
    assert parts == [RocketMQPartition(T, "broker-a", 0, 0, 10)]
    r.stop()
    assert b.unlocked == [("g", r.opts.lock_owner)]


def test_stop_unlocks_after_a_lease_renewal_under_way(monkeypatch):
    """The unlock is the last word: a renewal the lease thread has in flight is answered
    before it, so the sidecar does not register the locks again after the unlock."""
    import threading

    from rocketmq_spark.spark import stream_reader

    monkeypatch.setattr(stream_reader, "LEASE_RENEW_SECONDS", 0.01)

    class SlowRenewal(Broker):
        in_flight, answer = threading.Event(), threading.Event()

        def lock(self, cluster, group, owner, queues, keep_renewed=True):
            if self.calls.count("lock") >= 1:          # the lease thread's renewals
                self.in_flight.set()
                assert self.answer.wait(10)
            got = super().lock(cluster, group, owner, queues, keep_renewed)
            self.unlocked.append("renewed" if self.in_flight.is_set() else "locked")
            return got

    b = SlowRenewal(maxs={q(0): 10})
    r = reader(b, startingOffsets="earliest")
    r.latestOffset(r.initialOffset(), ReadAllAvailable())
    assert b.in_flight.wait(10)
    stopping = threading.Thread(target=r.stop)
    stopping.start()
    stopping.join(0.2)
    assert stopping.is_alive() and ("g", r.opts.lock_owner) not in b.unlocked
    b.answer.set()
    stopping.join(10)
    assert b.unlocked[-1] == ("g", r.opts.lock_owner)
    assert b.unlocked[:-1] == ["locked", "renewed"]


def test_sigterm_ends_the_process_even_when_the_unlock_cannot_finish(monkeypatch):
    """SIGTERM runs stop() in a thread of its own and waits for it a bounded time: the
    main thread, interrupted wherever it was, may hold a lock the unlock needs. Then it does
    what it would have done (here: the previous handler)."""
    import os
    import signal
    import threading

    from rocketmq_spark.spark import stream_reader

    monkeypatch.setattr(stream_reader, "SIGTERM_STOP_WAIT", 0.2)
    client_lock = threading.Lock()     # stands for a lock inside the shared gRPC client

    unlocked = threading.Event()

    class Stuck(Broker):
        def unlock(self, cluster, group, owner, queues=()):
            if not client_lock.acquire(timeout=5):   # in the main thread: never
                return
            client_lock.release()
            super().unlock(cluster, group, owner, queues)
            unlocked.set()

    b = Stuck(maxs={q(0): 10})
    r = reader(b, startingOffsets="earliest")
    received: list[tuple[int, bool]] = []
    original = signal.signal(signal.SIGTERM,
                             lambda signum, frame: received.append((signum, client_lock.locked())))
    try:
        r.latestOffset(r.initialOffset(), ReadAllAvailable())    # locks, hooks SIGTERM
        with client_lock:                                        # SIGTERM comes meanwhile
            os.kill(os.getpid(), signal.SIGTERM)
            for _ in range(1000):                                # the handler runs between these
                if received:
                    break
            assert received == [(signal.SIGTERM, True)] and b.unlocked == []
        # the unlock, let go, finishes in its thread
        assert unlocked.wait(10) and b.unlocked == [("g", r.opts.lock_owner)]
    finally:
        r._lease_stop.set()
        signal.signal(signal.SIGTERM, original)


def test_concurrent_mode_takes_no_locks_and_reads_the_retry_topic():
    retry = MessageQueue("%RETRY%g", "broker-a", 0)
    b = Broker(maxs={q(0): 10, q(1): 20, retry: 3}, held_by_other={q(1)})
    r = reader(b, startingOffsets="earliest", consumeMode="concurrent", minPartitions="4")
    end = r.latestOffset(r.initialOffset(), ReadAllAvailable())
    assert end == js({q(0): 10, q(1): 20, retry: 3})
    assert "lock" not in b.calls
    parts = r.partitions(r.initialOffset(), end)
    assert sum(p.end - p.start for p in parts) == 33 and len(parts) >= 4
    r.stop()
    assert b.unlocked == []


def test_new_queue_starts_at_earliest_and_vanished_queue_keeps_offset():
    clock = Clock()
    b = Broker(maxs={q(0): 10})
    r = reader(b, clock, startingOffsets="latest")
    start = r.initialOffset()
    assert start == js({q(0): 10})
    b.maxs[q(1)] = 7
    b.mins[q(1)] = 2
    assert r.latestOffset(start, ReadAllAvailable()) == start     # queue list still cached
    clock.now += 10
    end = r.latestOffset(start, ReadAllAvailable())
    assert end == js({q(0): 10, q(1): 7})
    assert r.partitions(start, end) == [RocketMQPartition(T, "broker-a", 1, 2, 7)]
    del b.maxs[q(0)]                     # the route no longer lists queue 0
    clock.now += 10
    assert r.latestOffset(end, ReadAllAvailable()) == end


def test_available_now_stops_at_the_target():
    b = Broker(maxs={q(0): 10})
    r = reader(b, startingOffsets="earliest")
    start = r.initialOffset()
    r.prepareForTriggerAvailableNow()
    b.maxs[q(0)] = 50                    # produced after the trigger started
    assert r.latestOffset(start, ReadAllAvailable()) == js({q(0): 10})
    assert r.reportLatestOffset() == js({q(0): 50})


@pytest.mark.parametrize("fail", ["true", "false"])
def test_data_loss_below_min(fail):
    b = Broker(maxs={q(0): 100}, mins={q(0): 40})
    r = reader(b, failOnDataLoss=fail, maxMessagesPerTrigger="10")
    start = js({q(0): 5})
    if fail == "true":
        with pytest.raises(DataLossError, match=r"orders/broker-a/0: offsets \[5, 40\)"):
            r.latestOffset(start, ReadMaxRows(10))
    else:
        # skips forward: the limit counts from the first stored offset
        assert r.latestOffset(start, ReadMaxRows(10)) == js({q(0): 50})


def test_commit_writes_changed_offsets_only_in_clustering():
    b = Broker(maxs={q(0): 10, q(1): 10})
    r = reader(b)
    r.commit(js({q(0): 3, q(1): 4}))
    r.commit(js({q(0): 5, q(1): 4}))
    assert b.commits == [{q(0): 3, q(1): 4}, {q(0): 5}]
    b2 = Broker(maxs={q(0): 10})
    reader(b2, commitOffsetsToBroker="false").commit(js({q(0): 3}))
    reader(b2, messageModel="broadcasting").commit(js({q(0): 3}))
    assert b2.commits == []


def test_reader_pickles_without_state():
    import pickle

    b = Broker(maxs={q(0): 10})
    r = reader(b, startingOffsets="earliest")
    r.latestOffset(r.initialOffset(), ReadAllAvailable())
    copy = pickle.loads(pickle.dumps(r))
    assert copy.opts == r.opts and copy._granted is None


def test_latest_offset_commits_its_start_which_spark_has_processed():
    b = Broker(maxs={q(0): 10, q(1): 10})
    r = reader(b, startingOffsets="earliest")
    end = r.latestOffset(js({q(0): 2, q(1): 3}), ReadAllAvailable())
    r.latestOffset(end, ReadAllAvailable())
    r.latestOffset(end, ReadAllAvailable())     # idle: nothing new to commit
    r.commit(end)                               # Spark's own commit of the same end
    assert b.commits == [{q(0): 2, q(1): 3}, {q(0): 10, q(1): 10}]


def test_failed_lock_call_holds_everything_back_until_a_retry_works():
    from rocketmq_spark.errors import TransportError

    clock = Clock()
    b = Broker(maxs={q(0): 10})
    r = reader(b, clock, startingOffsets="earliest")
    start = r.initialOffset()
    real_lock = b.lock
    b.lock = lambda *a, **k: (_ for _ in ()).throw(TransportError("broker down"))
    assert r.latestOffset(start, ReadAllAvailable()) == start
    b.lock = real_lock
    assert r.latestOffset(start, ReadAllAvailable()) == start        # retried after the interval
    clock.now += 5
    assert r.latestOffset(start, ReadAllAvailable()) == js({q(0): 10})


def b(i: int) -> MessageQueue:
    return MessageQueue(T, "broker-b", i)


def test_a_broker_that_does_not_answer_holds_back_its_own_queues_until_the_timeout(caplog):
    from rocketmq_spark.errors import TransportError

    clock = Clock()
    broker = Broker(maxs={q(0): 10, b(0): 10})
    r = reader(broker, clock, startingOffsets="earliest", brokerUnavailableTimeoutMs="60000")
    start = r.initialOffset()
    broker.down.add("broker-b")
    broker.maxs = {q(0): 20, b(0): 20}
    with caplog.at_level("WARNING", logger="rocketmq_spark.spark.stream_reader"):
        end = r.latestOffset(start, ReadAllAvailable())
    assert end == js({q(0): 20, b(0): 0})              # broker-a's queue goes on
    assert any("broker broker-b does not answer" in m and "Connection refused" in m for m in caplog.messages)
    clock.now += 59
    assert r.latestOffset(end, ReadAllAvailable()) == end
    clock.now += 1
    with pytest.raises(TransportError, match=r"broker broker-b has not answered for 60 s "
                                             r"\(option 'brokerUnavailableTimeoutMs' is 60000\)"):
        r.latestOffset(end, ReadAllAvailable())


def test_a_broker_that_answers_again_in_time_goes_on_where_it_was():
    clock = Clock()
    broker = Broker(maxs={q(0): 10, b(0): 10})
    r = reader(broker, clock, startingOffsets="earliest", brokerUnavailableTimeoutMs="60000")
    start = r.initialOffset()
    broker.down.add("broker-b")
    end = r.latestOffset(start, ReadAllAvailable())
    assert end == js({q(0): 10, b(0): 0})
    clock.now += 50
    broker.down.clear()
    end = r.latestOffset(end, ReadAllAvailable())
    assert end == js({q(0): 10, b(0): 10})
    broker.down.add("broker-b")                        # down again: a new allowance
    clock.now += 50
    assert r.latestOffset(end, ReadAllAvailable()) == end


def test_timeout_zero_fails_at_the_first_broker_that_does_not_answer():
    from rocketmq_spark.errors import TransportError

    broker = Broker(maxs={q(0): 10, b(0): 10})
    r = reader(broker, startingOffsets="earliest", brokerUnavailableTimeoutMs="0")
    start = r.initialOffset()
    broker.down.add("broker-b")
    with pytest.raises(TransportError, match="broker broker-b has not answered"):
        r.latestOffset(start, ReadAllAvailable())


def test_available_now_waits_for_a_broker_below_its_target():
    clock, slept = Clock(), []
    broker = Broker(maxs={q(0): 10, b(0): 10})

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        clock.now += seconds
        if len(slept) == 3:
            broker.down.clear()                        # back after three pauses

    r = reader(broker, clock, sleep, startingOffsets="earliest")
    start = r.initialOffset()
    r.prepareForTriggerAvailableNow()
    broker.down.add("broker-b")
    assert r.latestOffset(start, ReadAllAvailable()) == js({q(0): 10, b(0): 10})
    assert slept == [0.5, 1.0, 2.0]


def test_available_now_does_not_wait_for_a_broker_whose_queues_reached_the_target():
    broker = Broker(maxs={q(0): 10, b(0): 10})
    r = reader(broker, startingOffsets="earliest")
    r.prepareForTriggerAvailableNow()
    broker.down.add("broker-b")
    done = js({q(0): 5, b(0): 10})
    assert r.latestOffset(done, ReadAllAvailable()) == js({q(0): 10, b(0): 10})


def test_a_failed_queue_list_refresh_keeps_the_last_list(caplog):
    from rocketmq_spark.errors import TransportError

    clock = Clock()
    broker = Broker(maxs={q(0): 10})
    r = reader(broker, clock, startingOffsets="earliest")
    start = r.initialOffset()
    broker.get_queues = lambda *a, **k: (_ for _ in ()).throw(TransportError("NameServer down"))
    clock.now += 10                                    # the list is due to be read again
    with caplog.at_level("WARNING", logger="rocketmq_spark.spark.offset_reader"):
        assert r.latestOffset(start, ReadAllAvailable()) == js({q(0): 10})
    assert any("keeping the last one (1 queue(s))" in m and "NameServer down" in m for m in caplog.messages)


def test_the_sidecar_not_answering_is_not_waited_for():
    from rocketmq_spark.sidecar.errors import SidecarUnavailable

    broker = Broker(maxs={q(0): 10})
    r = reader(broker, startingOffsets="earliest")
    start = r.initialOffset()
    broker.get_offsets = lambda *a, **k: (_ for _ in ()).throw(SidecarUnavailable("no sidecar"))
    with pytest.raises(SidecarUnavailable):
        r.latestOffset(start, ReadAllAvailable())


# ------------------------------------------------------------------ membership


def test_the_query_joins_its_group_before_its_first_commit_and_leaves_at_stop():
    b = Broker(maxs={q(0): 10, q(1): 4})
    r = reader(b, startingOffsets="earliest")
    start = r.initialOffset()
    end = r.latestOffset(start, ReadAllAvailable())
    b.calls.append("commit")     # the fake records commits apart: mark where they begin
    r.latestOffset(end, ReadAllAvailable())          # commits the batch [start, end)
    assert b.commits and b.calls.index("register") < b.calls.index("commit")
    assert b.calls.count("register") == 1
    (client_id, consumer), = b.registered
    assert client_id == r.opts.lock_owner
    assert consumer.group_name == "g" and consumer.message_model == "CLUSTERING"
    assert consumer.consume_type == "CONSUME_ACTIVELY" and consumer.consume_from_where == "CONSUME_FROM_FIRST_OFFSET"
    assert [(s.topic, s.sub_string) for s in consumer.subscriptions] == [(T, "*")]
    r.stop()
    assert b.unregistered == [("g", r.opts.lock_owner)]


def test_a_concurrent_query_subscribes_to_its_retry_topic_and_a_broadcasting_one_says_so():
    b = Broker(maxs={q(0): 1})
    r = reader(b, consumeMode="concurrent", subExpression="TagA || TagB")
    r.latestOffset(r.initialOffset(), ReadAllAvailable())
    consumer = b.registered[-1][1]
    assert [(s.topic, s.sub_string) for s in consumer.subscriptions] == [(T, "TagA || TagB"), ("%RETRY%g", "*")]
    assert consumer.consume_from_where == "CONSUME_FROM_LAST_OFFSET"
    r.stop()
    r = reader(b, messageModel="broadcasting")
    r.latestOffset(r.initialOffset(), ReadAllAvailable())
    assert b.registered[-1][1].message_model == "BROADCASTING"
    assert [s.topic for s in b.registered[-1][1].subscriptions] == [T]
    r.stop()


def test_a_failed_registration_does_not_stop_reading_and_is_tried_again_later(caplog):
    b = Broker(maxs={q(0): 10}, register_fails=1)
    clock = Clock()
    r = reader(b, clock, startingOffsets="earliest")
    start = r.initialOffset()
    with caplog.at_level(logging.WARNING):
        end = r.latestOffset(start, ReadAllAvailable())
    assert end == js({q(0): 10}) and b.registered == []
    assert "registering" in caplog.text and "Connection refused" in caplog.text
    r.latestOffset(start, ReadAllAvailable())
    assert b.registered == []                        # not before queueRefreshIntervalMs
    clock.now += 5.0
    r.latestOffset(start, ReadAllAvailable())
    assert len(b.registered) == 1
    r.stop()
    assert len(b.unregistered) == 1


# ------------------------------------------------------------------ pyspark before 4.2 (no admission control)
# Spark calls latestOffset() with no start and no limit; a restarted query first plans an
# empty range at its checkpoint's latest offsets (setLatestSeenOffset -> partitions(o, o)).


def test_without_admission_control_a_batch_starts_where_the_last_planned_ended():
    b = Broker(maxs={q(0): 100, q(1): 300})
    r = reader(b, startingOffsets="earliest", maxMessagesPerTrigger="40")
    initial = r.initialOffset()
    end1 = r.latestOffset()
    assert end1 == js({q(0): 10, q(1): 30}) and r.latestOffset() == end1     # idle: the same end
    r.partitions(initial, end1)
    end2 = r.latestOffset()
    assert end2 == js({q(0): 20, q(1): 60})
    r.partitions(end1, end2)                       # batch 2 planned: batch 1 (ending at end1) is done
    assert b.commits[-1] == {q(0): 10, q(1): 30}


def test_a_restarted_query_goes_on_from_the_empty_range_spark_plans_first_and_commits_nothing_of_it():
    b = Broker(maxs={q(0): 100, q(1): 300})
    seen = js({q(0): 20, q(1): 60})                # the checkpoint's latest offsets (maybe not done)
    r = reader(b, startingOffsets="earliest", maxMessagesPerTrigger="40")
    assert r.partitions(seen, seen) == []
    assert b.commits == []
    assert r.latestOffset() == js({q(0): 30, q(1): 90})


def test_a_new_query_s_first_call_starts_at_starting_offsets_unbounded_and_keeps_the_locks():
    """No start before the first call of a new query: the start is startingOffsets (the
    same initialOffset gives next), the batch not bounded (Spark's AvailableNow fallback
    makes it the run's one batch), a queue another client holds stays where it starts."""
    b = Broker(maxs={q(0): 100, q(1): 300}, committed={q(0): 40}, held_by_other={q(1)})
    r = reader(b, maxMessagesPerTrigger="40")                  # startingOffsets=group
    assert r.latestOffset() == js({q(0): 100, q(1): 300})     # q1 never committed: latest
    assert r.initialOffset() == js({q(0): 40, q(1): 300})
    r2 = reader(Broker(maxs={q(0): 100, q(1): 300}, held_by_other={q(1)}), startingOffsets="earliest",
                maxMessagesPerTrigger="40")
    assert r2.latestOffset() == js({q(0): 100, q(1): 0})      # the held queue does not move
    assert r2.initialOffset() == js({q(0): 0, q(1): 0})


def test_a_new_queue_whose_broker_does_not_answer_while_planning_is_asked_again_within_the_timeout(caplog):
    """A queue that appeared in the batch (e.g. %RETRY%<group> created after a master was
    replaced) needs its earliest offset while Spark plans; a broker that does not answer
    then is asked again (any planning error fails the query), within the timeout."""
    from rocketmq_spark.errors import TransportError

    clock = Clock()
    slept: list[float] = []

    def sleep(s: float) -> None:
        slept.append(s)
        clock.now += s
        if len(slept) == 3:              # the route refreshed: the broker answers again
            broker.down.clear()

    broker = Broker(maxs={q(0): 10})
    r = reader(broker, clock, sleep, startingOffsets="latest", brokerUnavailableTimeoutMs="10000")
    start = r.initialOffset()
    broker.maxs[q(1)] = 7
    broker.mins[q(1)] = 2
    clock.now += 10
    end = r.latestOffset(start, ReadAllAvailable())
    broker.down.add("broker-a")
    with caplog.at_level("WARNING", logger="rocketmq_spark.spark.stream_reader"):
        assert r.partitions(start, end) == [RocketMQPartition(T, "broker-a", 1, 2, 7)]
    assert slept == [0.1, 0.2, 0.4]
    assert any("option 'brokerUnavailableTimeoutMs' is 10000" in m for m in caplog.messages)

    broker.down.add("broker-a")          # for good: the timeout ends the wait
    slept.clear()
    with pytest.raises(TransportError, match="Connection refused"):
        reader(broker, clock, lambda s: (slept.append(s), setattr(clock, "now", clock.now + s)),
               brokerUnavailableTimeoutMs="1000").partitions(start, end)
    assert sum(slept) <= 1.0 and slept


def test_every_re_read_of_the_routes_locks_again_before_planning():
    """A re-read route may name another master (one back from an outage its slave acted for):
    the plan made with it uses locks asked for after it, even when the last lock call is
    younger than queueRefreshIntervalMs."""
    clock = Clock()
    b = Broker(maxs={q(0): 10})
    r = reader(b, clock, startingOffsets="earliest")
    start = r.initialOffset()            # lists the queues at t=0
    clock.now += 1
    assert r.latestOffset(start, ReadAllAvailable()) == js({q(0): 10})    # locks at t=1
    b.maxs[q(0)] = 20
    b.held_by_other.add(q(0))           # the master back: another client took the queue there
    clock.now += 4                      # t=5: the routes are re-read, the lock call is 4 s old
    b.calls.clear()
    assert r.latestOffset(js({q(0): 10}), ReadAllAvailable()) == js({q(0): 10})
    assert b.calls.index("get_queues") < b.calls.index("lock")
