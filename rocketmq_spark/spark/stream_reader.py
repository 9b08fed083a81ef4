"""The streaming reader (driver side): offsets, admission control, locks, commits.

How RocketMQ's consumer behaviours map onto Spark's micro-batches (docs/architecture.md):

* ``initialOffset`` resolves ``startingOffsets`` / ``startingTimestamp`` once; afterwards
  Spark's checkpoint is the truth.
* ``latestOffset(start, limit)`` is called many times a second when idle, so it costs one
  GetOffsets call (plus, every ``queueRefreshIntervalMs``, a queue-list refresh and in
  orderly mode a Lock call). Queues that appear later start at their earliest offset;
  queues that vanish from the route keep their offset; a broker that does not answer
  holds back its own queues only, for at most ``brokerUnavailableTimeoutMs``, and a
  failed queue-list refresh keeps the last list (``_reachable_offsets``). ``ReadMaxRows``
  (``maxMessagesPerTrigger``) is spread over the queues by backlog (``planner``).
* orderly + clustering: every queue is locked for ``lockOwner`` through the sidecar, which
  keeps the locks renewed; a queue another client holds does not advance (end = start)
  and is reported once in the log.
* concurrent + clustering: ``%RETRY%<group>`` is read as well.
* processed offsets are written to the group on the broker (clustering and
  ``commitOffsetsToBroker``: UPDATE_CONSUMER_OFFSET through the sidecar), so RocketMQ tools
  see the progress and ``startingOffsets=group`` can resume from it. That happens in
  ``commit(end)`` and, because Spark never calls ``commit`` for the last batch of a
  Trigger.AvailableNow run, also when ``latestOffset(start)`` shows that the batch ending
  at ``start`` is done. Only changed offsets are sent. A failed commit is logged, never
  fatal: the checkpoint is the truth.
* the query is a member of its group on the brokers, as RocketMQ's consumers are: it is
  registered (through the sidecar, which heartbeats it every 20 s) with ``lockOwner`` as
  its client id, its subscriptions and its message model, before its first commit and for
  as long as it runs. Java consumers of the same group see it in their rebalance, RocketMQ
  tools list it (``mqadmin consumerConnection``), and 5.x brokers know the group before its
  offsets are written (they refuse UPDATE_CONSUMER_OFFSET for an unknown group).
* ``stop()`` unlocks and unregisters. Spark ends the reader's Python process with SIGTERM
  without calling ``stop()``, so a registered reader hooks SIGTERM to do that first.
* Trigger.AvailableNow: ``prepareForTriggerAvailableNow`` records the max offsets of that
  moment; later calls never go beyond them.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from types import FrameType
from typing import Callable, Sequence

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition

from rocketmq_spark.errors import BrokerError, RocketMQError, TransportError, subscription_refused
from rocketmq_spark.remoting.route import MessageQueue
from rocketmq_spark.sidecar.errors import DataLossError
from rocketmq_spark.spark import features, link
from rocketmq_spark.spark.features import ReadAllAvailable, ReadLimit, ReadMaxRows
from rocketmq_spark.spark.offset_reader import Caller, OffsetReader, queue_name, transient
from rocketmq_spark.spark.offsets import QueueOffsetMap, from_json, to_json
from rocketmq_spark.spark.options import SourceOptions, consumer_data
from rocketmq_spark.spark.partition import RocketMQPartition
from rocketmq_spark.spark.planner import plan_partitions, ranges, rate_limit
from rocketmq_spark.spark.reader import read_partition

__all__ = ["RocketMQStreamReader"]

LEASE_RENEW_SECONDS = 20.0   # well inside the sidecar's lock lease (90 s)

log = logging.getLogger(__name__)

UNLOCK_TIMEOUT = 5.0     # seconds
# How long SIGTERM waits for stop(): a lease renewal under way, then the unlock.
SIGTERM_STOP_WAIT = 2 * UNLOCK_TIMEOUT + 1.0


class RocketMQStreamReader(DataSourceStreamReader, features.TriggerAvailableNowBase):
    def __init__(self, opts: SourceOptions, *, clock: Callable[[], float] = time.monotonic,
                 call: Caller = link.call, sleep: Callable[[float], None] = time.sleep) -> None:
        self.opts = opts
        self._clock = clock
        self._call = call
        self._sleep = sleep
        self._init_state()

    def _init_state(self) -> None:
        self._offsets: OffsetReader | None = None
        self._granted: frozenset[MessageQueue] | None = None
        self._lock_key: tuple[MessageQueue, ...] = ()
        self._lock_at = 0.0
        self._lock_listing = -1      # offset_reader.listings at the last lock call
        self._reported_unlocked: frozenset[MessageQueue] = frozenset()
        self._down_since: dict[str, float] = {}         # brokers not answering, since when
        self._target: QueueOffsetMap | None = None      # Trigger.AvailableNow
        self._latest: QueueOffsetMap | None = None
        self._next_start: QueueOffsetMap | None = None  # where the next batch starts (pyspark < 4.2)
        self._initial: QueueOffsetMap | None = None     # startingOffsets, resolved once
        self._committed: QueueOffsetMap = {}
        self._commit_retry_at = 0.0
        self._sigterm_hooked = False
        self._registered = False
        self._register_retry_at = 0.0
        self._lease_stop = threading.Event()
        self._lease_thread: threading.Thread | None = None

    # Spark pickles the reader to run read() on executors: only the options travel.
    def __getstate__(self) -> dict:
        return {"opts": self.opts}

    def __setstate__(self, state: dict) -> None:
        self.opts = state["opts"]
        self._clock = time.monotonic
        self._call = link.call
        self._sleep = time.sleep
        self._init_state()

    @property
    def offset_reader(self) -> OffsetReader:
        if self._offsets is None:
            self._offsets = OffsetReader(self.opts, clock=self._clock, call=self._call)
        return self._offsets

    # ------------------------------------------------------------ offsets

    def initialOffset(self) -> dict:
        if self._initial is None:
            self._initial = self.offset_reader.resolve_start(self.opts.starting)
            self._next_start = dict(self._initial)
        return to_json(self._initial)

    def getDefaultReadLimit(self) -> ReadLimit:
        n = self.opts.max_messages_per_trigger
        return ReadMaxRows(n) if n else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        r = self.offset_reader
        self._target = r.latest(r.queues(force=True))

    def latestOffset(self, start: dict | None = None, limit: ReadLimit | None = None) -> dict:  # type: ignore[override]
        """The end of the next batch. pyspark 4.2 and later pass the batch's start and the
        read limit (admission control); earlier releases pass neither, and the start is
        where the last batch planned ended (``partitions``: Spark plans an empty range at
        the latest offsets of the checkpoint when a query restarts, so it is known then
        too), the limit ``maxMessagesPerTrigger``. Only a new query's first call comes
        before any start: the start is ``startingOffsets`` then (``initialOffset``, which
        Spark asks next, gives the same), and the batch is not bounded, since that call
        is also how Spark's fallback for Trigger.AvailableNow sets the run's one batch,
        which must reach the offsets of the moment it started."""
        if start is None:
            if self._next_start is None:
                start, limit = self.initialOffset(), ReadAllAvailable()
                log.info("consumer group %s: a new query's first batch on pyspark %s reads what is "
                         "available, without maxMessagesPerTrigger", self.opts.consumer_group,
                         features.PYSPARK_VERSION)
            else:
                start, limit = to_json(self._next_start), self.getDefaultReadLimit()
        r = self.offset_reader
        begun = from_json(start)
        self._register()
        # Spark runs one batch at a time and asks for the next end only once the batch
        # ending at ``start`` is done, so ``start`` is processed: commit it. (Spark's own
        # commit(end) never comes for the last batch of a Trigger.AvailableNow run.)
        self._commit(begun)
        listed = r.queues()
        info = self._reachable_offsets(listed, begun)
        queues = [q for q in listed if q in info]       # an unreachable broker's keep `begun`
        begin: QueueOffsetMap = {}
        latest: QueueOffsetMap = {}
        for q in queues:
            o = info[q]
            begin[q] = self._checked_start(q, begun.get(q, o.min_offset), o.min_offset, o.max_offset)
            latest[q] = max(o.max_offset, begin[q])
        self._latest = dict(latest)
        if self._target is not None:
            latest = {q: max(begin[q], min(latest[q], self._target.get(q, begin[q]))) for q in queues}
        held = self._locked(queues) if self.opts.uses_locks else frozenset(queues)
        latest = {q: (latest[q] if q in held else begin[q]) for q in queues}
        max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        end = rate_limit(begin, latest, max_rows)
        for q in queues:
            if q not in held:
                end[q] = begun.get(q, begin[q])   # another client holds it: no move at all
        for q, off in begun.items():              # vanished from the route: keep its offset
            end.setdefault(q, off)
        return to_json(end)

    def _reachable_offsets(self, queues: Sequence[MessageQueue], begun: QueueOffsetMap) -> dict:
        """The offsets of the queues whose brokers answer. A broker that does not (restarting,
        or dead until the NameServer drops it) holds back its own queues only, for at most
        ``brokerUnavailableTimeoutMs``; then the query fails. Trigger.AvailableNow waits for
        it instead (Spark would end the run at the first batch without new rows, short of
        the target)."""
        r, o = self.offset_reader, self.opts
        pause = 0.5
        while True:
            info, down = r.reachable_offsets(queues)
            now = self._clock()
            for name in [b for b in self._down_since if b not in down]:
                log.info("broker %s answers again", name)
                del self._down_since[name]
            for name, exc in down.items():
                if name not in self._down_since:
                    self._down_since[name] = now
                    log.warning("broker %s does not answer; its queues wait (at most %d ms, option "
                                "'brokerUnavailableTimeoutMs'): %s", name, o.broker_unavailable_ms, exc)
                if (now - self._down_since[name]) * 1000 >= o.broker_unavailable_ms:
                    raise TransportError(
                        f"broker {name} has not answered for {now - self._down_since[name]:.0f} s "
                        f"(option 'brokerUnavailableTimeoutMs' is {o.broker_unavailable_ms}): {exc}") from exc
            waiting = self._target is not None and any(
                q.broker_name in down and begun.get(q, -1) < self._target.get(q, -1) for q in queues)
            if not waiting:
                return info
            self._sleep(pause)
            pause = min(pause * 2, 5.0)

    def _checked_start(self, q: MessageQueue, start: int, min_offset: int, max_offset: int) -> int:
        """The start, checked against what the broker still stores (failOnDataLoss)."""
        if start < min_offset:
            text = (f"{queue_name(q)}: offsets [{start}, {min_offset}) are no longer stored "
                    f"(the queue's min offset is {min_offset}; retention removed them)")
            if self.opts.fail_on_data_loss:
                raise DataLossError(text + "; set failOnDataLoss=false to skip them")
            log.warning("%s; skipping to %d", text, min_offset)
            return min_offset
        if start > max_offset:
            text = (f"{queue_name(q)}: the query is at offset {start} but the queue's max offset "
                    f"is {max_offset} (the queue lost or reset data)")
            if self.opts.fail_on_data_loss:
                raise DataLossError(text + "; set failOnDataLoss=false to wait for new data "
                                           "beyond the old position", beyond_max=True)
            log.warning("%s; waiting until it passes %d", text, start)
        return start

    def reportLatestOffset(self) -> dict | None:
        return None if self._latest is None else to_json(self._latest)

    # ------------------------------------------------------------ membership

    def _register(self) -> None:
        """Join the group on the brokers, once (the lease thread renews it); a failure is
        logged and retried after ``queueRefreshIntervalMs``: reading goes on without it."""
        if self._registered or self._clock() < self._register_retry_at:
            return
        self._unlock_on_sigterm()
        self._registered = self._register_call()
        if not self._registered:
            self._register_retry_at = self._clock() + self.opts.queue_refresh_ms / 1000.0
        self._keep_lease()

    def _register_call(self) -> bool:
        o, cluster = self.opts, self.offset_reader.cluster
        try:
            self._call(o.sidecar, lambda c: c.register_consumer(cluster, o.lock_owner, consumer_data(o)))
            return True
        except BrokerError as exc:
            if subscription_refused(exc):     # the query cannot read what it asked for: stop it
                raise
            log.warning("consumer group %s: registering %s with the brokers failed (retrying in %d ms): %s",
                        o.consumer_group, o.lock_owner, o.queue_refresh_ms, exc)
            return False
        except Exception as exc:  # noqa: BLE001 - membership is for others to see; reading goes on
            log.warning("consumer group %s: registering %s with the brokers failed (retrying in %d ms): %s",
                        o.consumer_group, o.lock_owner, o.queue_refresh_ms, exc)
            return False

    # ------------------------------------------------------------ locks (orderly)

    def _locked(self, queues: Sequence[MessageQueue]) -> frozenset[MessageQueue]:
        """The queues this query holds; asked again when the queue list changes, every
        ``queueRefreshIntervalMs`` (to take over queues another client let go), and after
        every re-read of the routes: a route may name another master (a master back from an
        outage its slave acted for, 5.x slaveActingMaster), whose locks must be taken before
        its queues advance."""
        now = self._clock()
        key = tuple(queues)
        due = (now - self._lock_at >= self.opts.queue_refresh_ms / 1000.0
               or self.offset_reader.listings != self._lock_listing)
        if self._granted is not None and key == self._lock_key and not due:
            return self._granted
        o, cluster = self.opts, self.offset_reader.cluster
        self._lock_key, self._lock_at, self._lock_listing = key, now, self.offset_reader.listings
        self._unlock_on_sigterm()
        try:
            self._granted = self._call(o.sidecar, lambda c: c.lock(
                cluster, o.consumer_group, o.lock_owner, list(queues), keep_renewed=True))
        except RocketMQError as exc:
            # without an answer no queue counts as held: nothing advances until a retry works
            log.warning("consumer group %s: locking its queues failed (retrying in %d ms): %s",
                        o.consumer_group, o.queue_refresh_ms, exc)
            self._granted = frozenset()
        self._keep_lease()
        unlocked = frozenset(queues) - self._granted
        if unlocked != self._reported_unlocked:
            if unlocked:
                log.warning("consumer group %s: %d queue(s) are not locked by %s and do not "
                            "advance: %s", o.consumer_group, len(unlocked), o.lock_owner,
                            ", ".join(queue_name(q) for q in sorted(unlocked)))
            else:
                log.info("consumer group %s: every queue is locked by %s", o.consumer_group,
                         o.lock_owner)
            self._reported_unlocked = unlocked
        return self._granted

    def _keep_lease(self) -> None:
        """The sidecar renews our locks and our registration only while we keep asking (a
        lease, so a driver killed without unlocking frees its queues and leaves the group). Spark calls ``latestOffset`` only
        between batches, and a batch can outlast the lease, so a thread asks every
        ``LEASE_RENEW_SECONDS`` for as long as this reader lives."""
        if self._lease_thread is not None:
            return
        o, cluster = self.opts, self.offset_reader.cluster

        def renew() -> None:
            while not self._lease_stop.wait(LEASE_RENEW_SECONDS):
                if self._registered:
                    self._register_call()
                queues = list(self._lock_key)
                if not (o.uses_locks and queues):
                    continue
                try:
                    self._call(o.sidecar, lambda c: c.lock(
                        cluster, o.consumer_group, o.lock_owner, queues, keep_renewed=True))
                except Exception as exc:  # noqa: BLE001 - the next round retries
                    log.warning("consumer group %s: renewing the lock lease failed: %s",
                                o.consumer_group, exc)

        self._lease_thread = threading.Thread(target=renew, name="rocketmq-lease", daemon=True)
        self._lease_thread.start()

    # ------------------------------------------------------------ planning and reading

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        begun, ended = from_json(start), from_json(end)
        self._next_start = dict(ended)
        if begun != ended or begun == self._initial:
            # Spark plans a batch once the one before is recorded: ``start`` is processed,
            # or it is where a new query starts. (Any other empty range is how pyspark < 4.2
            # says where a restarted query stands, not yet recorded as done: not committed.)
            self._commit(begun)
        new = [q for q in ended if q not in begun]
        if new:  # queues that appeared in this batch start at their earliest offset
            first = self._earliest_of_new(new)
            begun.update({q: min(first.get(q, ended[q]), ended[q]) for q in new})
        todo = ranges({q: begun[q] for q in ended}, ended)
        parts = plan_partitions(todo, orderly=self.opts.orderly,
                                min_partitions=self.opts.min_partitions)
        return [RocketMQPartition.of(p) for p in parts]

    def read(self, partition: InputPartition):  # type: ignore[no-untyped-def]
        return read_partition(self.opts, partition)

    def _earliest_of_new(self, new: Sequence[MessageQueue]) -> QueueOffsetMap:
        """Where the queues that appeared in this batch start. Spark fails the query on any
        error of planning, so a broker that does not answer (a master killed, or replaced by
        an elected one, the route not yet refreshed) is asked again after growing pauses, for
        at most ``brokerUnavailableTimeoutMs``, as ``latestOffset`` waits for it."""
        deadline = self._clock() + self.opts.broker_unavailable_ms / 1000
        pause = 0.1
        while True:
            try:
                return self.offset_reader.earliest(new)
            except RocketMQError as exc:
                if not transient(exc) or self._clock() + pause > deadline:
                    raise
                log.warning("the earliest offsets of %s: %s; asking again in %.1f s (option "
                            "'brokerUnavailableTimeoutMs' is %d)", ", ".join(queue_name(q) for q in new),
                            exc, pause, self.opts.broker_unavailable_ms)
            self._sleep(pause)
            pause = min(pause * 2, 2.0)

    # ------------------------------------------------------------ progress and shutdown

    def commit(self, end: dict) -> None:
        self._commit(from_json(end))

    def _commit(self, offsets: QueueOffsetMap) -> None:
        """Write the offsets that changed since the last commit to the group on the broker."""
        if not self.opts.commits_to_broker:
            return
        changed = {q: o for q, o in offsets.items() if self._committed.get(q) != o}
        if not changed or self._clock() < self._commit_retry_at:
            return
        o, cluster = self.opts, self.offset_reader.cluster
        try:
            self._call(o.sidecar, lambda c: c.commit_offsets(cluster, o.consumer_group, changed))
        except Exception as exc:  # the checkpoint is the truth; the broker copy is a courtesy
            log.warning("could not commit offsets of consumer group %s to the broker (retrying "
                        "in %d ms): %s", o.consumer_group, o.queue_refresh_ms, exc)
            self._commit_retry_at = self._clock() + o.queue_refresh_ms / 1000.0
            return
        self._committed.update(changed)

    def stop(self) -> None:
        self._lease_stop.set()
        lease = self._lease_thread
        if lease is not None and lease is not threading.current_thread():
            # a renewal under way is answered first, so the unlock below is the last word
            lease.join(UNLOCK_TIMEOUT)
        if self.opts.uses_locks and self._granted is not None:
            self._granted = None
            o, cluster = self.opts, self.offset_reader.cluster
            try:
                # a short timeout: this runs while Spark is ending the process
                self._call(o.sidecar, lambda c: link.with_timeout(c, UNLOCK_TIMEOUT)
                           .unlock(cluster, o.consumer_group, o.lock_owner))
            except Exception as exc:  # the broker expires the locks anyway (60 s)
                log.warning("could not unlock the queues of consumer group %s: %s",
                            o.consumer_group, exc)
        if self._registered:
            self._registered = False
            o, cluster = self.opts, self.offset_reader.cluster
            try:
                self._call(o.sidecar, lambda c: link.with_timeout(c, UNLOCK_TIMEOUT)
                           .unregister_consumer(cluster, o.consumer_group, o.lock_owner))
            except Exception as exc:  # the brokers drop it 120 s after its last heartbeat
                log.warning("could not unregister %s from consumer group %s: %s", o.lock_owner,
                            o.consumer_group, exc)

    def _unlock_on_sigterm(self) -> None:
        """Make sure ``stop()`` runs when the query ends.

        Spark ends the Python process that hosts a stream reader with SIGTERM (twice in a
        row, and without calling ``stop()`` first), and SIGTERM's default action skips every
        ``finally``. So once this reader holds locks, the first SIGTERM unlocks (ignoring
        further ones meanwhile), then does what it would have done: the previous handler,
        or the default (terminate).

        The handler runs in the main thread wherever the signal interrupted it, maybe
        holding a lock that the unlock needs too (the gRPC client's). So ``stop()`` runs in
        a thread of its own, and the handler waits for it at most ``SIGTERM_STOP_WAIT``
        seconds. If the unlock cannot finish, the process ends anyway, and a sidecar on this
        host sees it gone and unlocks (``sidecar.locks``); a remote one stops renewing when
        the lease lapses.
        """
        if self._sigterm_hooked or threading.current_thread() is not threading.main_thread():
            return
        previous = signal.getsignal(signal.SIGTERM)

        def on_sigterm(signum: int, frame: FrameType | None) -> None:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            try:
                stopping = threading.Thread(target=self.stop, name="rocketmq-unlock", daemon=True)
                stopping.start()
                stopping.join(SIGTERM_STOP_WAIT)
                if stopping.is_alive():
                    log.warning("consumer group %s: unlocking its queues took more than %.0f s; "
                                "ending without it", self.opts.consumer_group, SIGTERM_STOP_WAIT)
            finally:
                if callable(previous):
                    signal.signal(signal.SIGTERM, previous)
                    previous(signum, frame)
                elif previous == signal.SIG_IGN:
                    signal.signal(signal.SIGTERM, signal.SIG_IGN)
                else:
                    signal.signal(signal.SIGTERM, signal.SIG_DFL)
                    os.kill(os.getpid(), signal.SIGTERM)

        signal.signal(signal.SIGTERM, on_sigterm)
        self._sigterm_hooked = True
