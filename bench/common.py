"""Shared by the benchmarks: an embedded broker in a subprocess, timing, tables."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# Where the benchmarks that pin place things: the broker on one CPU (as a remote broker
# would be), what the Spark host runs (Spark, its workers, the sidecar) on the other.
HOST_CPU, BROKER_CPU = 0, 1


def _compiled_once() -> None:
    """Write the package's bytecode, as ``pip install`` does: from a source checkout with
    PYTHONDONTWRITEBYTECODE set, every process that imports it (the sidecar, Spark's source
    runner and Python workers) would compile its modules again, a cost no install pays."""
    import compileall

    compileall.compile_dir(str(ROOT / "rocketmq_spark"), quiet=1)


_compiled_once()

if TYPE_CHECKING:
    from rocketmq_spark.client import MQClient
    from rocketmq_spark.remoting.message import MessageExt
    from rocketmq_spark.remoting.route import MessageQueue


@contextmanager
def broker_process(data_dir: str | None = None, *, flush: str = "async",
                   max_transfer_count: int | None = None) -> Iterator[str]:
    """``rocketmq-spark broker`` in its own process (a ``BrokerProcess``), stopped on exit;
    yields the NameServer address."""
    root = Path(tempfile.mkdtemp(prefix="rmq-bench-") if data_dir is None else data_dir)
    with BrokerProcess(root / "data", flush=flush, log=root / "broker.log",
                       max_transfer_count=max_transfer_count) as broker:
        yield broker.namesrv_addr


def produce_fast(mq: "MQClient", queues: "list[MessageQueue]", n: int, size: int = 32,
                 batch: int = 256) -> float:
    """``n`` messages of ``size`` bytes with ``send_batch``, ``batch`` at a time, round robin
    over ``queues``; returns the seconds it took."""
    from rocketmq_spark.structs import Message

    body = b"x" * size
    with Timer() as t:
        sent = i = 0
        while sent < n:
            k = min(batch, n - sent)
            q = queues[i % len(queues)]
            r = mq.send_batch([Message(q.topic, body)] * k, queue=q)
            if r.status != "SEND_OK":
                raise RuntimeError(f"send_batch: {r.status}")
            sent, i = sent + k, i + 1
    return t.seconds


def stored_properties(mq: "MQClient", queue: "MessageQueue") -> dict[str, str]:
    """The properties of the first message stored in ``queue`` besides its UNIQ_KEY: what
    the ceiling source's rows carry to be shaped like the ones read from that broker."""
    res = mq.pull(queue, 0, group="bench-shape", max_nums=1)
    if not res.messages:
        raise RuntimeError(f"no message stored in {queue}")
    return {k: v for k, v in res.messages[0].properties.items() if k != "UNIQ_KEY"}


class Timer:
    def __enter__(self) -> "Timer":
        self.start = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.seconds = time.perf_counter() - self.start


def local_spark(app_name: str, **conf: str) -> Any:
    """The benchmarks' Spark: local[2], no UI, 2 shuffle partitions, Python workers reused,
    errors only in the log; ``conf`` adds settings."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = (SparkSession.builder.master("local[2]").appName(app_name)
               .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
               .config("spark.python.worker.reuse", "true"))
    for key, value in conf.items():
        builder = builder.config(key, value)
    s = builder.getOrCreate()
    s.sparkContext.setLogLevel("ERROR")
    return s


def table(rows: list[dict[str, object]]) -> str:
    if not rows:
        return "(no rows)"
    cols = list(rows[0])
    widths = {c: max(len(c), *(len(_fmt(r[c])) for r in rows)) for c in cols}
    lines = [" | ".join(c.ljust(widths[c]) for c in cols), "-+-".join("-" * widths[c] for c in cols)]
    lines += [" | ".join(_fmt(r[c]).rjust(widths[c]) for c in cols) for r in rows]
    return "\n".join(lines)


def _fmt(v: object) -> str:
    return f"{v:,.1f}" if isinstance(v, float) else str(v)


def env_int(name: str, default: int) -> int:
    return int(os.environ.get(name, default))


# ------------------------------------------------------------------ restartable broker

def free_port() -> int:
    """A TCP port nothing listens on right now (for a NameServer that must keep its port
    across restarts)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass(frozen=True)
