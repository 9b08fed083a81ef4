"""Chaos under load: kill the driver, the sidecar or the broker, again and again, and check
that the orderly stream still holds every acknowledged message exactly once.

    python bench/chaos.py [--cycles 10] [--seed N] [--victims driver,sidecar,broker|master] [--work DIR]
                          [--pipeline parquet|exactly-once]

Setup: an embedded broker in a subprocess (``rocketmq-spark broker``, fixed data directory
and NameServer port), a producer thread sending small batches at a steady rate (only
acknowledged sends count), and a Spark driver in a subprocess of its own (local[2,4]: task
retries on) running an orderly query of the topic into parquet with a checkpoint, reading
through an auto-started sidecar in a private directory.

Each cycle waits until a micro-batch is under way, then kills one of them with SIGKILL:

  driver   the driver's process group (JVM and Python workers); started again at once on
           the same checkpoint.
  sidecar  the sidecar process; the next use (a task's pull or the driver's next call)
           spawns a new one, which takes the queue locks back at once (same lock owner).
  broker   the broker process; started again at once on the same data directory (it
           reuses its ports). A driver whose query failed meanwhile (the error names the
           broker) is started again on its checkpoint.
  master   (instead of ``broker``) broker-a's master, with its slave present: the run's
           brokers are then a NameServer process and broker-a's master and slave, each a
           process of its own (``rocketmq-spark broker --join``, tests/joined.py), the
           topics on broker-a only; the master is started again at once on its directory
           (its port), while the slave keeps serving reads.

and measures the recovery time: from the kill until every message acknowledged before it
is in a committed batch. Then it checks the invariants: the sink (read through its
``_spark_metadata`` log) holds every acknowledged message of the committed range exactly
once (key topic+broker+queue+offset), each with the very body the producer sent there
(sha256 of the body bytes, see ``compare_bodies``), nothing but sends of the producer's
appears in it, and the group's offsets on the broker never pass what the checkpoint
committed. Prints one table row per cycle (and the first body mismatches, if any); exits 1
if any cycle lost, duplicated or garbled a message.

``--pipeline exactly-once`` runs the same source into the rocketmq sink instead, with
``deliveryGuarantee=exactly-once``, into the topic ``chaos-out`` (RocketMQ -> Spark ->
RocketMQ), under the same kills and recoveries; the brokers check half messages back after
1 s (``TransactionChecks``). Each body starts with a sharding key (``k<n>:``), each key
sent to one source queue only, so one partition carries it. The check reads the output
topic back whole and compares its bodies by digest with what the producer acknowledged in
the committed range (``compare_digests``; later and unacknowledged sends optional): lost,
duplicated and bad bodies, and the sharding keys whose messages are spread over several
output queues or out of their source order. The final check also reads the output with the
C++ client (when the ``rocketmq`` package is installed) and compares it queue by queue.

``python bench/chaos.py drive ...`` is the driver process itself (used internally).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (BrokerProcess, TransactionChecks, batch_end_offsets,  # noqa: E402
                          committed_batches, committed_end, read_file_sink, read_topic,
                          sidecar_pid, table)

if TYPE_CHECKING:
    from rocketmq_spark.client import MQClient
    from tests.joined import JoinedBroker

ROOT = Path(__file__).resolve().parent.parent
TOPIC = "chaos"
QUEUES = 4
GROUP = "chaos-orderly"
LOCK_OWNER = "chaos-owner"
VICTIMS = ("driver", "sidecar", "broker", "master")
DEFAULT_VICTIMS = ("driver", "sidecar", "broker")
MASTER = "master"                        # broker-a's master of the replicated layout
SLAVE_SYNC_MS = "1000"                   # how often the slave takes its master's tables
PARQUET, EXACTLY_ONCE = "parquet", "exactly-once"
PIPELINES = (PARQUET, EXACTLY_ONCE)
OUT_TOPIC = "chaos-out"                  # the exactly-once pipeline's output
TXN_ID = "chaos-eo"                      # its transactionalId: the same across driver restarts
PRODUCER_GROUP = "chaos-eo-producer"     # the group the brokers check its half messages with
# how the driver logs a task lost with an executor that Spark does not blame for it (INFO)
LOST_WITH_EXECUTOR = "failed because while it was being computed, its executor exited"
READER_GROUP = "chaos-reader"            # pulls that read the output back (commit no offsets)
KEYS_PER_QUEUE = 2                       # sharding keys per source queue

Key = tuple[str, str, int, int]          # topic, broker, queue id, queue offset
QueueKey = tuple[str, str, int]          # topic, broker, queue id
OutQueue = tuple[str, int]               # broker, queue id of the output topic
Digest = str                             # sha256 of a message body, hex
FIRST_MISMATCHES = 5                     # mismatches a body check reports one by one


# ------------------------------------------------------------------ the driver process

def drive(argv: list[str]) -> int:
    """The Spark driver: orderly read of TOPIC into parquet (or, exactly once, into
    OUT_TOPIC) until killed."""
    p = argparse.ArgumentParser(prog="chaos.py drive")
    for a in ("--namesrv", "--checkpoint", "--out", "--local-dir"):
        p.add_argument(a, required=True)
    p.add_argument("--trigger-ms", type=int, default=500)
    p.add_argument("--pull-batch-size", type=int, default=32)
    p.add_argument("--pipeline", choices=PIPELINES, default=PARQUET)
    args = p.parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master("local[2,4]").appName("rocketmq-chaos")
             .config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.local.dir", args.local_dir)
             .config("spark.sql.session.timeZone", "UTC")
             .config("spark.python.worker.reuse", "true")
             .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
             .getOrCreate())
    if args.pipeline == EXACTLY_ONCE:
        run_exactly_once_query(spark, args.namesrv, args.checkpoint, args.trigger_ms,
                               args.pull_batch_size)
    else:
        run_query(spark, args.namesrv, args.checkpoint, args.out, args.trigger_ms,
                  args.pull_batch_size)
    return 0


def _log_lost_tasks(spark: Any) -> None:
    """Spark logs at WARN, its task sets at INFO: a task lost with its executor is logged as
    "Lost task ..." (WARN) when Spark blames the task, and as "... failed because while it
    was being computed, its executor exited for a reason unrelated to the task" (INFO) when
    it does not (which of the two depends on whether the driver or the master notices the
    lost executor first)."""
    sc = spark.sparkContext
    sc.setLogLevel("WARN")
    log4j = sc._jvm.org.apache.logging.log4j
    log4j.core.config.Configurator.setLevel("org.apache.spark.scheduler.TaskSetManager", log4j.Level.INFO)


def _source(spark: Any, namesrv: str, pull_batch_size: int) -> Any:
    """The orderly stream of TOPIC both pipelines read."""
    _log_lost_tasks(spark)
    return (spark.readStream.format("rocketmq").option("nameServer", namesrv)
            .option("topic", TOPIC).option("consumerGroup", GROUP).option("consumeMode", "orderly")
            .option("lockOwner", LOCK_OWNER).option("startingOffsets", "earliest")
            .option("queueRefreshIntervalMs", "1000").option("pullBatchSize", str(pull_batch_size))
            .load())


def run_query(spark: Any, namesrv: str, checkpoint: str, out: str, trigger_ms: int,
              pull_batch_size: int) -> None:
    """The orderly query of TOPIC into parquet, until the process is killed."""
    df = _source(spark, namesrv, pull_batch_size)
    q = (df.select("topic", "broker", "queue_id", "queue_offset", "body")
         .writeStream.format("parquet").option("path", out)
         .option("checkpointLocation", checkpoint)
         .trigger(processingTime=f"{trigger_ms} milliseconds").start())
    print("STARTED", flush=True)
    q.awaitTermination()


def run_exactly_once_query(spark: Any, namesrv: str, checkpoint: str, trigger_ms: int,
                           pull_batch_size: int) -> None:
    """The orderly query of TOPIC into OUT_TOPIC with deliveryGuarantee=exactly-once, each
    row keyed by its body's sharding key (the text before the first ':'), until killed."""
    from pyspark.sql import functions as F

    df = _source(spark, namesrv, pull_batch_size)
    q = (df.select("body", F.split(F.col("body").cast("string"), ":")[0].alias("sharding_key"))
         .writeStream.format("rocketmq").option("nameServer", namesrv).option("topic", OUT_TOPIC)
         .option("deliveryGuarantee", "exactly-once").option("transactionalId", TXN_ID)
         .option("producerGroup", PRODUCER_GROUP).option("checkpointLocation", checkpoint)
         .trigger(processingTime=f"{trigger_ms} milliseconds").start())
    print("STARTED", flush=True)
    q.awaitTermination()


