"""The lock keeper thread renews registered locks on its interval."""

from __future__ import annotations

import threading
import time

from rocketmq_spark.remoting.route import MessageQueue
from rocketmq_spark.sidecar.locks import LockKeeper, LockKey
from rocketmq_spark.sidecar.model import Cluster

C = Cluster("127.0.0.1:9876")
Q = [MessageQueue("t", "broker-a", i) for i in range(3)]


class Recorder:
    def __init__(self, deny: frozenset = frozenset(), fail_first: int = 0) -> None:
        self.calls: list[tuple[str, str, frozenset]] = []
        self.cond = threading.Condition()
        self.deny, self.fail_first = deny, fail_first

    def __call__(self, cluster, group, owner, queues):
        with self.cond:
            self.calls.append((group, owner, queues))
            self.cond.notify_all()
            if len(self.calls) <= self.fail_first:
                raise ConnectionError("broker down")
        return queues - self.deny

    def wait_for(self, pred, timeout: float = 10.0) -> bool:
        with self.cond:
            return self.cond.wait_for(lambda: pred(self.calls), timeout)


def test_registered_locks_are_renewed_until_released() -> None:
    rec = Recorder(deny=frozenset({Q[2]}))
    keeper = LockKeeper(rec, interval=0.05)
    key = LockKey(C, "g", "owner-1")
    try:
        keeper.hold(key, Q, granted=Q[:2])
        assert rec.wait_for(lambda calls: len(calls) >= 2)
        assert all(c == ("g", "owner-1", frozenset(Q)) for c in rec.calls)
        assert keeper.granted(key) == frozenset(Q[:2])
        keeper.release(key, [Q[0]])
        n = len(rec.calls)
        assert rec.wait_for(lambda calls: len(calls) >= n + 2)
        assert rec.calls[-1][2] == frozenset(Q[1:])
        assert keeper.release(key) == frozenset(Q[1:])
        rounds = keeper.rounds
        deadline = time.monotonic() + 10
        while keeper.rounds < rounds + 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert keeper.rounds >= rounds + 2
        assert keeper.held(key) == frozenset()
        assert rec.calls[-1][2] == frozenset(Q[1:])   # nothing renewed after the release
        assert len([c for c in rec.calls if c[2] == frozenset(Q[1:])]) == len(rec.calls) - n
    finally:
        keeper.close()


def test_a_failing_round_does_not_stop_renewal() -> None:
    rec = Recorder(fail_first=2)
    keeper = LockKeeper(rec, interval=0.02)
    key = LockKey(C, "g", "o")
    try:
        keeper.hold(key, Q[:1])
        assert rec.wait_for(lambda calls: len(calls) >= 4)
        assert keeper.granted(key) == frozenset(Q[:1])
    finally:
        keeper.close()


def test_a_registration_whose_owner_stopped_asking_is_no_longer_renewed() -> None:
    now = [1000.0]
    rec = Recorder()
    keeper = LockKeeper(rec, interval=20.0, lease=90.0, clock=lambda: now[0])
    alive, dead = LockKey(C, "g", "alive"), LockKey(C, "g", "dead")
    keeper.hold(alive, Q[:1])
    keeper.hold(dead, Q[1:2])
    now[0] += 60
    keeper.renew_all()
    assert {c[1] for c in rec.calls} == {"alive", "dead"}
    keeper.hold(alive, Q[:1])           # the live owner renews its lease
    now[0] += 60                        # the dead one is now 120 s silent
    rec.calls.clear()
    keeper.renew_all()
    assert [c[1] for c in rec.calls] == ["alive"]
    assert keeper.held(dead) == frozenset() and keeper.held(alive) == frozenset(Q[:1])
    keeper.close()