class TransactionChecks:
    """When the brokers check half messages back (the broker command's transaction flags).
    The broker's defaults (6 s old, looked for every 60 s, 15 times) leave a dead writer's
    half messages unresolved for longer than a benchmark runs; these resolve them within
    seconds, so a run goes through check-backs and give-ups, not only clean commits."""

    timeout_ms: int = 1000          # a half message this old is checked back
    interval_ms: int = 1000         # how often the brokers look
    check_max: int = 3              # check-backs before it is given up on

    def args(self) -> list[str]:
        return ["--transaction-timeout-ms", str(self.timeout_ms),
                "--transaction-check-interval-ms", str(self.interval_ms),
                "--transaction-check-max", str(self.check_max)]


class BrokerProcess:
    """``rocketmq-spark broker`` as a subprocess on a fixed data directory and NameServer
    port, which can be killed (SIGKILL) and started again on the same data: the brokers
    reuse their previous ports, so clients find everything where it was.

        b = BrokerProcess(data_dir, topics=("orders:4",)).start()
        b.namesrv_addr ... b.kill() ... b.start() ... b.stop()
    """

    def __init__(self, data_dir: str | Path, *, namesrv_port: int | None = None,
                 topics: tuple[str, ...] = (), flush: str = "async", brokers: int = 1,
                 log: str | Path | None = None, max_transfer_count: int | None = None,
                 transactions: TransactionChecks | None = None) -> None:
        self.data_dir = Path(data_dir)
        self.port = namesrv_port or free_port()
        self.topics, self.flush, self.brokers = topics, flush, brokers
        self.max_transfer_count = max_transfer_count
        self.transactions = transactions
        self.log = Path(log) if log else self.data_dir.with_name(self.data_dir.name + ".log")
        self.proc: subprocess.Popen | None = None
        self.starts = 0
        self.broker_addrs: dict[str, str] = {}      # broker name -> address, once started

    @property
    def namesrv_addr(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return None if self.proc is None else self.proc.pid

    def start(self, timeout: float = 60.0) -> "BrokerProcess":
        if self.proc is not None and self.proc.poll() is None:
            return self
        self.data_dir.mkdir(parents=True, exist_ok=True)
        args = [sys.executable, "-m", "rocketmq_spark.cli", "broker", "--namesrv-port", str(self.port),
                "--data-dir", str(self.data_dir), "--flush", self.flush, "--brokers", str(self.brokers)]
        for t in self.topics:
            args += ["--topic", t]
        if self.max_transfer_count is not None:
            args += ["--max-transfer-count", str(self.max_transfer_count)]
        if self.transactions is not None:
            args += self.transactions.args()
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
        deadline = time.monotonic() + timeout
        while True:
            with open(self.log, "ab") as out:
                self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=out, text=True,
                                             cwd=ROOT, env=env, start_new_session=True)
            assert self.proc.stdout is not None
            line = self.proc.stdout.readline()       # the ready line, or "" when it exited
            if "nameServer=" in line:
                self.starts += 1
                self.broker_addrs = dict(w.split("=", 1) for w in line.split()
                                         if w.startswith("broker-") and "=" in w)
                return self
            self.proc.wait()
            # the port may still be held for a moment by the process killed just before
            if time.monotonic() >= deadline:
                raise RuntimeError(f"the broker did not start on {self.namesrv_addr} within "
                                   f"{timeout:g} s; see {self.log}")
            time.sleep(0.2)

    def kill(self) -> None:
        """SIGKILL: no shutdown hook runs, as when a machine dies."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.kill()

    def __enter__(self) -> "BrokerProcess":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def read_topic(client: "MQClient", topic: str, group: str) -> "dict[MessageQueue, list[MessageExt]]":
    """Every message of ``topic`` now, queue by queue in offset order, pulled from offset 0
    (under ``group``, whose offsets the pulls leave alone)."""
    from rocketmq_spark.structs import PullStatus

    out: dict[MessageQueue, list[MessageExt]] = {}
    for q in sorted(client.subscribe_queues(topic, refresh=True)):
        msgs: list[MessageExt] = []
        offset = 0
        while True:
            r = client.pull(q, offset, group=group, max_nums=32)
            if r.status is not PullStatus.FOUND:
                break
            if r.next_begin_offset <= offset:
                raise RuntimeError(f"a pull of {q} at {offset} did not advance")
            msgs.extend(r.messages)
            offset = r.next_begin_offset
        out[q] = msgs
    return out


# ------------------------------------------------------------------ Spark checkpoints and file sinks

def file_sink_files(path: str | Path) -> list[Path]:
    """The data files a Spark streaming file sink committed: those its ``_spark_metadata``
    log lists (what ``spark.read`` sees), not leftovers of failed tasks or of a batch the
    driver died in."""
    import json

    log_dir = Path(path) / "_spark_metadata"
    entries: dict[int, Path] = {}
    compact = -1
    for p in log_dir.iterdir() if log_dir.is_dir() else ():
        name = p.name
        if name.endswith(".compact") and name[:-8].isdigit():
            compact = max(compact, int(name[:-8]))
            entries[int(name[:-8])] = p
        elif name.isdigit():
            entries.setdefault(int(name), p)
    files: dict[str, bool] = {}
    for batch in sorted(b for b in entries if b >= compact):
        for line in entries[batch].read_text().splitlines()[1:]:     # after the version line
            if line.strip():
                status = json.loads(line)
                files[status["path"]] = status.get("action", "add") == "add"
    return [Path(p.removeprefix("file://").removeprefix("file:")) for p, added in sorted(files.items())
            if added]


def read_file_sink(path: str | Path, columns: list[str] | None = None):  # type: ignore[no-untyped-def]
    """The rows a Spark streaming file sink committed (``file_sink_files``), as one pyarrow
    Table."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    tables = [pq.read_table(f, columns=columns) for f in file_sink_files(path)]
    if not tables:
        return pa.table({c: [] for c in columns or []})
    return pa.concat_tables(tables)