class Driver:
    """``chaos.py drive`` in a process group of its own, so SIGKILL takes its JVM and
    Python workers with it (not the sidecar, which runs in a session of its own)."""

    def __init__(self, work: Path, namesrv: str, sidecar_dir: Path, *, trigger_ms: int = 500,
                 pull_batch_size: int = 32, pipeline: str = PARQUET) -> None:
        self.work, self.namesrv, self.sidecar_dir = work, namesrv, sidecar_dir
        self.trigger_ms, self.pull_batch_size = trigger_ms, pull_batch_size
        self.pipeline = pipeline
        self.checkpoint, self.out = work / "checkpoint", work / "out"
        self.log = work / "driver.log"
        self.proc: subprocess.Popen | None = None
        self.starts = 0

    def start(self) -> None:
        env = dict(os.environ)
        env["PYSPARK_PYTHON"] = env["PYSPARK_DRIVER_PYTHON"] = sys.executable
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
        env["ROCKETMQ_SPARK_SIDECAR_DIR"] = str(self.sidecar_dir)
        env.pop("ROCKETMQ_NAMESRV", None)
        local = self.work / "spark-local"
        local.mkdir(parents=True, exist_ok=True)
        with open(self.log, "ab") as out:
            out.write(f"\n==== driver start {self.starts + 1} ====\n".encode())
            out.flush()
            self.proc = subprocess.Popen(
                [sys.executable, str(Path(__file__).resolve()), "drive", "--namesrv", self.namesrv,
                 "--checkpoint", str(self.checkpoint), "--out", str(self.out),
                 "--local-dir", str(local), "--trigger-ms", str(self.trigger_ms),
                 "--pull-batch-size", str(self.pull_batch_size), "--pipeline", self.pipeline],
                cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        self.starts += 1

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(30)

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def task_failures(self) -> int:
        """Tasks Spark saw fail (and retried), from the driver's log: blamed on the task or
        on its executor alone (``_log_lost_tasks``)."""
        text = self.log_text()
        return text.count("Lost task ") + text.count(LOST_WITH_EXECUTOR)


# ------------------------------------------------------------------ the producer

class Producer:
    """Sends ``batch`` messages to one queue after another every ``pause`` seconds from a
    thread; records the keys of acknowledged sends and the digest of the body sent at each.
    A failed send (broker down) is retried with new messages after a short pause: whether it
    was stored is unknown, so it is not counted, and the check tolerates its bodies (each
    once) at positions nobody acknowledged. Every attempt's bodies are unique, so a body in
    the sink names the one send it came from. Each body starts with its sharding key
    (``_body``), every key owned by one source queue."""

    def __init__(self, namesrv: str, *, batch: int = 4, pause: float = 0.05) -> None:
        from rocketmq_spark.client import ClientConfig, MQClient

        self.client = MQClient(ClientConfig.parse(namesrv, request_timeout=2.0))
        self.batch, self.pause = batch, pause
        self._acked: list[Key] = []
        self._bodies: dict[Key, Digest] = {}     # acknowledged position -> body sent there
        self._unsure: list[Digest] = []          # bodies of sends not acknowledged (yet)
        self._mutex = threading.Lock()
        self.failures = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="chaos-producer", daemon=True)

    def _run(self) -> None:
        from rocketmq_spark.structs import Message

        queues = self.client.publish_queues(TOPIC)
        i = attempt = 0
        while not self._stop.is_set():
            q = queues[i % len(queues)]
            bodies = [_body(attempt, k, _key(i % len(queues), k, len(queues)))
                      for k in range(self.batch)]
            digests = [digest(b) for b in bodies]
            attempt += 1
            # unsure until acknowledged: a check that reads the sink meanwhile may find them
            with self._mutex:
                self._unsure.extend(digests)
            try:
                r = self.client.send_batch([Message(TOPIC, b) for b in bodies], queue=q)
            except Exception:  # noqa: BLE001 - broker down: try again shortly
                self.failures += 1
                self._stop.wait(0.2)
                continue
            if r.status == "SEND_OK":
                keys = [(TOPIC, q.broker_name, q.queue_id, r.queue_offset + k) for k in range(self.batch)]
                with self._mutex:
                    self._acked.extend(keys)
                    self._bodies.update(zip(keys, digests))
                    del self._unsure[-len(digests):]     # this thread alone appends to it
            i += 1
            self._stop.wait(self.pause)

    def start(self) -> "Producer":
        self._thread.start()
        return self

    def acked(self) -> list[Key]:
        with self._mutex:
            return list(self._acked)

    def bodies(self) -> tuple[dict[Key, Digest], list[Digest]]:
        """(acknowledged position -> digest of the body sent there, digests of the sends
        whose outcome is unknown), taken together so no send falls between the two."""
        with self._mutex:
            return dict(self._bodies), list(self._unsure)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)
        self.client.close()