def test_a_registration_whose_holder_is_gone_is_released_and_handed_on() -> None:
    from rocketmq_spark.sidecar.liveness import ProcessRef

    rec = Recorder()
    states = {1: True, 2: True, 3: None}           # pid -> what liveness.alive answers
    handed: list[tuple[LockKey, frozenset]] = []
    keeper = LockKeeper(rec, interval=20.0, alive=lambda ref: states[ref.pid],
                        on_gone=lambda key, queues: handed.append((key, queues)))
    ref = {pid: ProcessRef("boot", 1, pid, 100) for pid in states}
    a, b, remote, anon = (LockKey(C, "g", o) for o in ("a", "b", "remote", "anon"))
    keeper.hold(a, Q[:1], holder=ref[1])
    keeper.hold(b, Q[1:2], holder=ref[2])
    keeper.hold(remote, Q[2:], holder=ref[3])       # taken where liveness cannot tell
    keeper.hold(anon, Q[2:])                        # no holder named
    assert keeper.release_gone() == {} and handed == []
    states[1] = False
    assert keeper.release_gone() == {a: frozenset(Q[:1])}
    assert handed == [(a, frozenset(Q[:1]))] and keeper.held(a) == frozenset()
    keeper.renew_all()
    assert sorted(c[1] for c in rec.calls) == ["anon", "b", "remote"]
    # the same owner locks again from a new process: that one is watched now
    keeper.hold(b, Q[1:2], holder=ref[1])
    assert keeper.release_gone() == {b: frozenset(Q[1:2])}
    keeper.hold(b, Q[1:2])                          # and one that names no holder is not
    assert keeper.release_gone() == {} and keeper.held(b) == frozenset(Q[1:2])
    keeper.close()


def test_the_keeper_thread_watches_the_holders_between_renewals() -> None:
    from rocketmq_spark.sidecar.liveness import ProcessRef

    gone = threading.Event()
    running = [True]
    keeper = LockKeeper(Recorder(), interval=3600.0, lease=7200.0,
                        alive=lambda ref: running[0], on_gone=lambda key, queues: gone.set())
    try:
        keeper.hold(LockKey(C, "g", "o"), Q, holder=ProcessRef("boot", 1, 7, 100))
        running[0] = False
        assert gone.wait(10)           # within a watch interval (2 s), not the renew interval
    finally:
        keeper.close()


def test_lease_must_outlast_the_renew_interval() -> None:
    import pytest

    with pytest.raises(ValueError, match="lease"):
        LockKeeper(Recorder(), interval=20.0, lease=10.0)


class SlowLockBroker:
    """A client whose LOCK_BATCH_MQ answers only once ``answer`` is set; records the order
    in which the broker saw locks and unlocks."""

    def __init__(self) -> None:
        self.answer, self.asked = threading.Event(), threading.Event()
        self.seen: list[tuple[str, frozenset]] = []

    def lock_batch(self, group, owner, queues):
        self.asked.set()
        assert self.answer.wait(10)
        self.seen.append(("lock", frozenset(queues)))
        return list(queues)

    def unlock_batch(self, group, owner, queues):
        self.seen.append(("unlock", frozenset(queues)))


def test_an_unlock_waits_for_the_same_owners_lock_under_way() -> None:
    """A reader's renewal in flight when it stops must not register after its unlock (the
    keeper would then re-lock the queues until the lease ran out)."""
    from rocketmq_spark.sidecar.service import SidecarService

    broker = SlowLockBroker()
    service = SidecarService(client_factory=lambda c: broker)
    renewal = threading.Thread(target=service.lock, args=(C, "g", "o", Q[:2]))
    renewal.start()
    try:
        assert broker.asked.wait(10)
        unlock = threading.Thread(target=service.unlock, args=(C, "g", "o"))
        unlock.start()
        unlock.join(0.2)
        assert unlock.is_alive(), "the unlock did not wait for the lock under way"
        broker.answer.set()
        renewal.join(10)
        unlock.join(10)
        assert broker.seen == [("lock", frozenset(Q[:2])), ("unlock", frozenset(Q[:2]))]
        assert service.locks.held(LockKey(C, "g", "o")) == frozenset()
    finally:
        broker.answer.set()
        service.locks.close()
