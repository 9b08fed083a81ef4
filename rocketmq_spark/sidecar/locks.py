"""The lock keeper: keeps queue locks of orderly consumers alive on the brokers.

A broker expires a queue lock 60 s after its last LOCK_BATCH_MQ; RocketMQ's orderly
consumers re-lock every 20 s. ``LockKeeper.hold`` registers (cluster, group, owner) ->
queues; one daemon thread re-locks every registered set each ``interval`` seconds, until
``release`` removes them. Queues that another client holds are re-requested on every
round, so they are taken over once that client's lock expires. Errors of one round are
logged and retried on the next.

A registration is a lease: its owner must call ``hold`` again within ``lease`` seconds
(the Spark reader does every 20 s from a thread of its own). A driver killed without
unlocking stops calling, the keeper stops renewing, and the broker expires the locks 60 s
later, so another consumer of the group can take the queues over.

A registration can also name the process that holds it (``liveness.ProcessRef``). Where the
keeper can see that process (same host and pid namespace), it checks every
``WATCH_INTERVAL`` seconds, and once the process is gone it stops renewing and hands the
queues to ``on_gone`` (the service unlocks them on the broker): the queues come free within
seconds of a driver's death instead of after the lease and the broker's expiry (150 s).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Callable, Iterable

from rocketmq_spark.remoting.route import MessageQueue
from rocketmq_spark.sidecar import liveness
from rocketmq_spark.sidecar.liveness import ProcessRef
from rocketmq_spark.sidecar.model import Cluster

log = logging.getLogger(__name__)

LOCK_RENEW_INTERVAL = 20.0
LOCK_LEASE = 90.0       # seconds a registration lives without a fresh hold()
WATCH_INTERVAL = 2.0    # seconds between checks that the holders still run

# (cluster, group, owner, queues) -> queues granted
LockFn = Callable[[Cluster, str, str, frozenset[MessageQueue]], frozenset[MessageQueue]]


@dataclass(frozen=True)
class LockKey:
    cluster: Cluster
    group: str
    owner: str


# (registration, its queues) -> None: called once the registration's holder is gone
GoneFn = Callable[[LockKey, frozenset[MessageQueue]], None]


class LockKeeper:
    def __init__(self, lock_fn: LockFn, *, interval: float = LOCK_RENEW_INTERVAL,
                 lease: float = LOCK_LEASE, clock: Callable[[], float] = time.monotonic,
                 alive: Callable[[ProcessRef], bool | None] = liveness.alive,
                 on_gone: GoneFn = lambda key, queues: None) -> None:
        if interval <= 0:
            raise ValueError(f"lock renew interval must be > 0, got {interval}")
        if lease <= interval:
            raise ValueError(f"lock lease ({lease}s) must exceed the renew interval ({interval}s)")
        self._lock_fn = lock_fn
        self._alive = alive
        self._on_gone = on_gone
        self.interval = interval
        self.lease = lease
        self._clock = clock
        self._seen: dict[LockKey, float] = {}
        self._held: dict[LockKey, frozenset[MessageQueue]] = {}
        self._granted: dict[LockKey, frozenset[MessageQueue]] = {}
        self._holders: dict[LockKey, ProcessRef] = {}
        self._mutex = threading.Lock()
        # Held for a whole renewal round: a release waits for it, so a queue released (and
        # then unlocked on the broker) is never re-locked by a round already under way.
        self._round = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.rounds = 0     # completed renewal rounds (observability, tests)

    # ------------------------------------------------------------ registry

    def hold(self, key: LockKey, queues: Iterable[MessageQueue],
             granted: Iterable[MessageQueue] = (), holder: ProcessRef | None = None) -> None:
        """Keep ``queues`` locked for ``key`` until released (or ``holder`` is gone)."""
        with self._mutex:
            self._held[key] = self._held.get(key, frozenset()) | frozenset(queues)
            self._granted[key] = frozenset(granted)
            self._seen[key] = self._clock()
            if holder is None:
                self._holders.pop(key, None)
            else:
                self._holders[key] = holder
            self._start_locked()

    def _forget(self, key: LockKey) -> None:
        self._held.pop(key, None)
        self._granted.pop(key, None)
        self._seen.pop(key, None)
        self._holders.pop(key, None)

    def release(self, key: LockKey, queues: Iterable[MessageQueue] | None = None) -> frozenset[MessageQueue]:
        """Stop renewing ``queues`` (None: all of ``key``); returns what was registered of them."""
        with self._round, self._mutex:
            held = self._held.get(key, frozenset())
            gone = held if queues is None else held & frozenset(queues)
            rest = held - gone
            if rest:
                self._held[key] = rest
            else:
                self._forget(key)
            return gone

    def release_all(self) -> dict[LockKey, frozenset[MessageQueue]]:
        """Stop renewing everything; returns what was registered."""
        with self._round, self._mutex:
            held, self._held, self._granted, self._seen = dict(self._held), {}, {}, {}
            self._holders = {}
            return held

    def held(self, key: LockKey) -> frozenset[MessageQueue]:
        with self._mutex:
            return self._held.get(key, frozenset())

    def granted(self, key: LockKey) -> frozenset[MessageQueue]:
        """Queues the last lock call (request or renewal) granted ``key``."""
        with self._mutex:
            return self._granted.get(key, frozenset())

    # ------------------------------------------------------------ renewal

    def renew_all(self) -> None:
        with self._round:
            self._renew_round()

    def _renew_round(self) -> None:
        with self._mutex:
            now = self._clock()
            for key in [k for k, seen in self._seen.items() if now - seen > self.lease]:
                log.warning("group %s owner %s: no lock request for %.0f s, its %d queue locks are "
                            "no longer renewed (the broker expires them)", key.group, key.owner,
                            now - self._seen[key], len(self._held.get(key, ())))
                self._forget(key)
            items = list(self._held.items())
        for key, queues in items:
            try:
                got = self._lock_fn(key.cluster, key.group, key.owner, queues)
            except Exception as exc:  # keep renewing the others; retry next round
                log.warning("renewing %d queue locks of group %s owner %s failed: %s",
                            len(queues), key.group, key.owner, exc)
                continue
            lost = queues - got
            if lost:
                log.info("group %s owner %s: %d queues held by another client: %s", key.group,
                         key.owner, len(lost), sorted(f"{q.topic}/{q.broker_name}/{q.queue_id}" for q in lost))
            with self._mutex:
                if key in self._held:
                    self._granted[key] = got
        with self._mutex:
            self.rounds += 1

    def _start_locked(self) -> None:
        if self._thread is None and not self._stop.is_set():
            self._thread = threading.Thread(target=self._run, name="rocketmq-lock-keeper", daemon=True)
            self._thread.start()

    def release_gone(self) -> dict[LockKey, frozenset[MessageQueue]]:
        """Stop renewing the registrations whose holder is gone, and hand each to
        ``on_gone``; returns them."""
        with self._round, self._mutex:
            gone = {key: self._held.get(key, frozenset()) for key, holder in self._holders.items()
                    if self._alive(holder) is False}
            for key in gone:
                log.info("group %s owner %s: the process holding its %d queue locks (pid %d) is "
                         "gone; unlocking them", key.group, key.owner, len(gone[key]),
                         self._holders[key].pid)
                self._forget(key)
        for key, queues in gone.items():    # outside the round: on_gone may take its locks
            try:
                self._on_gone(key, queues)
            except Exception as exc:  # noqa: BLE001 - the broker expires them anyway (60 s)
                log.warning("unlocking the queues of group %s owner %s failed: %s",
                            key.group, key.owner, exc)
        return gone

    def _run(self) -> None:
        watch = min(WATCH_INTERVAL, self.interval)
        due = time.monotonic() + self.interval
        while not self._stop.wait(watch):
            self.release_gone()
            if time.monotonic() >= due:
                self.renew_all()
                due = time.monotonic() + self.interval

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
