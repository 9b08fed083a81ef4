"""Chaos under load: kill the driver, the sidecar or the broker, again and again, and check
that the orderly stream still holds every acknowledged message exactly once.

    python bench/chaos.py [--cycles 10] [--seed N] [--victims driver,sidecar,broker] [--work DIR]

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

and measures the recovery time: from the kill until every message acknowledged before it
is in a committed batch. Then it checks the invariants: the sink (read through its
``_spark_metadata`` log) holds every acknowledged message of the committed range exactly
once (key topic+broker+queue+offset), each with the very body the producer sent there
(sha256 of the body bytes, see ``compare_bodies``), nothing but sends of the producer's
appears in it, and the group's offsets on the broker never pass what the checkpoint
committed. Prints one table row per cycle (and the first body mismatches, if any); exits 1
if any cycle lost, duplicated or garbled a message.

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

from bench.common import (BrokerProcess, batch_end_offsets, committed_batches,  # noqa: E402
                          committed_end, read_file_sink, sidecar_pid, table)

if TYPE_CHECKING:
    from rocketmq_spark.client import MQClient

ROOT = Path(__file__).resolve().parent.parent
TOPIC = "chaos"
QUEUES = 4
GROUP = "chaos-orderly"
LOCK_OWNER = "chaos-owner"
VICTIMS = ("driver", "sidecar", "broker")

Key = tuple[str, str, int, int]          # topic, broker, queue id, queue offset
QueueKey = tuple[str, str, int]          # topic, broker, queue id
Digest = str                             # sha256 of a message body, hex
FIRST_MISMATCHES = 5                     # mismatches a body check reports one by one


# ------------------------------------------------------------------ the driver process

def drive(argv: list[str]) -> int:
    """The Spark driver: orderly read of TOPIC into parquet until killed."""
    p = argparse.ArgumentParser(prog="chaos.py drive")
    for a in ("--namesrv", "--checkpoint", "--out", "--local-dir"):
        p.add_argument(a, required=True)
    p.add_argument("--trigger-ms", type=int, default=500)
    p.add_argument("--pull-batch-size", type=int, default=32)
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
    run_query(spark, args.namesrv, args.checkpoint, args.out, args.trigger_ms, args.pull_batch_size)
    return 0


def run_query(spark: Any, namesrv: str, checkpoint: str, out: str, trigger_ms: int,
              pull_batch_size: int) -> None:
    """The orderly query of TOPIC into parquet, until the process is killed."""
    spark.sparkContext.setLogLevel("WARN")     # keeps "Lost task ..." (a task failed) in the log
    df = (spark.readStream.format("rocketmq").option("nameServer", namesrv)
          .option("topic", TOPIC).option("consumerGroup", GROUP).option("consumeMode", "orderly")
          .option("lockOwner", LOCK_OWNER).option("startingOffsets", "earliest")
          .option("queueRefreshIntervalMs", "1000").option("pullBatchSize", str(pull_batch_size))
          .load())
    q = (df.select("topic", "broker", "queue_id", "queue_offset", "body")
         .writeStream.format("parquet").option("path", out)
         .option("checkpointLocation", checkpoint)
         .trigger(processingTime=f"{trigger_ms} milliseconds").start())
    print("STARTED", flush=True)
    q.awaitTermination()


class Driver:
    """``chaos.py drive`` in a process group of its own, so SIGKILL takes its JVM and
    Python workers with it (not the sidecar, which runs in a session of its own)."""

    def __init__(self, work: Path, namesrv: str, sidecar_dir: Path, *, trigger_ms: int = 500,
                 pull_batch_size: int = 32) -> None:
        self.work, self.namesrv, self.sidecar_dir = work, namesrv, sidecar_dir
        self.trigger_ms, self.pull_batch_size = trigger_ms, pull_batch_size
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
                 "--pull-batch-size", str(self.pull_batch_size)],
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
        """Tasks Spark saw fail (and retried), from the driver's log."""
        return self.log_text().count("Lost task ")