def committed_batches(checkpoint: str | Path) -> list[int]:
    """Ids of the batches a checkpoint marks done (``commits/N``), ascending."""
    d = Path(checkpoint) / "commits"
    return sorted(int(p.name) for p in d.iterdir() if p.name.isdigit()) if d.is_dir() else []


def batch_end_offsets(checkpoint: str | Path, batch_id: int) -> dict[tuple[str, str, int], int]:
    """The rocketmq source's end offsets of batch ``batch_id``: (topic, broker, queue id) ->
    next offset to read. ``offsets/N`` holds a version line, a metadata line and one line
    per source."""
    import json

    lines = (Path(checkpoint) / "offsets" / str(batch_id)).read_text().splitlines()
    out: dict[tuple[str, str, int], int] = {}
    for topic, brokers in json.loads(lines[2]).items():
        for broker, queues in brokers.items():
            for qid, off in queues.items():
                out[(topic, broker, int(qid))] = int(off)
    return out


def committed_end(checkpoint: str | Path) -> dict[tuple[str, str, int], int]:
    """End offsets of the last batch the checkpoint marks done ({} before the first)."""
    done = committed_batches(checkpoint)
    return batch_end_offsets(checkpoint, done[-1]) if done else {}


# ------------------------------------------------------------------ auto-started sidecars