def _key(queue_index: int, k: int, queues: int) -> str:
    """The sharding key of the ``k``-th message of a send to queue ``queue_index``: one of
    the queue's KEYS_PER_QUEUE keys, which no other queue carries, so one Spark partition
    (one source queue) holds all of a key's messages, in their order."""
    return f"k{queue_index + queues * (k % KEYS_PER_QUEUE)}"


def key_of(body: bytes) -> str:
    """The sharding key a body starts with (the exactly-once query's ``sharding_key``)."""
    return body.split(b":", 1)[0].decode()


def _body(attempt: int, k: int, key: str) -> bytes:
    """The ``k``-th body of send ``attempt``: its sharding key, then unique to the send, and
    of varying length (1 to 16 filler bytes), so a row cut short or run into its neighbour
    changes its digest too."""
    return f"{key}:{attempt}-{k}:".encode() + b"." * (1 + (attempt * 7 + k) % 16)


# ------------------------------------------------------------------ body digests

def digest(body: bytes | str) -> Digest:
    """The digest body checks compare; a ``str`` body (a query that cast it to STRING) is
    taken as its UTF-8 bytes."""
    return hashlib.sha256(body.encode() if isinstance(body, str) else body).hexdigest()


@dataclass(frozen=True)
class BodyMismatch:
    kind: str                 # "wrong body", "missing", "duplicated" or "unexpected"
    key: Key | None           # where, when positions are known
    expected: Digest | None
    got: Digest | None

    def __str__(self) -> str:
        where = "" if self.key is None else " at {}/{}/{}@{}".format(*self.key)
        return (f"{self.kind}{where}: expected {(self.expected or '-')[:16]}, "
                f"got {(self.got or '-')[:16]}")