# ------------------------------------------------------------------ the producer

class Producer:
    """Sends ``batch`` messages to one queue after another every ``pause`` seconds from a
    thread; records the keys of acknowledged sends and the digest of the body sent at each.
    A failed send (broker down) is retried with new messages after a short pause: whether it
    was stored is unknown, so it is not counted, and the check tolerates its bodies (each
    once) at positions nobody acknowledged. Every attempt's bodies are unique, so a body in
    the sink names the one send it came from."""

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
            bodies = [_body(attempt, k) for k in range(self.batch)]
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


def _body(attempt: int, k: int) -> bytes:
    """The ``k``-th body of send ``attempt``: unique to it, and of varying length (1 to 16
    filler bytes), so a row cut short or run into its neighbour changes its digest too."""
    return f"{attempt}-{k}:".encode() + b"." * (1 + (attempt * 7 + k) % 16)


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
    rows: int                 # rows in the sink
    duplicated: int           # rows beyond the first of each key
    lost: int                 # acknowledged messages of the committed range missing from the sink
    broker_ahead: int         # queues whose group offset on the broker passed the checkpoint
    committed: int            # messages the checkpoint's last committed batch covers
    bodies: BodyCheck         # the sink's bodies against the producer's

    @property
    def ok(self) -> bool:
        return self.duplicated == 0 and self.lost == 0 and self.broker_ahead == 0 and self.bodies.ok


def covers(end: dict[QueueKey, int], keys: list[Key]) -> bool:
    """Whether committed end offsets ``end`` are past every one of ``keys``."""
    return all(o < end.get((t, b, q), 0) for t, b, q, o in keys)


@dataclass
class Rig:
    """Broker, producer and driver of one chaos run, in ``work``."""

    work: Path
    trigger_ms: int = 500
    pull_batch_size: int = 32
    broker: BrokerProcess = field(init=False)
    producer: Producer = field(init=False)
    driver: Driver = field(init=False)
    admin: "MQClient" = field(init=False)
    sidecar_dir: Path = field(init=False)

    def __post_init__(self) -> None:
        self.work.mkdir(parents=True, exist_ok=True)
        # short: a Unix socket path is limited to 107 bytes
        self.sidecar_dir = Path(tempfile.mkdtemp(prefix="rmq-chaos-sc-"))
        self.sidecar_dir.chmod(0o700)
        self.broker = BrokerProcess(self.work / "rocketmq", topics=(f"{TOPIC}:{QUEUES}",),
                                    log=self.work / "broker.log")

    def start(self, timeout: float = 120.0) -> "Rig":
        from rocketmq_spark.client import ClientConfig, MQClient

        self.broker.start()
        self.admin = MQClient(ClientConfig.parse(self.broker.namesrv_addr, request_timeout=2.0))
        self.producer = Producer(self.broker.namesrv_addr).start()
        self.driver = Driver(self.work, self.broker.namesrv_addr, self.sidecar_dir,
                             trigger_ms=self.trigger_ms, pull_batch_size=self.pull_batch_size)
        self.driver.start()
        self.wait(lambda: committed_batches(self.driver.checkpoint) and self.rows_committed() > 0,
                  timeout, "the first committed batch with rows")
        return self

    def close(self) -> None:
        for step in (lambda: self.producer.stop(), lambda: self.driver.kill(),
                     lambda: self.admin.close(), lambda: self.broker.stop()):
            try:
                step()
            except Exception:  # noqa: BLE001 - tear down the rest regardless
                pass
        pid = sidecar_pid(self.sidecar_dir)
        if pid is not None:
            os.kill(pid, signal.SIGTERM)
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
        else:
            raise ValueError(f"unknown victim {victim!r}: expected one of {', '.join(VICTIMS)}")

    # ------------------------------------------------------------ invariants

    def check(self, acked: list[Key]) -> Check:
        from rocketmq_spark.remoting.route import MessageQueue

        # the broker's group offsets first: the checkpoint read after them can only be newer
        queues = [MessageQueue(TOPIC, b, q) for (t, b, q) in committed_end(self.driver.checkpoint)]
        group = {(q.topic, q.broker_name, q.queue_id): self.admin.query_consumer_offset(GROUP, q)
                 for q in queues}
        end = committed_end(self.driver.checkpoint)
        sink = read_file_sink(self.driver.out, ["topic", "broker", "queue_id", "queue_offset", "body"])
        keys = list(zip(*(sink.column(c).to_pylist() for c in ("topic", "broker", "queue_id", "queue_offset"))))
        present = set(keys)
        lost = sum(1 for k in acked if k[3] < end.get(k[:3], 0) and k not in present)
        ahead = sum(1 for q, off in group.items() if off is not None and off > end.get(q, 0))
        # The producer's record is taken after the sink was read: every row there was
        # stored before, so its send is acknowledged by now, or in flight, or failed.
        sent, unsure = self.producer.bodies()
        bodies = compare_bodies(sent, zip(keys, map(digest, sink.column("body").to_pylist())),
                                required=lambda k: k[3] < end.get(k[:3], 0), optional=unsure)
        return Check(len(keys), len(keys) - len(present), lost, ahead, sum(end.values()), bodies)