def sidecar_pid(runtime_dir: str | Path, timeout: float = 2.0) -> int | None:
    """Pid of the sidecar answering Health on ``runtime_dir/sidecar.sock``, or None."""
    from rocketmq_spark.errors import RocketMQError
    from rocketmq_spark.sidecar.client import SidecarClient

    import grpc

    sock = Path(runtime_dir) / "sidecar.sock"
    if not sock.exists():
        return None
    channel = grpc.insecure_channel(f"unix:{sock}")   # its own: a probe, not the shared one
    try:
        return SidecarClient(f"unix:{sock}", channel=channel).health(timeout=timeout).pid
    except RocketMQError:
        return None
    finally:
        channel.close()


# ------------------------------------------------------------------ CPU by process

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
ROLES = ("broker", "sidecar", "Spark JVM", "Python workers", "driver (Python)", "other")
# a part of the "Spark JVM" role, not a role of its own: the seconds of its JIT compiler
# threads (``cpu_spent(jit=True)``); sums over the roles leave it out
JIT = "Spark JVM: JIT compiler"


@dataclass(frozen=True)
class _Proc:
    ppid: int
    cmd: str
    cpu: float            # seconds of its own (its threads'), children excluded


def _stat_fields(path: str) -> list[str]:
    """The fields of a /proc ``stat`` file after the command name (which may hold spaces):
    [1] the parent pid, [11] and [12] user and system time in ticks, [19] the start time."""
    with open(path) as f:
        stat = f.read()
    return stat[stat.rindex(")") + 2:].split()


def _own_cpu(fields: list[str]) -> float:
    """Seconds of CPU a process or thread spent itself (``_stat_fields``' [11] + [12])."""
    return (int(fields[11]) + int(fields[12])) / _TICK


def _processes(cmds: dict[tuple[int, str], str] | None = None) -> dict[tuple[int, str], _Proc]:
    """(pid, start time) -> its parent, command line and CPU seconds of its own; ``cmds``
    caches command lines by the same key."""
    out: dict[tuple[int, str], _Proc] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = _stat_fields(f"/proc/{entry}/stat")
            key = (int(entry), fields[19])            # a pid is reused: its start time is not
            cmd = None if cmds is None else cmds.get(key)
            if cmd is None:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
                if cmds is not None:
                    cmds[key] = cmd
        except (OSError, ValueError, IndexError):
            continue
        out[key] = _Proc(int(fields[1]), cmd, _own_cpu(fields))
    return out


class _Sampler:
    """Every process's own CPU seconds, read every ``period`` from a thread on ``cpu`` (not
    the host's), so processes that start and end inside the block count too (a reaped
    child's CPU is not charged to its parent at its exit, which may fall in another block)."""

    def __init__(self, period: float, cpu: int | None, jit: bool = False) -> None:
        import threading

        self.period, self.cpu, self.jit = period, cpu, jit
        self.cmds: dict[tuple[int, str], str] = {}
        self.first = _processes(self.cmds)
        self.last = dict(self.first)
        # the JIT compiler threads of this process's JVMs: (pid, tid) -> CPU seconds, at the
        # first reading and at the last (threads come and go: the JVM sizes its compilers)
        self.comms: dict[tuple[int, str], str] = {}
        self.jit_first = self._jit() if jit else {}
        self.jit_last = dict(self.jit_first)
        self.own = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cpu-sampler", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        if self.cpu is not None:
            os.sched_setaffinity(0, {self.cpu})          # this thread only
        start = time.thread_time()
        while not self._stop.wait(self.period):
            self.last.update(_processes(self.cmds))
            if self.jit:
                self.jit_last.update(self._jit())
        self.own = time.thread_time() - start            # not the host's: taken off the driver

    def stop(self) -> dict[tuple[int, str], tuple[_Proc, float]]:
        """key -> (the process, CPU seconds it spent since the first reading)."""
        self._stop.set()
        self._thread.join()
        self.last.update(_processes(self.cmds))
        if self.jit:
            self.jit_last.update(self._jit())
        return {k: (p, p.cpu - (self.first[k].cpu if k in self.first else 0.0))
                for k, p in self.last.items()}

    def jit_seconds(self) -> float:
        """What the JIT compiler threads spent since the first reading."""
        return sum(cpu - self.jit_first.get(k, 0.0) for k, cpu in self.jit_last.items())

    def _jit(self) -> dict[tuple[int, str], float]:
        """CPU seconds of each JIT compiler thread ("C1/C2 CompilerThread<n>") of the JVMs
        this process started."""
        out: dict[tuple[int, str], float] = {}
        parents = {pid: p.ppid for (pid, _), p in self.last.items()}
        for (pid, _), p in self.last.items():
            if not p.cmd.split(" ", 1)[0].endswith("java") or not _descends(pid, os.getpid(), parents):
                continue
            try:
                tids = os.listdir(f"/proc/{pid}/task")
            except OSError:
                continue
            for tid in tids:
                key = (pid, tid)
                try:
                    comm = self.comms.get(key)
                    if comm is None:
                        with open(f"/proc/{pid}/task/{tid}/comm") as f:
                            comm = self.comms[key] = f.read().strip()
                    if "CompilerThre" not in comm:
                        continue
                    out[key] = _own_cpu(_stat_fields(f"/proc/{pid}/task/{tid}/stat"))
                except (OSError, ValueError, IndexError):
                    continue
        return out