@dataclass(frozen=True)
class BodyCheck:
    """Result of comparing the bodies a pipeline wrote with the bodies sent."""

    rows: int                 # rows compared
    wrong: int = 0            # rows at an acknowledged position with another body there
    missing: int = 0          # acknowledged bodies that appear nowhere they should
    duplicated: int = 0       # copies of a sent body beyond the number sent
    unexpected: int = 0       # rows with a body no send had
    first: tuple[BodyMismatch, ...] = ()

    @property
    def bad(self) -> int:
        return self.wrong + self.missing + self.duplicated + self.unexpected

    @property
    def ok(self) -> bool:
        return self.bad == 0

    def report(self) -> str:
        if self.ok:
            return f"bodies ok: {self.rows} rows match what was sent"
        lines = [f"BODY MISMATCH in {self.rows} rows: {self.wrong} wrong body, {self.missing} "
                 f"missing, {self.duplicated} duplicated, {self.unexpected} unexpected; first "
                 f"{len(self.first)} (sha256 prefixes):"]
        return "\n".join(lines + [f"  {m}" for m in self.first])


class _Mismatches:
    """Counts mismatches by kind, keeping the first few for the report."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self.first: list[BodyMismatch] = []

    def add(self, m: BodyMismatch, n: int = 1) -> None:
        self.counts[m.kind] += n
        if len(self.first) < FIRST_MISMATCHES:
            self.first.append(m)

    def result(self, rows: int) -> BodyCheck:
        c = self.counts
        return BodyCheck(rows, c["wrong body"], c["missing"], c["duplicated"], c["unexpected"],
                         tuple(self.first))


def compare_digests(expected: Mapping[Digest, int], observed: Iterable[Digest], *,
                    optional: Iterable[Digest] = ()) -> BodyCheck:
    """Bodies without positions, for an output whose positions are not the input's (e.g. a
    RocketMQ -> Spark -> RocketMQ pipeline): every digest of ``expected`` appears its count
    of times, each of ``optional`` (a send whose outcome is unknown) at most once more, and
    nothing else appears."""
    seen = Counter(observed)
    may = Counter(optional)
    out = _Mismatches()
    for d, n in expected.items():
        if seen[d] < n:
            out.add(BodyMismatch("missing", None, d, None), n - seen[d])
    for d, n in seen.items():
        over = n - expected.get(d, 0) - may[d]
        if over > 0:
            kind = "duplicated" if d in expected or d in may else "unexpected"
            out.add(BodyMismatch(kind, None, d if kind == "duplicated" else None, d), over)
    return out.result(sum(seen.values()))


def compare_bodies(expected: Mapping[Key, Digest], observed: Iterable[tuple[Key, Digest]], *,
                   required: Callable[[Key], bool] = lambda _: True,
                   optional: Iterable[Digest] = ()) -> BodyCheck:
    """Bodies at their positions, for a source read into a sink: each acknowledged position
    of ``expected`` that is ``required`` (e.g. within the committed range) holds exactly one
    row, with the body sent there; a row at any other position carries a body of
    ``optional`` (a send whose outcome is unknown, which the broker may have stored), each
    at most once. Positions alone would not see a reader returning the wrong bytes."""
    at: dict[Key, list[Digest]] = defaultdict(list)
    elsewhere: list[tuple[Key, Digest]] = []
    rows = 0
    for key, got in observed:
        rows += 1
        if key in expected:
            at[key].append(got)
        else:
            elsewhere.append((key, got))
    out = _Mismatches()
    for key in sorted(expected):            # sorted: the report names the lowest offsets first
        want, got = expected[key], at.get(key, [])
        if not got and required(key):
            out.add(BodyMismatch("missing", key, want, None))
        for g in got:
            if g != want:
                out.add(BodyMismatch("wrong body", key, want, g))
        if len(got) > 1:
            out.add(BodyMismatch("duplicated", key, want, want), len(got) - 1)
    may = Counter(optional)
    for key, got in sorted(elsewhere):
        if may[got] > 0:
            may[got] -= 1
        else:
            out.add(BodyMismatch("unexpected", key, None, got))
    return out.result(rows)


# ------------------------------------------------------------------ invariants

@dataclass(frozen=True)
class Check:
    rows: int                 # rows in the sink (messages in the output topic)
    duplicated: int           # rows beyond the first of each key (output: copies beyond those sent)
    lost: int                 # acknowledged messages of the committed range missing from the sink
    broker_ahead: int         # queues whose group offset on the broker passed the checkpoint
    committed: int            # messages the checkpoint's last committed batch covers
    bodies: BodyCheck         # the sink's bodies against the producer's
    out_of_order: int = 0     # exactly-once pipeline: sharding keys spread or out of order

    @property
    def ok(self) -> bool:
        return (self.duplicated == 0 and self.lost == 0 and self.broker_ahead == 0
                and self.bodies.ok and self.out_of_order == 0)


def covers(end: dict[QueueKey, int], keys: list[Key]) -> bool:
    """Whether committed end offsets ``end`` are past every one of ``keys``."""
    return all(o < end.get((t, b, q), 0) for t, b, q, o in keys)


def keys_out_of_order(output: Mapping[OutQueue, list[bytes]], sent_at: Mapping[Digest, Key]) -> list[str]:
    """Sharding keys whose messages in ``output`` (queue -> bodies in offset order) are on
    more than one queue, or, on their queue, not in the order of their source positions
    ``sent_at``. Bodies of sends never acknowledged have no known position and are left
    out of the order (they are rare: sends cut by a broker kill)."""
    queues: dict[str, set[OutQueue]] = defaultdict(set)
    last: dict[tuple[str, OutQueue], Key] = {}
    bad: set[str] = set()
    for q, bodies in output.items():
        for body in bodies:
            key = key_of(body)
            queues[key].add(q)
            pos = sent_at.get(digest(body))
            if pos is None:
                continue
            if (key, q) in last and pos <= last[(key, q)]:
                bad.add(key)
            last[(key, q)] = pos
    return sorted(bad | {k for k, qs in queues.items() if len(qs) > 1})


def cpp_mismatches(namesrv: str, topic: str, ours: Mapping[OutQueue, list[bytes]],
                   home: Path) -> int | None:
    """Queues of ``topic`` where the C++ client (PyPI ``rocketmq``, tests/sink/readback.py)
    reads other bodies than ``ours``: a second reader that shares no code with ours. None
    when the C++ client is not installed. ``home`` becomes this process's HOME (the C++
    client logs there), so call it only once no more drivers will be started."""
    try:
        from tests.cppclient import isolate_home
    except (ImportError, OSError):     # no package, or its librocketmq.so does not load
        return None
    from tests.cluster import ClusterHandle
    from tests.sink.readback import cpp_read

    isolate_home(home)
    cpp = cpp_read(ClusterHandle(namesrv, external=False), topic)
    theirs = {q: [m.body for m in msgs] for q, msgs in cpp.items()}
    return sum(1 for q in set(theirs) | set(ours) if theirs.get(q, []) != ours.get(q, []))


@dataclass
class Rig:
    """Broker, producer and driver of one chaos run, in ``work``."""

    work: Path
    trigger_ms: int = 500
    pull_batch_size: int = 32
    pipeline: str = PARQUET
    replicated: bool = False                 # broker-a master + slave of their own processes
    broker: BrokerProcess = field(init=False)
    nodes: dict[str, "JoinedBroker"] = field(init=False, default_factory=dict)
    topics: tuple[str, ...] = field(init=False, default=())     # NAME:QUEUES, created on broker-a
    producer: Producer = field(init=False)
    driver: Driver = field(init=False)
    admin: "MQClient" = field(init=False)
    sidecar_dir: Path = field(init=False)

    def __post_init__(self) -> None:
        self.work.mkdir(parents=True, exist_ok=True)
        # short: a Unix socket path is limited to 107 bytes
        self.sidecar_dir = Path(tempfile.mkdtemp(prefix="rmq-chaos-sc-"))
        self.sidecar_dir.chmod(0o700)
        eo = self.pipeline == EXACTLY_ONCE
        topics = (f"{TOPIC}:{QUEUES}",) + ((f"{OUT_TOPIC}:{QUEUES}",) if eo else ())
        # exactly once: half messages of a killed writer are checked back within seconds
        checks = TransactionChecks() if eo else None
        if not self.replicated:
            self.broker = BrokerProcess(self.work / "rocketmq", topics=topics, log=self.work / "broker.log",
                                        transactions=checks)
            return
        from tests.joined import JoinedBroker

        self.broker = BrokerProcess(self.work / "namesrv", brokers=0, log=self.work / "namesrv.log")
        extra = ("--slave-sync-interval-ms", SLAVE_SYNC_MS) + tuple(checks.args() if checks else ())
        self.nodes = {role: JoinedBroker(self.broker.namesrv_addr, "broker-a", broker_id,
                                         self.work / f"broker-a-{broker_id}", extra)
                      for role, broker_id in ((MASTER, 0), ("slave", 1))}
        self.topics = topics

    def start(self, timeout: float = 120.0) -> "Rig":
        from rocketmq_spark.client import ClientConfig, MQClient

        self.broker.start()
        self.admin = MQClient(ClientConfig.parse(self.broker.namesrv_addr, request_timeout=2.0))
        if self.replicated:
            for node in self.nodes.values():
                node.start()
            for t in self.topics:
                name, queues = t.split(":")
                self.admin.create_topic(name, queues=int(queues), brokers=["broker-a"])
                self.wait(lambda: self._routed(name, int(queues)), timeout, f"the route of {name}")
        self.producer = Producer(self.broker.namesrv_addr).start()
        self.driver = Driver(self.work, self.broker.namesrv_addr, self.sidecar_dir,
                             trigger_ms=self.trigger_ms, pull_batch_size=self.pull_batch_size,
                             pipeline=self.pipeline)
        self.driver.start()
        self.wait(lambda: committed_batches(self.driver.checkpoint) and self.rows_committed() > 0,
                  timeout, "the first committed batch with rows")
        return self

    def _routed(self, topic: str, queues: int) -> bool:
        try:
            return len(self.admin.publish_queues(topic, refresh=True)) >= queues
        except Exception:  # noqa: BLE001 - not routed yet
            return False

    def close(self) -> None:
        for step in (lambda: self.producer.stop(), lambda: self.driver.kill(), lambda: self.admin.close(),
                     *(node.stop for node in self.nodes.values()), lambda: self.broker.stop()):
            try:
                step()
            except Exception:  # noqa: BLE001 - tear down the rest regardless
                pass
        pid = sidecar_pid(self.sidecar_dir)
        if pid is not None:
            os.kill(pid, signal.SIGTERM)
        # the sidecars' log (every one started in the run appends to it) outlives its
        # directory, beside the driver's and the broker's: a failed run's evidence
        from rocketmq_spark.sidecar.spawn import LOG_NAME

        if (self.sidecar_dir / LOG_NAME).exists():
            shutil.copyfile(self.sidecar_dir / LOG_NAME, self.work / "sidecar.log")
        shutil.rmtree(self.sidecar_dir, ignore_errors=True)

    # ------------------------------------------------------------ waiting

    def wait(self, pred: Callable[[], object], timeout: float, what: str, *,
             restart_driver: bool = False) -> None:
        """Poll ``pred`` until true. With ``restart_driver``, a driver whose query failed is
        started again on its checkpoint (counted in ``driver.starts``)."""
        deadline = time.monotonic() + timeout
        while not pred():
            if not self.driver.alive():
                if not restart_driver:
                    raise AssertionError(f"the driver exited waiting for {what}:\n"
                                         f"{self.driver.log_text()[-4000:]}")
                self.driver.start()
            if time.monotonic() >= deadline:
                raise AssertionError(f"timed out after {timeout:g} s waiting for {what}; "
                                     f"driver log ends with:\n{self.driver.log_text()[-3000:]}")
            time.sleep(0.05)

    def rows_committed(self) -> int:
        return sum(committed_end(self.driver.checkpoint).values())

    def mid_batch(self) -> bool:
        """A micro-batch is planned (offsets/N written) and not yet done (no commits/N)."""
        chk = self.driver.checkpoint
        planned = sorted(int(p.name) for p in (chk / "offsets").iterdir() if p.name.isdigit()) \
            if (chk / "offsets").is_dir() else []
        done = committed_batches(chk)
        if not planned or (done and done[-1] >= planned[-1]):
            return False
        begin = batch_end_offsets(chk, done[-1]) if done else {}
        return sum(batch_end_offsets(chk, planned[-1]).values()) > sum(begin.values())

    def wait_caught_up(self, keys: list[Key], timeout: float) -> float:
        """Seconds until the checkpoint commits past every key (restarting a failed driver)."""
        t0 = time.monotonic()
        self.wait(lambda: covers(committed_end(self.driver.checkpoint), keys), timeout,
                  f"the query to commit {len(keys)} acknowledged messages", restart_driver=True)
        return time.monotonic() - t0

    # ------------------------------------------------------------ faults

    def kill(self, victim: str) -> None:
        if victim == "driver":
            self.driver.kill()
            self.driver.start()
        elif victim == "sidecar":
            pid = sidecar_pid(self.sidecar_dir)
            if pid is None:
                raise AssertionError(f"no sidecar answers in {self.sidecar_dir}")
            os.kill(pid, signal.SIGKILL)
        elif victim == "broker":
            self.broker.kill()
            self.broker.start()
        elif victim == MASTER:
            self.nodes[MASTER].kill()
            self.nodes[MASTER].start()
        else:
            raise ValueError(f"unknown victim {victim!r}: expected one of {', '.join(VICTIMS)}")

    # ------------------------------------------------------------ invariants

    def committed(self) -> tuple[dict[QueueKey, int], int]:
        """The checkpoint's committed end offsets, and how many queues' group offsets on the
        broker pass them. The broker's offsets are read first: the checkpoint read after
        them can only be newer, so a queue counted ahead really was."""
        from rocketmq_spark.remoting.route import MessageQueue

        queues = [MessageQueue(TOPIC, b, q) for (t, b, q) in committed_end(self.driver.checkpoint)]
        group = {(q.topic, q.broker_name, q.queue_id): self.admin.query_consumer_offset(GROUP, q)
                 for q in queues}
        end = committed_end(self.driver.checkpoint)
        return end, sum(1 for q, off in group.items() if off is not None and off > end.get(q, 0))

    def check(self, acked: list[Key]) -> Check:
        if self.pipeline == EXACTLY_ONCE:
            return self.check_output()[0]
        end, ahead = self.committed()
        sink = read_file_sink(self.driver.out, ["topic", "broker", "queue_id", "queue_offset", "body"])
        keys = list(zip(*(sink.column(c).to_pylist() for c in ("topic", "broker", "queue_id", "queue_offset"))))
        present = set(keys)
        lost = sum(1 for k in acked if k[3] < end.get(k[:3], 0) and k not in present)
        # The producer's record is taken after the sink was read: every row there was
        # stored before, so its send is acknowledged by now, or in flight, or failed.
        sent, unsure = self.producer.bodies()
        bodies = compare_bodies(sent, zip(keys, map(digest, sink.column("body").to_pylist())),
                                required=lambda k: k[3] < end.get(k[:3], 0), optional=unsure)
        return Check(len(keys), len(keys) - len(present), lost, ahead, sum(end.values()), bodies)

    def check_output(self) -> tuple[Check, dict[OutQueue, list[bytes]]]:
        """The exactly-once pipeline's output topic, read back whole, against the producer:
        each acknowledged body of the committed range exactly once, any other send's (a
        later batch being committed, a send of unknown outcome) at most once, nothing else;
        each sharding key on one queue in source order. Returns the check and the output
        (queue -> bodies in offset order)."""
        end, ahead = self.committed()
        # read after the checkpoint: every batch it marks done is committed in the topic
        output = {(q.broker_name, q.queue_id): [m.payload() for m in msgs]
                  for q, msgs in read_topic(self.admin, OUT_TOPIC, READER_GROUP).items()}
        # read after the output: each body there was sent before, acknowledged or unsure
        sent, unsure = self.producer.bodies()
        expected = Counter(d for k, d in sent.items() if k[3] < end.get(k[:3], 0))
        optional = [d for k, d in sent.items() if k[3] >= end.get(k[:3], 0)] + unsure
        bodies = compare_digests(expected, (digest(b) for msgs in output.values() for b in msgs),
                                 optional=optional)
        disorder = keys_out_of_order(output, {d: k for k, d in sent.items()})
        check = Check(bodies.rows, bodies.duplicated, bodies.missing, ahead, sum(end.values()),
                      bodies, len(disorder))
        return check, output


# ------------------------------------------------------------------ the cycles

def run(cycles: int, seed: int, work: Path, *, victims: tuple[str, ...] = DEFAULT_VICTIMS,
        pipeline: str = PARQUET, out: Callable[[str], None] = print) -> list[dict[str, object]]:
    rng = random.Random(seed)
    rig = Rig(work, pipeline=pipeline, replicated=MASTER in victims)
    eo = pipeline == EXACTLY_ONCE
    rows: list[dict[str, object]] = []
    out(f"chaos: {cycles} cycles, seed {seed}, pipeline {pipeline}, work {work}")
    try:
        rig.start()
        for cycle in range(1, cycles + 1):
            time.sleep(rng.uniform(0.5, 2.0))           # steady state for a moment
            rig.wait(rig.mid_batch, 60, "a micro-batch under way", restart_driver=True)
            victim = rng.choice(victims)
            before = rig.producer.acked()
            starts, failed_tasks = rig.driver.starts, rig.driver.task_failures()
            t_kill = time.monotonic()
            rig.kill(victim)
            rig.wait_caught_up(before, 180)
            recovery = time.monotonic() - t_kill
            acked = rig.producer.acked()
            rig.wait_caught_up(acked, 180)
            c = rig.check(acked)
            row = {"cycle": cycle, "killed": victim, "rows": c.rows, "acked": len(acked),
                   "lost": c.lost, "duplicated": c.duplicated, "broker>chk": c.broker_ahead,
                   "bad bodies": c.bodies.bad, "recovery s": round(recovery, 1),
                   "driver restarts": rig.driver.starts - starts - (victim == "driver"),
                   "failed tasks": rig.driver.task_failures() - failed_tasks}
            if eo:
                row["keys out of order"] = c.out_of_order
                row["C++ queues differ"] = "-"          # read with the C++ client at the end only
            rows.append(row)
            out(f"cycle {cycle}: " + ", ".join(f"{k}={v}" for k, v in row.items()))
            if not c.bodies.ok:
                out(c.bodies.report())
        rig.producer.stop()
        acked = rig.producer.acked()
        rig.wait_caught_up(acked, 180)
        final, output = rig.check_output() if eo else (rig.check(acked), {})
        out(f"final: rows={final.rows} acked={len(acked)} lost={final.lost} "
            f"duplicated={final.duplicated} broker>chk={final.broker_ahead} "
            f"bad bodies={final.bodies.bad} "
            + (f"keys out of order={final.out_of_order} " if eo else "")
            + f"producer failures={rig.producer.failures} sidecar dir={rig.sidecar_dir}")
        out(final.bodies.report())
        end = {"cycle": "end", "killed": "-", "rows": final.rows, "acked": len(acked),
               "lost": final.lost, "duplicated": final.duplicated,
               "broker>chk": final.broker_ahead, "bad bodies": final.bodies.bad,
               "recovery s": 0.0, "driver restarts": 0,
               "failed tasks": rig.driver.task_failures()}
        if eo:
            end["keys out of order"] = final.out_of_order
            # a second reader: the C++ client must see the very bodies ours saw, queue by queue
            rig.driver.kill()            # no driver starts after this: HOME changes below
            differ = cpp_mismatches(rig.broker.namesrv_addr, OUT_TOPIC, output, work / "cpp-home")
            out("C++ read back: " + ("skipped (no rocketmq package)" if differ is None else
                                     f"{differ} queues differ from ours"))
            end["C++ queues differ"] = "skipped" if differ is None else differ
        rows.append(end)
    finally:
        rig.close()
    return rows


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["drive"]:
        return drive(argv[1:])
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cycles", type=int, default=10, help="kill cycles (default 10)")
    p.add_argument("--seed", type=int, default=None, help="random seed (default: random)")
    p.add_argument("--work", default=None, help="working directory (default: a new temporary one, "
                                                "removed afterwards)")
    p.add_argument("--victims", default=",".join(DEFAULT_VICTIMS),
                   help=f"comma-separated processes to choose from ({', '.join(VICTIMS)}; default "
                        "driver,sidecar,broker; master runs broker-a as a master and a slave, and goes "
                        "without broker)")
    p.add_argument("--pipeline", choices=PIPELINES, default=PARQUET,
                   help="parquet (default): the source into a parquet file sink; exactly-once: "
                        f"into the rocketmq sink, deliveryGuarantee=exactly-once, topic {OUT_TOPIC}")
    args = p.parse_args(argv)
    if args.cycles < 1:
        p.error(f"--cycles must be >= 1, got {args.cycles}")
    victims = tuple(v.strip() for v in args.victims.split(",") if v.strip())
    unknown = [v for v in victims if v not in VICTIMS]
    if unknown or not victims:
        p.error(f"--victims: unknown {unknown or args.victims!r}; choose from {', '.join(VICTIMS)}")
    if {"broker", MASTER} <= set(victims):
        p.error("--victims: broker and master do not go together (master runs broker-a with a slave)")
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="rmq-chaos-"))
    try:
        rows = run(args.cycles, seed, work, victims=victims, pipeline=args.pipeline)
    finally:
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)
    print(table(rows))
    # each check covers everything so far: the worst cycle is the figure
    figures = ("lost", "duplicated", "broker>chk", "bad bodies") + \
        (("keys out of order",) if args.pipeline == EXACTLY_ONCE else ())
    worst = {k: max(int(r[k]) for r in rows) for k in figures}  # type: ignore[call-overload]
    cpp = rows[-1].get("C++ queues differ")
    print(f"RESULT cycles={args.cycles} lost={worst['lost']} duplicated={worst['duplicated']} "
          f"broker_ahead={worst['broker>chk']} bad_bodies={worst['bad bodies']}"
          + (f" out_of_order_keys={worst['keys out of order']} cpp_queues_differ={cpp}"
             if args.pipeline == EXACTLY_ONCE else ""))
    return 1 if any(worst.values()) or isinstance(cpp, int) and cpp > 0 else 0


if __name__ == "__main__":
    sys.exit(main())