# ------------------------------------------------------------------ the cycles

def run(cycles: int, seed: int, work: Path, *, victims: tuple[str, ...] = VICTIMS,
        out: Callable[[str], None] = print) -> list[dict[str, object]]:
    rng = random.Random(seed)
    rig = Rig(work)
    rows: list[dict[str, object]] = []
    out(f"chaos: {cycles} cycles, seed {seed}, work {work}")
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
            rows.append(row)
            out(f"cycle {cycle}: " + ", ".join(f"{k}={v}" for k, v in row.items()))
            if not c.bodies.ok:
                out(c.bodies.report())
        rig.producer.stop()
        acked = rig.producer.acked()
        rig.wait_caught_up(acked, 180)
        final = rig.check(acked)
        out(f"final: rows={final.rows} acked={len(acked)} lost={final.lost} "
            f"duplicated={final.duplicated} broker>chk={final.broker_ahead} "
            f"bad bodies={final.bodies.bad} "
            f"producer failures={rig.producer.failures} sidecar dir={rig.sidecar_dir}")
        out(final.bodies.report())
        rows.append({"cycle": "end", "killed": "-", "rows": final.rows, "acked": len(acked),
                     "lost": final.lost, "duplicated": final.duplicated,
                     "broker>chk": final.broker_ahead, "bad bodies": final.bodies.bad,
                     "recovery s": 0.0, "driver restarts": 0,
                     "failed tasks": rig.driver.task_failures()})
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
    p.add_argument("--victims", default=",".join(VICTIMS),
                   help=f"comma-separated processes to choose from (default {','.join(VICTIMS)})")
    args = p.parse_args(argv)
    if args.cycles < 1:
        p.error(f"--cycles must be >= 1, got {args.cycles}")
    victims = tuple(v.strip() for v in args.victims.split(",") if v.strip())
    unknown = [v for v in victims if v not in VICTIMS]
    if unknown or not victims:
        p.error(f"--victims: unknown {unknown or args.victims!r}; choose from {', '.join(VICTIMS)}")
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="rmq-chaos-"))
    try:
        rows = run(args.cycles, seed, work, victims=victims)
    finally:
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)
    print(table(rows))
    # each check covers everything so far: the worst cycle is the figure
    worst = {k: max(int(r[k]) for r in rows)  # type: ignore[call-overload]
             for k in ("lost", "duplicated", "broker>chk", "bad bodies")}
    print(f"RESULT cycles={args.cycles} lost={worst['lost']} duplicated={worst['duplicated']} "
          f"broker_ahead={worst['broker>chk']} bad_bodies={worst['bad bodies']}")
    return 1 if any(worst.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