@contextmanager
def cpu_spent(sidecar_dir: str, *, period: float = 0.1, sampler_cpu: int | None = None,
              jit: bool = False) -> Iterator[dict[str, float]]:
    """A dict filled on exit with the CPU seconds each role (``ROLES``) spent inside the
    ``with`` block: this process's tree (Spark's JVM, its Python processes, the broker it
    started) and the sidecar of ``sidecar_dir``. Each process's own CPU time is read every
    ``period`` seconds (from a thread pinned to ``sampler_cpu`` when given), so processes
    that start or end inside the block count (up to their last reading); that thread's own
    CPU is not counted. ``jit``: also the part of "Spark JVM" its JIT compiler threads spent
    (under ``JIT``, not a role: not to be added to the others)."""
    sampler = _Sampler(period, sampler_cpu, jit)
    spent: dict[str, float] = {}
    try:
        yield spent
    finally:
        spent.update(_by_role(sampler.stop(), sidecar_dir))
        spent["driver (Python)"] = max(0.0, spent["driver (Python)"] - sampler.own)
        if jit:
            spent[JIT] = sampler.jit_seconds()


def _descends(pid: int, ancestor: int, parents: dict[int, int]) -> bool:
    for _ in range(64):
        if pid == ancestor:
            return True
        pid = parents.get(pid, 0)
        if pid <= 1:
            return False
    return False


def _by_role(seen: dict[tuple[int, str], tuple[_Proc, float]], sidecar_dir: str) -> dict[str, float]:
    parents = {pid: p.ppid for (pid, _), (p, _) in seen.items()}
    me = os.getpid()

    def mine(pid: int) -> bool:
        return _descends(pid, me, parents)

    roles = dict.fromkeys(ROLES, 0.0)
    show = os.environ.get("BENCH_PROCESSES") == "1"     # each process's share, to stderr
    for (pid, _), (p, cpu) in seen.items():
        cmd = p.cmd
        if show and cpu >= 0.05 and (mine(pid) or sidecar_dir in cmd):
            print(f"  {cpu:6.2f} s  pid {pid}  {cmd[:140]}", file=sys.stderr)
        if sidecar_dir in cmd and "sidecar" in cmd:
            roles["sidecar"] += cpu
        elif not mine(pid):
            continue
        elif pid == me:
            roles["driver (Python)"] += cpu
        elif "rocketmq_spark.cli broker" in cmd:
            roles["broker"] += cpu
        elif cmd.split(" ", 1)[0].endswith("java"):
            roles["Spark JVM"] += cpu
        elif "pyspark.daemon" in cmd or "pyspark.worker" in cmd:
            roles["Python workers"] += cpu
        else:
            roles["other"] += cpu
    return roles
